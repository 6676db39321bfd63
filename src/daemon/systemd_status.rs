//! The one-line summary systemd shows (`STATUS=`): "12/12 tools registered",
//! "main_server unreachable, retry in 3 s". Pure: built from a registration
//! snapshot, sent by the daemon only when it changes.

use std::time::SystemTime;

use crate::registration::{RegistrationSnapshot, ToolState};

/// The summary of a snapshot, at `now`.
pub fn summary(snap: &RegistrationSnapshot, now: SystemTime) -> String {
    if snap.main_server.reachable == Some(false) {
        let retry = snap
            .main_server
            .next_attempt_at
            .and_then(|t| t.duration_since(now).ok())
            .map(|d| format!(", retry in {} s", d.as_secs_f64().ceil() as u64))
            .unwrap_or_default();
        return format!(
            "main_server unreachable ({}){retry}",
            crate::diag::plural(snap.main_server.failed_attempts as usize, "failed attempt")
        );
    }
    let total = snap.tools.len();
    let registered = snap
        .tools
        .values()
        .filter(|t| t.state == ToolState::Registered)
        .count();
    let mut line = format!("{registered}/{total} tools registered");
    let mut others: Vec<String> = Vec::new();
    for (kind, label) in [
        ("pending", "pending"),
        ("retrying", "retrying"),
        ("conflict", "in conflict"),
        ("rejected", "rejected"),
        ("waiting_for_role", "waiting for a role"),
    ] {
        let n = snap
            .tools
            .values()
            .filter(|t| t.state.kind() == kind)
            .count();
        if n > 0 {
            others.push(format!("{n} {label}"));
        }
    }
    if snap.main_server.reachable.is_none() && registered == 0 && total > 0 {
        others.push("main_server not reached yet".into());
    }
    if !others.is_empty() {
        line.push_str(", ");
        line.push_str(&others.join(", "));
    }
    line
}

/// Whether the summary changes with time alone (a "retry in N s"
/// countdown); every other part changes only with the snapshot.
pub(crate) fn counts_down(snap: &RegistrationSnapshot) -> bool {
    snap.main_server.reachable == Some(false) && snap.main_server.next_attempt_at.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::{Reachability, ToolRegistration};
    use std::time::Duration;

    fn tool(state: ToolState) -> ToolRegistration {
        ToolRegistration {
            state,
            since: SystemTime::UNIX_EPOCH,
            last_registered: None,
        }
    }

    #[test]
    fn counts_registered_and_the_rest() {
        let mut snap = RegistrationSnapshot::default();
        snap.main_server.reachable = Some(true);
        snap.tools.insert("a".into(), tool(ToolState::Registered));
        snap.tools.insert("b".into(), tool(ToolState::Registered));
        assert_eq!(summary(&snap, SystemTime::now()), "2/2 tools registered");
        assert!(!counts_down(&snap), "nothing here changes with time");
        snap.tools.insert(
            "c".into(),
            tool(ToolState::Conflict {
                owner: "plugin:x".into(),
                callback_url: None,
                same_source: false,
            }),
        );
        snap.tools.insert("d".into(), tool(ToolState::Pending));
        assert_eq!(
            summary(&snap, SystemTime::now()),
            "2/4 tools registered, 1 pending, 1 in conflict"
        );
    }

    #[test]
    fn unreachable_says_when_it_retries() {
        let now = SystemTime::now();
        let snap = RegistrationSnapshot {
            main_server: Reachability {
                reachable: Some(false),
                failed_attempts: 4,
                next_attempt_at: Some(now + Duration::from_millis(2500)),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            summary(&snap, now),
            "main_server unreachable (4 failed attempts), retry in 3 s"
        );
        assert!(counts_down(&snap));
        assert_eq!(
            summary(&snap, now + Duration::from_millis(1000)),
            "main_server unreachable (4 failed attempts), retry in 2 s"
        );
    }
}
