//! Reaching a plugin's local handler: the shared failure type, and the
//! dispatch from a tool's `Handler` to the http or exec way of calling it.
//!
//! A handler either gives back the bytes it answered with (for `envelope`
//! to normalise) or a `HandlerError` whose message is written for the model.
//! Nothing here decides the answer's shape or counts statistics.

use std::time::Duration;

use axum::body::Bytes;
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
    // Dropping the call at the deadline cancels it on the server
    // (`notifications/cancelled`).
    let work = session.call(&m.tool, arguments);
    let result = tokio::select! {
        biased;
        r = work => r,
        () = tokio::time::sleep_until(call.deadline) => return Err(HandlerError::Timeout { budget: call.budget, stopped: true }),
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
        Err(CallError::Unavailable(why)) => Err(HandlerError::McpUnavailable(why)),
        Err(CallError::Rpc { code, message }) => Err(HandlerError::McpRpc {
            server: m.server.clone(),
            code,
            message: cut_reason(message),
        }),
        Err(CallError::Unsupported(why)) => Err(HandlerError::Failed { detail: why }),
        Err(CallError::Lost(why)) => Err(HandlerError::Failed {
            detail: format!(
                "the session with the MCP server `{}` broke: {why}; it is being started again",
                m.server
            ),
        }),
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
