//! Readiness: is every desired tool where it should be, right now?
//!
//! Ready means: the manifests have been loaded, main_server answered the
//! last GET, and every desired tool is `registered`. Everything else is
//! not ready, each reason in one short sentence:
//! - `pending` and `retrying` are on their way (or backing off);
//! - `conflict`, `rejected` and `waiting_for_role` are settled but are not
//!   what the manifests ask for: the model cannot call the tool, and it
//!   takes a person (or another agent, or main_server gaining a role) to
//!   change that. A probe that should tolerate them probes `/healthz`.
//!
//! An MCP server that has not listed its tools yet makes the sidecar
//! unready (its tools are not even desired yet); one restarting after it
//! listed does not (its last listing stays registered).
//!
//! A manifest file in error does not make the sidecar unready by itself:
//! its last good version is still served (and `/status` shows the error).
//! Pure: a sample in, a verdict out. `/readyz` and the `status` command's
//! exit code both use it, so they always agree.

use serde::{Deserialize, Serialize};

use super::sample::Sample;
use crate::diag::plural;
use crate::mcp::Phase;
use crate::registration::ToolState;

/// At most this many tools are named in the reasons; the rest are counted.
const NAMED_TOOLS: usize = 10;

/// The verdict, as `/readyz` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Readiness {
    pub ready: bool,
    /// Why not; empty when ready.
    pub reasons: Vec<String>,
}

/// Judges a sample.
pub(crate) fn judge(sample: &Sample) -> Readiness {
    let mut reasons = Vec::new();
    if sample.manifests.rescans == 0 {
        reasons.push("the manifests have not been loaded yet".to_owned());
    }
    let ms = &sample.registration.main_server;
    match ms.reachable {
        None => reasons.push("main_server has not been reached yet".to_owned()),
        Some(false) => reasons.push(format!(
            "main_server is unreachable ({}): {}",
            plural(ms.failed_attempts as usize, "failed attempt"),
            ms.last_error.as_deref().unwrap_or("unknown error")
        )),
        Some(true) => {}
    }
    let mut off: Vec<String> = Vec::new();
    for name in sample.desired.tools.keys() {
        match sample.registration.state(name) {
            Some(ToolState::Registered) => {}
            Some(state) => off.push(format!("`{name}` is {}", describe(state))),
            // The engine has not picked up this desired tool yet.
            None => off.push(format!("`{name}` is pending")),
        }
    }
    if !off.is_empty() {
        let total = off.len();
        let mut named: Vec<String> = off.into_iter().take(NAMED_TOOLS).collect();
        if total > NAMED_TOOLS {
            named.push(format!("{} more", total - NAMED_TOOLS));
        }
        reasons.push(format!(
            "{total} of {} tools not registered: {}",
            sample.desired.tools.len(),
            named.join("; ")
        ));
    }
    // A server that never listed has tools nobody can see yet; one that is
    // restarting keeps its last listing registered.
    for m in &sample.mcp {
        if m.listed_at.is_none() && m.tools.is_empty() && m.phase != Phase::Ready {
            reasons.push(format!(
                "MCP server `{}` has not listed its tools yet{}",
                m.name,
                m.last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
    }
    Readiness {
        ready: reasons.is_empty(),
        reasons,
    }
}

fn describe(state: &ToolState) -> String {
    match state {
        ToolState::Conflict { owner, .. } => format!("in conflict (held by source `{owner}`)"),
        ToolState::Rejected { .. } => "rejected by main_server".to_owned(),
        ToolState::WaitingForRole { role: Some(r) } => format!("waiting for role `{r}`"),
        ToolState::WaitingForRole { role: None } => "waiting for any role".to_owned(),
        ToolState::Retrying { attempt, .. } => format!("retrying (attempt {attempt})"),
        ToolState::Pending | ToolState::Registered => state.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::view::tests::sample_with;
    use super::*;

    #[test]
    fn ready_needs_a_loaded_set_a_reachable_server_and_every_tool_registered() {
        let mut s = sample_with(&["a", "b"]);
        assert!(!judge(&s).ready);
        s.registration.main_server.reachable = Some(true);
        s.registration.tools.get_mut("a").unwrap().state = ToolState::Registered;
        let r = judge(&s);
        assert_eq!(r.reasons, ["1 of 2 tools not registered: `b` is pending"]);
        s.registration.tools.get_mut("b").unwrap().state = ToolState::Registered;
        assert_eq!(
            judge(&s),
            Readiness {
                ready: true,
                reasons: vec![]
            }
        );
    }

    #[test]
    fn settled_states_other_than_registered_are_not_ready() {
        let mut s = sample_with(&["a"]);
        s.registration.main_server.reachable = Some(true);
        for state in [
            ToolState::Conflict {
                owner: "plugin:other".into(),
                callback_url: None,
                same_source: false,
            },
            ToolState::Rejected { errors: vec![] },
            ToolState::WaitingForRole { role: None },
        ] {
            s.registration.tools.get_mut("a").unwrap().state = state;
            assert!(!judge(&s).ready);
        }
        assert!(judge(&s).reasons[0].contains("waiting for any role"));
    }

    #[test]
    fn an_unreachable_server_is_not_ready_even_with_registered_tools() {
        let mut s = sample_with(&["a"]);
        s.registration.tools.get_mut("a").unwrap().state = ToolState::Registered;
        s.registration.main_server.reachable = Some(false);
        s.registration.main_server.failed_attempts = 3;
        s.registration.main_server.last_error = Some("connection refused".into());
        assert_eq!(
            judge(&s).reasons,
            ["main_server is unreachable (3 failed attempts): connection refused"]
        );
    }

    #[test]
    fn a_tool_the_engine_has_not_seen_is_pending_and_many_are_summarised() {
        let names: Vec<String> = (0..12).map(|i| format!("t{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut s = sample_with(&refs);
        s.registration.main_server.reachable = Some(true);
        s.registration.tools.clear();
        let r = judge(&s);
        assert!(r.reasons[0].starts_with("12 of 12 tools not registered"));
        assert!(r.reasons[0].ends_with("; 2 more"), "{}", r.reasons[0]);
    }
}
