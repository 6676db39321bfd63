//! The `/status` JSON: what the sidecar knows about main_server, every tool
//! and every manifest file, as one document.
//!
//! Pure: a [`Sample`] in, a [`StatusView`] out. The types deserialize too,
//! so the `status` command and the tests read the document through them.
//! Times are RFC 3339 UTC text; `for_seconds` saves a reader the clock
//! arithmetic. The shape is documented in the README ("The /status
//! document"); add fields freely, rename none.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::readiness::judge;
use super::sample::Sample;
use super::time::rfc3339;
use crate::diag::Diagnostic;
use crate::manifest::Handler;
use crate::mcp::ServerStatus;
use crate::registration::{ToolRegistration, ToolState};
use crate::reload::{FileHealth, FileReport};

/// The whole `/status` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StatusView {
    pub version: String,
    pub source: String,
    pub started_at: String,
    pub uptime_seconds: u64,
    /// The `/readyz` verdict: every desired tool registered, main_server up.
    pub ready: bool,
    /// Why not ready; empty when ready.
    pub not_ready: Vec<String>,
    pub main_server: MainServerView,
    pub engine: EngineView,
    /// Every desired tool, by name.
    pub tools: Vec<ToolView>,
    pub manifests: ManifestsView,
    /// Each `[[mcp_server]]`: its phase, protocol and tools.
    #[serde(default)]
    pub mcp_servers: Vec<ServerStatus>,
    pub callback_rejections: RejectionsView,
    /// What the callback listener's connection bound did.
    #[serde(default)]
    pub callback_connections: crate::callback::ConnectionCounts,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MainServerView {
    pub url: String,
    /// `null` until the first GET finished.
    pub reachable: Option<bool>,
    /// The last failed GET's error, kept after recovery for diagnosis.
    pub last_error: Option<String>,
    /// Consecutive failed GETs (0 while reachable).
    pub failed_attempts: u32,
    pub last_contact: Option<String>,
    /// While unreachable: when the next GET is due.
    pub next_attempt_at: Option<String>,
    /// When a GET last found registered tools missing: a main_server
    /// restart, an eviction or an outside unregister.
    #[serde(default)]
    pub last_loss_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EngineView {
    pub passes: u64,
    pub converged: bool,
    pub registrations: RegistrationsView,
    /// Registered tools later found missing from main_server's list.
    pub tools_lost: u64,
    /// Passes that found some: restarts, evictions, outside removals.
    pub loss_events: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RegistrationsView {
    pub accepted: u64,
    pub rejected: u64,
    pub unknown_role: u64,
    pub failed: u64,
}

/// One tool; `state` and its details are flattened in (see [`StateView`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolView {
    pub name: String,
    /// `null`: every role.
    pub role: Option<String>,
    #[serde(flatten)]
    pub state: StateView,
    /// When the tool entered this state.
    pub since: Option<String>,
    pub for_seconds: Option<u64>,
    /// When a GET last confirmed it registered by this process.
    pub last_registered: Option<String>,
    /// Why it is not registered, when there is an error to show.
    pub last_error: Option<String>,
    pub callback_url: Option<String>,
    pub timeout_seconds: Option<f64>,
    /// `http`, `exec` or `mcp`.
    pub handler: Option<String>,
    /// What the handler calls: `http URL`, `exec COMMAND`, `mcp SERVER tool NAME`.
    #[serde(default)]
    pub target: Option<String>,
    /// Where the tool is declared: `FILE:LINE:COL`.
    pub declared_at: Option<String>,
    /// Its manifest file is in error now, and this tool is its last good
    /// version, kept.
    #[serde(default)]
    pub serving_last_good: bool,
    /// The last finished call; `null` before the first.
    #[serde(default)]
    pub last_call: Option<LastCallView>,
    /// Finished calls since start, every outcome.
    pub calls: u64,
    /// Finished calls that did not end `ok`.
    pub failures: u64,
    pub in_flight: u64,
}

/// How a tool's last call went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LastCallView {
    /// When it finished.
    pub at: String,
    pub took_ms: u64,
    /// The outcome's label (`ok`, `tool_error`, `timeout`, ...).
    pub outcome: String,
    /// The error the envelope carried, when it failed.
    pub error: Option<String>,
}

/// A tool's state with the details of that state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum StateView {
    Pending,
    Registered,
    Conflict {
        /// The source holding the name.
        owner: String,
        owner_callback_url: Option<String>,
        /// The holder uses our source: two sidecars share one `source`.
        same_source: bool,
    },
    Rejected {
        /// main_server's 422 field errors, `loc: msg`.
        errors: Vec<String>,
    },
    WaitingForRole {
        /// `null`: a global tool and no role exists at all.
        waiting_for: Option<String>,
    },
    Retrying {
        attempt: u32,
        next_attempt_at: String,
    },
}

impl StateView {
    /// The state's name, as in the JSON.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            StateView::Pending => "pending",
            StateView::Registered => "registered",
            StateView::Conflict { .. } => "conflict",
            StateView::Rejected { .. } => "rejected",
            StateView::WaitingForRole { .. } => "waiting_for_role",
            StateView::Retrying { .. } => "retrying",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ManifestsView {
    pub rescans: u64,
    /// Desired tools across all files.
    pub tools: usize,
    pub files_in_error: usize,
    pub files: Vec<FileView>,
    /// Directories that cannot be read or hold no manifests.
    pub directories: Vec<DiagnosticView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FileView {
    pub path: String,
    /// `ok` or `error`.
    pub health: String,
    pub since: String,
    /// In error, but an older version's tools are still served.
    pub serving_last_good: bool,
    pub tools: Vec<String>,
    /// Servers of its `[[mcp_import]]`s that are not bridged, and why.
    #[serde(default)]
    pub not_bridged: Vec<NotBridgedView>,
    pub diagnostics: Vec<DiagnosticView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct NotBridgedView {
    pub name: String,
    /// "sse URL" or "http URL".
    pub transport: String,
    pub reason: String,
    /// `PATH:LINE:COL` of its entry in the imported file.
    pub at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DiagnosticView {
    /// `error` or `warning`.
    pub severity: String,
    pub path: String,
    pub line: Option<usize>,
    pub col: Option<usize>,
    pub message: String,
    /// `PATH:LINE:COL: SEVERITY: MESSAGE`, ready to print.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RejectionsView {
    pub forbidden_peer: u64,
    pub body_too_large: u64,
    pub unknown_token: u64,
    pub unknown_tool: u64,
    #[serde(default)]
    pub busy: u64,
}

/// Builds the document from one sample.
pub(crate) fn build(sample: &Sample) -> StatusView {
    let readiness = judge(sample);
    let s = &sample.registration;
    let ms = &s.main_server;
    // Desired tools, plus any the engine still tracks for a moment after
    // a reload removed them.
    let names: BTreeSet<&String> = sample.desired.tools.keys().chain(s.tools.keys()).collect();
    let r = &sample.callbacks.rejections;
    StatusView {
        version: sample.version.to_owned(),
        source: sample.source.clone(),
        started_at: rfc3339(sample.started_at),
        uptime_seconds: sample.uptime.as_secs(),
        ready: readiness.ready,
        not_ready: readiness.reasons,
        main_server: MainServerView {
            url: crate::manifest::remote::redact_url(&sample.main_server_url),
            reachable: ms.reachable,
            last_error: ms.last_error.clone(),
            failed_attempts: ms.failed_attempts,
            last_contact: ms.last_contact.map(rfc3339),
            next_attempt_at: ms.next_attempt_at.map(rfc3339),
            last_loss_at: s.last_loss_at.map(rfc3339),
        },
        engine: EngineView {
            passes: s.passes,
            converged: s.converged,
            registrations: RegistrationsView {
                accepted: s.registrations.accepted,
                rejected: s.registrations.rejected,
                unknown_role: s.registrations.unknown_role,
                failed: s.registrations.failed,
            },
            tools_lost: s.tools_lost,
            loss_events: s.loss_events,
        },
        tools: names.into_iter().map(|n| tool_view(sample, n)).collect(),
        manifests: ManifestsView {
            rescans: sample.manifests.rescans,
            tools: sample.manifests.tools,
            files_in_error: sample.manifests.files_in_error(),
            files: sample.manifests.files.iter().map(file_view).collect(),
            directories: sample
                .manifests
                .directories
                .iter()
                .map(diagnostic_view)
                .collect(),
        },
        mcp_servers: sample.mcp.clone(),
        callback_rejections: RejectionsView {
            forbidden_peer: r.forbidden_peer,
            body_too_large: r.body_too_large,
            unknown_token: r.unknown_token,
            unknown_tool: r.unknown_tool,
            busy: r.busy,
        },
        callback_connections: sample.callbacks.connections,
    }
}

fn tool_view(sample: &Sample, name: &str) -> ToolView {
    let spec = sample.desired.tools.get(name).map(|t| &t.spec);
    let registration = sample.registration.tools.get(name);
    let stats = sample.callbacks.tools.get(name);
    let (state, last_error) = match registration {
        Some(st) => state_view(st),
        None => (StateView::Pending, None),
    };
    ToolView {
        name: name.to_owned(),
        role: spec.and_then(|s| s.role.clone()),
        state,
        since: registration.map(|st| rfc3339(st.since)),
        for_seconds: registration.map(|st| {
            sample
                .now
                .duration_since(st.since)
                .map_or(0, |d| d.as_secs())
        }),
        last_registered: registration.and_then(|st| st.last_registered).map(rfc3339),
        last_error,
        callback_url: sample.callback_urls.get(name).cloned(),
        timeout_seconds: spec.map(|s| s.timeout_seconds),
        handler: spec.map(|s| {
            match s.handler {
                Handler::Http(_) => "http",
                Handler::Exec(_) => "exec",
                Handler::Mcp(_) => "mcp",
            }
            .to_owned()
        }),
        target: spec.map(|s| s.handler.to_string()),
        declared_at: spec.map(|s| s.origin.to_string()),
        serving_last_good: sample
            .manifests
            .files
            .iter()
            .any(|f| f.serving_last_good() && f.tools.iter().any(|t| t == name)),
        last_call: stats.and_then(|t| t.last.as_ref()).map(|l| LastCallView {
            at: rfc3339(l.at),
            took_ms: u64::try_from(l.took.as_millis()).unwrap_or(u64::MAX),
            outcome: l.outcome.label().to_owned(),
            error: l.error.clone(),
        }),
        calls: stats.map_or(0, |t| t.calls),
        failures: stats.map_or(0, |t| t.failures()),
        in_flight: stats.map_or(0, |t| t.in_flight),
    }
}

fn state_view(st: &ToolRegistration) -> (StateView, Option<String>) {
    match &st.state {
        ToolState::Pending => (StateView::Pending, None),
        ToolState::Registered => (StateView::Registered, None),
        ToolState::Conflict {
            owner,
            callback_url,
            same_source,
        } => (
            StateView::Conflict {
                owner: owner.clone(),
                owner_callback_url: callback_url.clone(),
                same_source: *same_source,
            },
            Some(format!("the name is registered by source `{owner}`")),
        ),
        ToolState::Rejected { errors } => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            let joined = errors.join("; ");
            (
                StateView::Rejected { errors },
                Some(format!("main_server refused it: {joined}")),
            )
        }
        ToolState::WaitingForRole { role } => (
            StateView::WaitingForRole {
                waiting_for: role.clone(),
            },
            None,
        ),
        ToolState::Retrying {
            last_error,
            attempt,
            next_attempt_at,
        } => (
            StateView::Retrying {
                attempt: *attempt,
                next_attempt_at: rfc3339(*next_attempt_at),
            },
            Some(last_error.clone()),
        ),
    }
}

fn file_view(f: &FileReport) -> FileView {
    FileView {
        path: f.path.display().to_string(),
        health: match f.health {
            FileHealth::Ok => "ok",
            FileHealth::Error => "error",
        }
        .to_owned(),
        since: rfc3339(f.since),
        serving_last_good: f.serving_last_good(),
        tools: f.tools.clone(),
        not_bridged: f
            .unbridged
            .iter()
            .map(|u| NotBridgedView {
                name: u.name.clone(),
                transport: u.transport.clone(),
                reason: u.reason.clone(),
                at: u.origin.to_string(),
            })
            .collect(),
        diagnostics: f.diagnostics.iter().map(diagnostic_view).collect(),
    }
}

fn diagnostic_view(d: &Diagnostic) -> DiagnosticView {
    DiagnosticView {
        severity: d.severity.to_string(),
        path: d.path.display().to_string(),
        line: d.position.map(|p| p.line),
        col: d.position.map(|p| p.col),
        message: d.message.clone(),
        text: d.to_string(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::callback::{CallbackStats, RejectionCounts};
    use crate::desired::DesiredState;
    use crate::manifest::{LoadContext, parse_manifest};
    use crate::registration::RegistrationSnapshot;
    use crate::reload::ManifestHealth;

    /// A sample with these desired (global, http) tools, all pending, the
    /// manifests loaded once and main_server not reached yet.
    pub(in crate::admin) fn sample_with(names: &[&str]) -> Sample {
        let text: String = names
            .iter()
            .map(|n| {
                format!(
                    "[[tool]]\nname = \"{n}\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/{n}\" }}\n"
                )
            })
            .collect();
        let f = parse_manifest(Path::new("/m/tools.toml"), &text, &LoadContext::default());
        assert!(!f.has_errors(), "{:?}", f.diagnostics);
        let (desired, _) = DesiredState::assemble("plugin:t", &[f]);
        let now = SystemTime::now();
        let mut registration = RegistrationSnapshot::default();
        for n in names {
            registration.tools.insert(
                (*n).to_owned(),
                ToolRegistration {
                    state: ToolState::Pending,
                    since: now - Duration::from_secs(5),
                    last_registered: None,
                },
            );
        }
        Sample {
            registration,
            callbacks: CallbackStats {
                tools: BTreeMap::new(),
                rejections: RejectionCounts::default(),
                connections: Default::default(),
            },
            callback_urls: names
                .iter()
                .map(|n| ((*n).to_owned(), format!("http://127.0.0.1:1/cb/tok/{n}")))
                .collect(),
            manifests: Arc::new(ManifestHealth {
                rescans: 1,
                tools: names.len(),
                ..ManifestHealth::default()
            }),
            mcp: Vec::new(),
            desired: Arc::new(desired),
            source: "plugin:t".to_owned(),
            main_server_url: "http://127.0.0.1:48911".to_owned(),
            version: "0.0.0-test",
            now,
            started_at: now - Duration::from_secs(60),
            uptime: Duration::from_secs(60),
        }
    }

    #[test]
    fn states_carry_their_details_and_round_trip() {
        let mut s = sample_with(&["a", "b", "c"]);
        let set = |s: &mut Sample, n: &str, st: ToolState| {
            s.registration.tools.get_mut(n).unwrap().state = st;
        };
        set(
            &mut s,
            "a",
            ToolState::Conflict {
                owner: "plugin:other".into(),
                callback_url: Some("http://127.0.0.1:2/x".into()),
                same_source: false,
            },
        );
        set(
            &mut s,
            "b",
            ToolState::Retrying {
                last_error: "HTTP 503".into(),
                attempt: 4,
                next_attempt_at: SystemTime::UNIX_EPOCH,
            },
        );
        let v = build(&s);
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["tools"][0]["state"], "conflict");
        assert_eq!(json["tools"][0]["owner"], "plugin:other");
        assert_eq!(json["tools"][1]["state"], "retrying");
        assert_eq!(json["tools"][1]["attempt"], 4);
        assert_eq!(json["tools"][1]["next_attempt_at"], "1970-01-01T00:00:00Z");
        assert_eq!(json["tools"][1]["last_error"], "HTTP 503");
        assert_eq!(json["tools"][2]["state"], "pending");
        assert_eq!(json["tools"][2]["for_seconds"], 5);
        assert_eq!(json["tools"][2]["handler"], "http");
        assert_eq!(json["tools"][2]["declared_at"], "/m/tools.toml:9:1");
        assert_eq!(json["uptime_seconds"], 60);
        let back: StatusView = serde_json::from_value(json).unwrap();
        assert_eq!(back, v);
    }
}
