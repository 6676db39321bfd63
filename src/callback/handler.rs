//! Reaching a plugin's local handler: the shared failure type, and the
//! dispatch from a tool's `Handler` to the http or exec way of calling it.
//!
//! A handler either gives back the bytes it answered with (for `envelope`
//! to normalise) or a `HandlerError` whose message is written for the model.
//! Nothing here decides the answer's shape or counts statistics.

use std::time::Duration;

use axum::body::Bytes;
use futures_util::FutureExt as _;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::exec_handler;
use super::http_handler::{self, Endpoint};
use super::limits::seconds;
use super::stats::Outcome;
use crate::manifest::{Handler, McpToolHandler, ToolSpec};
use crate::mcp::answer;
use crate::mcp::{CallError, McpServers};

/// Why a handler gave no usable answer. Each message is a sentence the
/// model reads.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandlerError {
    #[error("the handler did not answer within {}{}", seconds(*.budget), if *.stopped { " and was stopped" } else { "" })]
    Timeout { budget: Duration, stopped: bool },
    #[error("the handler at {target} is not reachable ({detail}); the plugin may not be running")]
    Unreachable { target: String, detail: String },
    #[error("the handler at {target} answered HTTP {status}: {body_start}")]
    Status {
        target: String,
        status: u16,
        body_start: String,
    },
    #[error(
        "the handler's answer is larger than the sidecar accepts ({limit} bytes, handlers.max_output_bytes)"
    )]
    OutputTooLarge { limit: usize },
    #[error("cannot start `{program}`: {reason}")]
    NotStarted { program: String, reason: String },
    /// `tail` is the end of stderr, or the start of stdout when stderr
    /// was empty; `tail_from` names which.
    #[error("the handler {how}{}", tail_note(.tail_from, .tail))]
    Exited {
        how: String,
        tail_from: &'static str,
        tail: String,
    },
    /// Past `max_concurrency` (of the tool, or of its MCP server `what`):
    /// no slot came free in time, so the handler never ran (`left` is
    /// `None`), or one came so late that the handler did not answer in the
    /// time `left`.
    #[error("too many concurrent calls of {what} (at most {max} at a time): {}; try again later", slot_note(*.waited, *.left))]
    NoSlot {
        what: String,
        max: usize,
        waited: Duration,
        left: Option<Duration>,
    },
    #[error("talking to the handler failed: {detail}")]
    Failed { detail: String },
    #[error(
        "the sidecar is shutting down and stopped the handler before it answered; try again shortly"
    )]
    ShuttingDown,
    /// An MCP server not connected now; the message says why and when.
    #[error("{0}")]
    McpUnavailable(String),
    #[error(
        "the MCP server `{server}` answered the call with an error: {message} (JSON-RPC error {code})"
    )]
    McpRpc {
        server: String,
        code: i32,
        message: String,
    },
}

fn slot_note(waited: Duration, left: Option<Duration>) -> String {
    match left {
        None => format!(
            "none finished within {}, so the tool did not run",
            seconds(waited)
        ),
        Some(left) => format!(
            "this call waited {} for a slot, and its handler did not answer in the {} left",
            seconds(waited),
            seconds(left)
        ),
    }
}

impl HandlerError {
    /// A timeout of a call that waited `waited` for its slot (of `what`,
    /// at most `max`) reads as that wait, which took its time; any other
    /// error is unchanged.
    pub(crate) fn after_slot_wait(self, what: String, max: usize, waited: Duration) -> Self {
        match self {
            HandlerError::Timeout { budget, .. } => HandlerError::NoSlot {
                what,
                max,
                waited,
                left: Some(budget.saturating_sub(waited)),
            },
            other => other,
        }
    }
}

fn tail_note(from: &str, tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its {from}:\n{tail}")
    }
}

impl HandlerError {
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            HandlerError::Timeout { .. } => Outcome::Timeout,
            HandlerError::Unreachable { .. } => Outcome::Unreachable,
            HandlerError::Status { .. } => Outcome::HandlerStatus,
            HandlerError::OutputTooLarge { .. } => Outcome::OutputTooLarge,
            HandlerError::NotStarted { .. } => Outcome::SpawnFailed,
            HandlerError::Exited { .. } => Outcome::HandlerExit,
            HandlerError::Failed { .. } => Outcome::HandlerFailed,
            HandlerError::NoSlot { .. } => Outcome::TooManyCalls,
            HandlerError::ShuttingDown => Outcome::ShuttingDown,
            HandlerError::McpUnavailable(_) => Outcome::Unreachable,
            HandlerError::McpRpc { .. } => Outcome::HandlerFailed,
        }
    }
}

/// What every call needs besides the call itself.
#[derive(Debug)]
pub(crate) struct HandlerContext {
    pub max_output_bytes: usize,
    pub kill_grace: Duration,
    /// Cancelled when a drain passes its deadline: running handlers are
    /// stopped at once.
    pub hard_stop: CancellationToken,
    /// Every running call and every background stop of a handler process,
    /// so a drain can wait for them all.
    pub tasks: TaskTracker,
    /// The MCP servers, once the daemon has them (`CallbackHandle::set_mcp`).
    pub mcp: std::sync::OnceLock<McpServers>,
}

/// One call as the handler sees it.
#[derive(Debug, Clone)]
pub(crate) struct Invocation<'a> {
    pub spec: &'a ToolSpec,
    /// Worked out at reload for an http handler (see `routes`); `None`
    /// for an exec handler.
    pub endpoint: Option<&'a Result<Endpoint, String>>,
    pub call_id: &'a str,
    /// The body's `arguments`, as read (and checked) once by `call`.
    pub arguments: &'a serde_json::Value,
    /// The callback body exactly as main_server sent it.
    pub body: Bytes,
    pub deadline: Instant,
    /// The time the call was given (for messages).
    pub budget: Duration,
}

/// Runs the tool's handler for one call.
pub(crate) async fn run(
    ctx: &HandlerContext,
    call: Invocation<'_>,
) -> Result<Vec<u8>, HandlerError> {
    match &call.spec.handler {
        Handler::Http(_) => {
            let Some(endpoint) = call.endpoint else {
                return Err(HandlerError::Failed {
                    detail:
                        "the sidecar has no address for this http handler (a bug in the sidecar)"
                            .into(),
                });
            };
            let work = http_handler::call(endpoint, call.body, ctx.max_output_bytes);
            tokio::select! {
                // The call first: polling the deadline and the stop first
                // would arm a timer and a waiter for a call that may already
                // be answered; there is nothing to be fair to.
                biased;
                r = work => r,
                () = tokio::time::sleep_until(call.deadline) => Err(HandlerError::Timeout { budget: call.budget, stopped: false }),
                () = ctx.hard_stop.cancelled() => Err(HandlerError::ShuttingDown),
            }
        }
        Handler::Exec(h) => exec_handler::call(ctx, h, &call).await,
        // Boxed: an MCP call's future (rmcp's request and its guard) is
        // several KiB, and unboxed it would size every call's future, the
        // http calls' too, of which a burst holds thousands at once.
        Handler::Mcp(m) => Box::pin(mcp_call(ctx, m, &call)).await,
    }
}

/// `tools/call` on the server's session, cancelled at the deadline.
async fn mcp_call(
    ctx: &HandlerContext,
    m: &McpToolHandler,
    call: &Invocation<'_>,
) -> Result<Vec<u8>, HandlerError> {
    let session = ctx.mcp.get().and_then(|servers| servers.session(&m.server));
    let Some(session) = session else {
        return Err(HandlerError::McpUnavailable(format!(
            "the MCP server `{}` is not configured in this sidecar any more",
            m.server
        )));
    };
    // main_server always sends an object (CONTRACT.md); anything else was
    // refused by validation, or the tool takes no arguments.
    let arguments = call.arguments.as_object().cloned().unwrap_or_default();
    // A free slot is taken at once; waiting for one is timed, so that a
    // call that did not get one in time says so.
    let what = || format!("the MCP server `{}`", m.server);
    let max = session.max_concurrency().unwrap_or(0);
    let (slot, waited) = match session.slot().now_or_never() {
        Some(s) => (s, None),
        None => {
            let since = Instant::now();
            let s = tokio::select! {
                biased;
                s = session.slot() => s,
                () = tokio::time::sleep_until(call.deadline) => {
                    return Err(HandlerError::NoSlot {
                        what: what(),
                        max,
                        waited: since.elapsed(),
                        left: None,
                    });
                }
                () = ctx.hard_stop.cancelled() => return Err(HandlerError::ShuttingDown),
            };
            (s, Some(since.elapsed()))
        }
    };
    let slot = match slot {
        Ok(s) => s,
        Err(e) => return Err(call_error(m, e)),
    };
    // Dropping the call at the deadline cancels it on the server
    // (`notifications/cancelled`).
    let work = session.call(slot, &m.tool, arguments);
    let result = tokio::select! {
        biased;
        r = work => r,
        () = tokio::time::sleep_until(call.deadline) => {
            let e = HandlerError::Timeout { budget: call.budget, stopped: true };
            return Err(match waited {
                Some(w) => e.after_slot_wait(what(), max, w),
                None => e,
            });
        }
        () = ctx.hard_stop.cancelled() => return Err(HandlerError::ShuttingDown),
    };
    match result {
        Ok(result) => {
            // The same bound as an http or exec handler's answer: the
            // envelope main_server would get, images and all.
            let bytes = answer::envelope_for(&result).to_vec();
            if bytes.len() > ctx.max_output_bytes {
                return Err(HandlerError::OutputTooLarge {
                    limit: ctx.max_output_bytes,
                });
            }
            Ok(bytes)
        }
        Err(e) => Err(call_error(m, e)),
    }
}

/// A failed `tools/call` as the model reads it.
fn call_error(m: &McpToolHandler, e: CallError) -> HandlerError {
    match e {
        CallError::Unavailable(why) => HandlerError::McpUnavailable(why),
        CallError::Rpc { code, message } => HandlerError::McpRpc {
            server: m.server.clone(),
            code,
            message: cut_reason(message),
        },
        CallError::Unsupported(why) => HandlerError::Failed { detail: why },
        CallError::Lost(why) => HandlerError::Failed {
            detail: format!(
                "the session with the MCP server `{}` broke: {why}; it is being started again",
                m.server
            ),
        },
    }
}

/// A server's own words cut to what a reason may quote (1 KiB), their
/// length said: an error message is the server's to choose.
fn cut_reason(message: String) -> String {
    const QUOTED: usize = 1024;
    if message.len() <= QUOTED {
        return message;
    }
    let mut end = QUOTED;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &message[..end], message.len())
}
