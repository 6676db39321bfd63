//! The model's side of the chaos: workers that keep calling our tools
//! through the stand-in's `invoke` (exactly what main_server does when the
//! model picks a tool), and the exact reading of every answer.
//!
//! Each call's expected answer follows from its arguments (`mode`), so
//! every answer is either the one expected, a legitimate "not registered
//! right now" (the stand-in had no such tool at that moment: restart,
//! eviction, role gone), or a violation. A transport failure, a non-envelope
//! answer or an answer past the tool's timeout is always a violation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neko_sidecar::callback::Outcome;
use neko_sidecar::devserver::{DevServerHandle, InvokeAnswer, InvokeError, InvokeRequest};
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;

use super::manifests::{EXEC_TIMEOUT_S, HTTP_TIMEOUT_S, Kind, OPTIONAL_TOOL, all_tools, tool_def};

/// What a call asks of the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Answer at once.
    Ok,
    /// Answer after 300 ms, well within the timeout.
    Lag,
    /// Answer after 4 s, past the tool's 3 s timeout: the sidecar must
    /// answer `TOOL_TIMEOUT` before main_server gives up.
    Slow,
    /// The handler reports a failure in its envelope.
    Fail,
    /// The exec handler exits 3.
    Crash,
    /// `q` is a number: the schema refuses it before the handler runs.
    BadArgs,
}

impl Mode {
    /// How the sidecar must count a call of this mode that reached it.
    pub fn outcome(self) -> Outcome {
        match self {
            Mode::Ok | Mode::Lag => Outcome::Ok,
            Mode::Slow => Outcome::Timeout,
            Mode::Fail => Outcome::ToolError,
            Mode::Crash => Outcome::HandlerExit,
            Mode::BadArgs => Outcome::InvalidArguments,
        }
    }

    fn arguments(self, q: &str) -> Json {
        match self {
            Mode::BadArgs => json!({"q": 42, "mode": "ok"}),
            Mode::Ok => json!({"q": q, "mode": "ok"}),
            Mode::Lag => json!({"q": q, "mode": "lag"}),
            Mode::Slow => json!({"q": q, "mode": "slow"}),
            Mode::Fail => json!({"q": q, "mode": "fail"}),
            Mode::Crash => json!({"q": q, "mode": "crash"}),
        }
    }
}

/// How one answer was classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// The handler's own output, as expected.
    Answered,
    /// The expected failure envelope (timeout, handler error, crash,
    /// invalid arguments).
    ExpectedError,
    /// The stand-in did not hold the tool (or the role) at that moment.
    NotListed,
    /// The sidecar's `TOOL_NOT_REGISTERED`: the optional tool was called
    /// after a manifest edit removed it and before its unregister landed.
    NotRouted,
    Violation,
}

/// Every call's outcome, shared by the workers.
#[derive(Debug, Default)]
pub struct Ledger {
    pub counts: BTreeMap<(Class, &'static str), u64>,
    pub violations: Vec<String>,
    pub slowest: Duration,
    /// Calls answered as expected by a handler or the sidecar, by tool and
    /// the outcome the sidecar must have counted: compared with the
    /// sidecar's own statistics at the end.
    pub reached: BTreeMap<(&'static str, Outcome), u64>,
}

impl Ledger {
    pub fn total(&self, class: Class) -> u64 {
        self.counts
            .iter()
            .filter(|((c, _), _)| *c == class)
            .map(|(_, n)| n)
            .sum()
    }

    pub fn summary(&self) -> String {
        self.counts
            .iter()
            .map(|((c, m), n)| format!("{c:?}/{m}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Ok => "ok",
        Mode::Lag => "lag",
        Mode::Slow => "slow",
        Mode::Fail => "fail",
        Mode::Crash => "crash",
        Mode::BadArgs => "bad_args",
    }
}

/// main_server's timeout for `tool`.
pub fn timeout_of(tool: &str) -> Duration {
    Duration::from_secs(match tool_def(tool).kind {
        Kind::Http => HTTP_TIMEOUT_S,
        Kind::Exec => EXEC_TIMEOUT_S,
    })
}

/// Reads one answer. `Err` carries the reason it is a violation.
pub fn classify(
    tool: &str,
    mode: Mode,
    q: &str,
    result: &Result<InvokeAnswer, InvokeError>,
) -> Result<Class, String> {
    let answer = match result {
        Err(InvokeError::UnknownTool { .. } | InvokeError::UnknownRole(_)) => {
            return Ok(Class::NotListed);
        }
        Err(e) => return Err(format!("the call could not be made: {e}")),
        Ok(a) => a,
    };
    let v = &answer;
    let code = v.output.get("code").and_then(Json::as_str);
    if v.is_error && code == Some("TOOL_NOT_REGISTERED") && tool == OPTIONAL_TOOL {
        return Ok(Class::NotRouted);
    }
    let exec = tool_def(tool).kind == Kind::Exec;
    let expected_code = match mode {
        Mode::Ok | Mode::Lag => {
            let want = if exec {
                json!({"tool": tool, "call_id": answer.call_id})
            } else {
                json!({"tool": tool, "q": q, "call_id": answer.call_id})
            };
            return if !v.is_error && v.output == want && v.error.is_none() {
                Ok(Class::Answered)
            } else {
                Err(format!("expected the handler's output {want}"))
            };
        }
        Mode::Fail => {
            return if v.is_error && v.error == Some(json!("asked to fail")) {
                Ok(Class::ExpectedError)
            } else {
                Err("expected the handler's own failure \"asked to fail\"".into())
            };
        }
        Mode::Slow => "TOOL_TIMEOUT",
        Mode::Crash => "HANDLER_EXIT",
        Mode::BadArgs => "INVALID_ARGUMENTS",
    };
    // The sidecar's own failure envelope: `is_error`, a readable `error`,
    // and the same text under `output.error` with its code.
    let readable = v
        .error
        .as_ref()
        .and_then(Json::as_str)
        .is_some_and(|e| !e.is_empty() && v.output.get("error") == Some(&json!(e)));
    if v.is_error && code == Some(expected_code) && readable {
        Ok(Class::ExpectedError)
    } else {
        Err(format!("expected the sidecar's {expected_code} envelope"))
    }
}

/// One worker's choices, from its own seeded generator.
fn choose(rng: &mut fastrand::Rng, tools: &[&'static str]) -> (&'static str, String, Mode) {
    let tool = tools[rng.usize(..tools.len())];
    let def = tool_def(tool);
    // Mostly a role that has the tool; now and then one that does not.
    let role = match def.role {
        Some(r) if rng.u32(0..10) > 0 => r.to_owned(),
        _ => ["小八", "Lanlan"][rng.usize(..2)].to_owned(),
    };
    let roll = rng.u32(0..100);
    let mode = match def.kind {
        Kind::Http => match roll {
            0..70 => Mode::Ok,
            70..77 => Mode::Lag,
            77..80 => Mode::Slow,
            80..90 => Mode::Fail,
            _ => Mode::BadArgs,
        },
        Kind::Exec => match roll {
            0..75 => Mode::Ok,
            75..90 => Mode::Crash,
            _ => Mode::BadArgs,
        },
    };
    (tool, role, mode)
}

/// Makes one call, files its outcome in the ledger, and returns its class.
pub async fn call_and_file(
    h: &DevServerHandle,
    ledger: &Mutex<Ledger>,
    tool: &'static str,
    role: &str,
    mode: Mode,
    q: &str,
) -> Class {
    let started = Instant::now();
    let result = h
        .invoke(InvokeRequest {
            name: tool.to_owned(),
            arguments: Some(mode.arguments(q)),
            raw_arguments: None,
            role: Some(role.to_owned()),
            sees_images: None,
        })
        .await;
    let took = started.elapsed();
    let mut class = classify(tool, mode, q, &result);
    if class.is_ok() && took > timeout_of(tool) {
        class = Err(format!(
            "answered after {took:?}, past main_server's {:?} timeout",
            timeout_of(tool)
        ));
    }
    let mut l = ledger.lock().unwrap();
    l.slowest = l.slowest.max(took);
    let class = match class {
        Ok(c) => c,
        Err(why) => {
            l.violations.push(format!(
                "{tool} from {role} ({}, q={q}) after {took:?}: {why}; got {result:?}",
                mode_name(mode)
            ));
            Class::Violation
        }
    };
    *l.counts.entry((class, mode_name(mode))).or_default() += 1;
    if matches!(class, Class::Answered | Class::ExpectedError) {
        *l.reached.entry((tool, mode.outcome())).or_default() += 1;
    }
    class
}

/// Calls tools until `stop`, one call at a time; `workers` of these run at
/// once.
pub async fn worker(
    id: u64,
    seed: u64,
    h: DevServerHandle,
    ledger: Arc<Mutex<Ledger>>,
    stop: CancellationToken,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(id + 1)));
    let tools: Vec<&'static str> = all_tools().map(|t| t.name).collect();
    let mut n = 0u64;
    while !stop.is_cancelled() {
        let (tool, role, mode) = choose(&mut rng, &tools);
        let q = format!("w{id}-{n}");
        n += 1;
        let class = call_and_file(&h, &ledger, tool, &role, mode, &q).await;
        // A call that found no tool returns without awaiting anything: give
        // the runtime back, and pause as a model would that does not see the
        // tool, so that four workers never spin and starve the daemon.
        if class == Class::NotListed {
            tokio::time::sleep(Duration::from_millis(5 + rng.u64(..15))).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}
