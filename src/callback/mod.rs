//! The callback server: the HTTP endpoint main_server calls when the model
//! picks one of our tools, and the hand-off to the plugin's local handler.
//!
//! The daemon binds a loopback listener and calls [`CallbackServer::start`];
//! the [`CallbackHandle`] it gets back gives the exact `callback_url` of each
//! tool ([`CallbackHandle::url_for`]), swaps the served tools on a reload
//! ([`CallbackHandle::set_tools`]), reads statistics
//! ([`CallbackHandle::stats`]) and drains on shutdown
//! ([`CallbackHandle::drain`]). The server serves `POST /cb/{token}/{tool}`,
//! where the token is 128 random bits made at start, so a URL from an
//! earlier run (or a guess) reaches no tool.
//!
//! What a request gets:
//! - a peer that is not loopback: 403, body unread;
//! - a body over `max_body_bytes`: 413 (with an error envelope as body);
//! - any other path: 404 (with an error envelope as body);
//! - everything else: HTTP 200 with an envelope (see `envelope`), never a
//!   5xx for a tool-level failure, so the model reads a tool failure and
//!   not a dispatcher failure: an unknown token (`UNKNOWN_CALLBACK_TOKEN`),
//!   an unknown tool (`TOOL_NOT_REGISTERED`), a body that is not a call
//!   (`BAD_CALLBACK_BODY`), arguments that fail the schema
//!   (`INVALID_ARGUMENTS`, handler not run), no concurrency slot in time
//!   (`TOO_MANY_CALLS`), the handler's own failures (see `handler`), or its
//!   normalised answer.
//!
//! Deadlines: a call gets the tool's `timeout_seconds` less min(1 s, 10 %)
//! counted from its arrival (`limits::call_budget`), waiting for a slot
//! included, so the sidecar's message beats main_server's own timeout.
//!
//! Shutdown: cancelling the `shutdown` token given to `start` (or calling
//! `drain`) stops accepting connections at once; a call that still arrives
//! on an open keep-alive connection gets an `is_error` envelope
//! (`SIDECAR_SHUTTING_DOWN`) without running its handler. `drain(deadline)`
//! then waits for running calls (and for exec handlers still being stopped
//! after an early answer) until `deadline`; past it, running handlers are
//! stopped at once (exec process groups get SIGKILL) and their calls, and
//! calls still waiting for a slot, answer `SIDECAR_SHUTTING_DOWN`, which
//! takes at most `FORCED_STOP_GRACE` more.
//!
//! A panic while answering stays in that call's task; the call answers
//! `SIDECAR_FAILURE`. A handler that crashes is only that call's failure.

mod call;
pub mod envelope;
mod exec_handler;
mod handler;
mod http_handler;
pub mod limits;
pub mod listener;
mod routes;
pub mod stats;
pub mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{CallbackConfig, HandlersConfig};
use crate::desired::DesiredState;
use envelope::Envelope;
use handler::HandlerContext;
use http_handler::HttpClients;
use routes::RouteTable;
use stats::{Rejections, ToolStatsSnapshot};

pub use stats::{Outcome, RejectionCounts};

/// How long a forced stop (a drain past its deadline) may take for the
/// stopped calls to answer and their processes to be reaped.
pub const FORCED_STOP_GRACE: Duration = Duration::from_millis(500);

/// The limits the callback server runs with (from `[callback]` and
/// `[handlers]` of the agent config).
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackSettings {
    /// Larger callback bodies get 413.
    pub max_body_bytes: usize,
    /// Larger handler answers are an error (`OUTPUT_TOO_LARGE`).
    pub max_output_bytes: usize,
    /// Between SIGTERM and SIGKILL for an exec handler past its deadline.
    pub kill_grace: Duration,
}

impl CallbackSettings {
    pub fn from_config(callback: &CallbackConfig, handlers: &HandlersConfig) -> Self {
        Self {
            max_body_bytes: callback.max_body_bytes,
            max_output_bytes: handlers.max_output_bytes,
            kill_grace: handlers.kill_grace,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    #[error("cannot read the callback listener's address: {0}")]
    LocalAddr(#[source] std::io::Error),
    #[error("cannot make the callback token (no system randomness): {0}")]
    Randomness(getrandom::Error),
    #[error("cannot set up the HTTP client for handlers: {0}")]
    Client(#[source] reqwest::Error),
}

/// Statistics of the callback server at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackStats {
    /// Per served tool.
    pub tools: BTreeMap<String, ToolStatsSnapshot>,
    /// Requests turned away before reaching a tool.
    pub rejections: RejectionCounts,
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every running call finished before the deadline.
    Clean,
    /// Calls were still running at the deadline and were stopped.
    Forced,
}

/// The state every request reads.
#[derive(Debug)]
struct Shared {
    /// The secret path segment; compared in constant time.
    token: String,
    /// Swapped whole on a reload; a call clones the `Arc` it needs.
    routes: RwLock<Arc<RouteTable>>,
    handlers: HandlerContext,
    rejections: Rejections,
    /// Cancelled to stop accepting (a child of the daemon's shutdown token).
    stop_accepting: CancellationToken,
    /// For the 413 message.
    max_body_bytes: usize,
}

impl Shared {
    fn routes(&self) -> Arc<RouteTable> {
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Starts callback servers.
pub struct CallbackServer;

impl CallbackServer {
    /// Serves callbacks on `listener` (which the caller bound, on loopback)
    /// until `shutdown` is cancelled or the handle is drained. Must be
    /// called within a tokio runtime. Serves no tool until `set_tools`.
    pub fn start(
        listener: TcpListener,
        settings: CallbackSettings,
        shutdown: CancellationToken,
    ) -> Result<CallbackHandle, CallbackError> {
        let addr = listener.local_addr().map_err(CallbackError::LocalAddr)?;
        let token = new_token()?;
        let shared = Arc::new(Shared {
            token,
            routes: RwLock::new(Arc::new(RouteTable::default())),
            handlers: HandlerContext {
                clients: HttpClients::new().map_err(CallbackError::Client)?,
                max_output_bytes: settings.max_output_bytes,
                kill_grace: settings.kill_grace,
                hard_stop: CancellationToken::new(),
                tasks: TaskTracker::new(),
            },
            rejections: Rejections::default(),
            stop_accepting: shutdown.child_token(),
            max_body_bytes: settings.max_body_bytes,
        });
        let app = Router::new()
            .route("/cb/{token}/{tool}", post(on_call))
            .fallback(on_unknown_path)
            .layer(DefaultBodyLimit::max(settings.max_body_bytes))
            .layer(middleware::from_fn_with_state(shared.clone(), check_peer))
            .with_state(shared.clone());
        let server = TaskTracker::new();
        let stop = shared.stop_accepting.clone();
        server.spawn(async move {
            let service = app.into_make_service_with_connect_info::<SocketAddr>();
            let r = axum::serve(listener, service)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "the callback server stopped");
            }
        });
        server.close();
        tracing::info!(%addr, "callback server listening");
        Ok(CallbackHandle {
            base_url: format!("http://{addr}"),
            shared,
            server,
        })
    }
}

/// The running server, as the daemon sees it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CallbackHandle {
    base_url: String,
    shared: Arc<Shared>,
    server: TaskTracker,
}

impl CallbackHandle {
    /// `http://IP:PORT` of the listener (IPv6 in brackets), no trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The `callback_url` to register for `tool`. Tool names are
    /// `[A-Za-z0-9_.\-]`, safe in a path unencoded.
    pub fn url_for(&self, tool: &str) -> String {
        format!("{}/cb/{}/{tool}", self.base_url, self.shared.token)
    }

    /// Serves exactly the tools of `desired` from now on (see
    /// `routes::RouteTable::rebuild` for what a reload keeps).
    pub fn set_tools(&self, desired: &DesiredState) {
        let mut guard = self
            .shared
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let next = guard.rebuild(desired);
        *guard = Arc::new(next);
    }

    pub fn stats(&self) -> CallbackStats {
        let routes = self.shared.routes();
        CallbackStats {
            tools: routes
                .iter()
                .map(|(name, r)| (name.clone(), r.stats.snapshot()))
                .collect(),
            rejections: self.shared.rejections.snapshot(),
        }
    }

    /// Stops accepting, waits for running calls until `deadline`, then
    /// stops whatever still runs (see the module doc).
    pub async fn drain(&self, deadline: Instant) -> Drained {
        let s = &self.shared;
        s.stop_accepting.cancel();
        s.handlers.tasks.close();
        let drained = if tokio::time::timeout_at(deadline, s.handlers.tasks.wait())
            .await
            .is_ok()
        {
            Drained::Clean
        } else {
            tracing::warn!("calls still running at the shutdown deadline; stopping them");
            s.handlers.hard_stop.cancel();
            let _ = tokio::time::timeout(FORCED_STOP_GRACE, s.handlers.tasks.wait()).await;
            Drained::Forced
        };
        // Open connections close as soon as their last answer is written.
        let server_deadline = deadline.max(Instant::now() + FORCED_STOP_GRACE);
        if tokio::time::timeout_at(server_deadline, self.server.wait())
            .await
            .is_err()
        {
            tracing::warn!("the callback server did not close its connections in time");
        }
        drained
    }
}

fn new_token() -> Result<String, CallbackError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(CallbackError::Randomness)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares without an early exit, so timing does not leak the token.
fn token_matches(expected: &str, given: &str) -> bool {
    expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn check_peer(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if limits::peer_allowed(peer) {
        return next.run(req).await;
    }
    shared.rejections.count_forbidden();
    tracing::warn!(%peer, "refused a callback from a non-loopback peer");
    (
        StatusCode::FORBIDDEN,
        "only loopback peers may call the sidecar\n",
    )
        .into_response()
}

fn answer(status: StatusCode, e: &Envelope) -> Response {
    (status, axum::Json(e.to_json())).into_response()
}

async fn on_call(
    State(shared): State<Arc<Shared>>,
    Path((token, tool)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let arrived = Instant::now();
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            shared.rejections.count_too_large();
            let e = Envelope::failure(
                "BODY_TOO_LARGE",
                format!(
                    "the call's body is larger than the sidecar accepts ({} bytes, callback.max_body_bytes)",
                    shared.max_body_bytes
                ),
            );
            return answer(StatusCode::PAYLOAD_TOO_LARGE, &e);
        }
        Err(r) => {
            let e = Envelope::failure(
                Outcome::BadBody.code(),
                format!(
                    "the sidecar could not read this call's body: {}",
                    r.body_text()
                ),
            );
            return answer(StatusCode::OK, &e);
        }
    };
    if !token_matches(&shared.token, &token) {
        shared.rejections.count_unknown_token();
        let e = Envelope::failure(
            "UNKNOWN_CALLBACK_TOKEN",
            "this callback URL is out of date: the sidecar serving it has restarted since the tool was registered; it registers its tools again with a new URL, so try again shortly",
        );
        return answer(StatusCode::OK, &e);
    }
    let routes = shared.routes();
    let Some(route) = routes.get(&tool) else {
        shared.rejections.count_unknown_tool();
        let shown: String = tool.chars().take(64).collect();
        let e = Envelope::failure(
            "TOOL_NOT_REGISTERED",
            format!(
                "tool `{shown}` is not served by this sidecar (source `{}`); it may have been removed from its manifest",
                routes.source
            ),
        );
        return answer(StatusCode::OK, &e);
    };
    let draining = shared.stop_accepting.is_cancelled();
    // The call runs in its own task: a caller that hangs up cannot cut a
    // handler off halfway (an exec handler is always stopped and reaped),
    // and a panic stays in that task.
    let task_shared = shared.clone();
    let task = shared.handlers.tasks.spawn(async move {
        call::answer(&task_shared.handlers, route, body, arrived, draining).await
    });
    match task.await {
        Ok(e) => answer(StatusCode::OK, &e),
        Err(err) => {
            tracing::error!(tool, error = %err, "a call's task failed");
            let e = Envelope::failure(
                "SIDECAR_FAILURE",
                "the sidecar failed while answering this call (a bug in the sidecar); the handler may or may not have run",
            );
            answer(StatusCode::OK, &e)
        }
    }
}

async fn on_unknown_path() -> Response {
    let e = Envelope::failure(
        "NO_SUCH_ROUTE",
        "the sidecar serves calls only at POST /cb/{token}/{tool}",
    );
    answer(StatusCode::NOT_FOUND, &e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_differ() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn token_comparison_needs_every_byte() {
        assert!(token_matches("abcd", "abcd"));
        assert!(!token_matches("abcd", "abce"));
        assert!(!token_matches("abcd", "abc"));
        assert!(!token_matches("abcd", ""));
    }
}
