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
//! - a body that does not arrive within `read_timeout`: 408 (likewise);
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
//! A panic while answering is caught; the call answers `SIDECAR_FAILURE`.
//! A handler that crashes is only that call's failure. An exec call runs in
//! a task of its own, so a caller that hangs up cannot leave its process
//! unreaped; an http call runs in its connection's task (one task less per
//! call) and is dropped with it, closing its handler connection.
//!
//! Transport: hyper's HTTP/1.1 on the daemon's runtime, with read and idle
//! timeouts and a bound on open connections (see `server`).

mod call;
mod exec_handler;
mod handler;
mod http_handler;
pub mod images;
pub(crate) mod limits;
pub(crate) mod listener;
mod routes;
mod server;
pub(crate) mod stats;
pub(crate) mod transport;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use http::StatusCode;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::history::{CallHistory, Finished};
use crate::config::{CallbackConfig, HandlersConfig};
use crate::contract::envelope::Envelope;
use crate::desired::DesiredState;
use handler::HandlerContext;
use http_handler::HttpClients;
use routes::RouteTable;
use server::{Answer, BodyError, answer};
use stats::{Rejections, ToolStatsSnapshot};
use transport::{ConnectionLimits, Transport};

pub use stats::{Outcome, RejectionCounts};
pub use transport::ConnectionCounts;

/// How long a forced stop (a drain past its deadline) may take for the
/// stopped calls to answer and their processes to be reaped.
pub(crate) const FORCED_STOP_GRACE: Duration = Duration::from_millis(500);

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
    /// For a request head from its first byte, and a body from its head.
    pub read_timeout: Duration,
    /// A connection without a request is closed after this.
    pub idle_timeout: Duration,
    /// Connections held at once (see `transport` for what happens at the bound).
    pub max_connections: usize,
    /// The memory all bodies being read or answered may hold together (see
    /// `server`); at least `max_body_bytes` is used.
    pub max_body_memory: usize,
}

impl CallbackSettings {
    pub(crate) fn from_config(callback: &CallbackConfig, handlers: &HandlersConfig) -> Self {
        Self {
            max_body_bytes: callback.max_body_bytes,
            max_output_bytes: handlers.max_output_bytes,
            kill_grace: handlers.kill_grace,
            read_timeout: callback.read_timeout,
            idle_timeout: callback.idle_timeout,
            max_connections: callback.max_connections,
            max_body_memory: callback.max_body_memory,
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
}

/// Statistics of the callback server at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackStats {
    /// Per served tool.
    pub tools: BTreeMap<String, ToolStatsSnapshot>,
    /// Requests turned away before reaching a tool.
    pub rejections: RejectionCounts,
    /// What the connection bound did.
    pub connections: ConnectionCounts,
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
    /// The http handlers' pooled clients, kept across reloads.
    clients: HttpClients,
    rejections: Rejections,
    /// What every call needs: limits, the hard stop, the call tasks.
    handlers: Arc<HandlerContext>,
    /// For the 413 message.
    max_body_bytes: usize,
    /// The memory all bodies being read or answered may hold together, in
    /// bytes (see `server`).
    body_memory: Arc<tokio::sync::Semaphore>,
    body_memory_total: usize,
    /// The open connections, their bound and tasks; its `stop` (a child of
    /// the daemon's shutdown token) is cancelled to stop accepting.
    transport: Transport,
    /// The call history every answered call goes into, once set.
    history: OnceLock<Arc<CallHistory>>,
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
        let max_connections = listener::connection_bound(settings.max_connections);
        let body_memory_total = settings.max_body_memory.max(settings.max_body_bytes);
        let shared = Arc::new(Shared {
            token,
            routes: RwLock::new(Arc::new(RouteTable::default())),
            clients: HttpClients::default(),
            rejections: Rejections::default(),
            handlers: Arc::new(HandlerContext {
                max_output_bytes: settings.max_output_bytes,
                kill_grace: settings.kill_grace,
                hard_stop: CancellationToken::new(),
                tasks: TaskTracker::new(),
                mcp: Default::default(),
            }),
            max_body_bytes: settings.max_body_bytes,
            body_memory: Arc::new(tokio::sync::Semaphore::new(body_memory_total)),
            body_memory_total,
            transport: Transport::new(
                "callback",
                "[callback] max_connections",
                ConnectionLimits {
                    read_timeout: settings.read_timeout,
                    idle_timeout: settings.idle_timeout,
                    max_connections,
                },
                shutdown.child_token(),
            ),
            history: OnceLock::new(),
        });
        shared
            .transport
            .tasks
            .spawn(transport::accept_loop(shared.clone(), listener));
        tracing::info!(%addr, max_connections, "callback server listening");
        Ok(CallbackHandle {
            base_url: format!("http://{addr}"),
            shared: shared.clone(),
            _stop_when_dropped: Arc::new(shared.transport.stop.clone().drop_guard()),
        })
    }
}

/// The running server, as the daemon sees it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CallbackHandle {
    base_url: String,
    shared: Arc<Shared>,
    /// When the last handle goes, the server stops accepting (and its
    /// connections close), so a dropped server leaves nothing behind.
    _stop_when_dropped: Arc<tokio_util::sync::DropGuard>,
}

impl CallbackHandle {
    /// `http://IP:PORT` of the listener (IPv6 in brackets), no trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// How many connections the server holds open now.
    pub fn open_connections(&self) -> usize {
        self.shared.transport.count()
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
        let next = guard.rebuild(desired, &self.shared.clients);
        *guard = Arc::new(next);
    }

    /// Where calls of MCP tools go; set once, before any is routed.
    pub(crate) fn set_mcp(&self, servers: crate::mcp::McpServers) {
        let _ = self.shared.handlers.mcp.set(servers);
    }

    /// Where answered calls are recorded from now on; set once.
    pub fn set_history(&self, history: Arc<CallHistory>) {
        let _ = self.shared.history.set(history);
    }

    /// The call history, when one was set.
    pub fn history(&self) -> Option<Arc<CallHistory>> {
        self.shared.history.get().cloned()
    }

    pub fn stats(&self) -> CallbackStats {
        let routes = self.shared.routes();
        CallbackStats {
            tools: routes
                .iter()
                .map(|(name, r)| (name.clone(), r.stats.snapshot()))
                .collect(),
            rejections: self.shared.rejections.snapshot(),
            connections: self.shared.transport.counts(),
        }
    }

    /// Stops accepting, waits for running calls until `deadline`, then
    /// stops whatever still runs (see the module doc).
    pub async fn drain(&self, deadline: Instant) -> Drained {
        let s = &self.shared;
        s.transport.stop.cancel();
        let tasks = &s.handlers.tasks;
        tasks.close();
        let drained = if tokio::time::timeout_at(deadline, tasks.wait())
            .await
            .is_ok()
        {
            Drained::Clean
        } else {
            tracing::warn!("calls still running at the shutdown deadline; stopping them");
            s.handlers.hard_stop.cancel();
            let _ = tokio::time::timeout(FORCED_STOP_GRACE, tasks.wait()).await;
            Drained::Forced
        };
        // Open connections close as soon as their last answer is written.
        let server_deadline = deadline.max(Instant::now() + FORCED_STOP_GRACE);
        s.transport.tasks.close();
        if tokio::time::timeout_at(server_deadline, s.transport.tasks.wait())
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

/// The answer to a call with a token that is not this run's.
fn unknown_token(shared: &Shared) -> Answer {
    shared.rejections.count_unknown_token();
    let e = Envelope::failure(
        "UNKNOWN_CALLBACK_TOKEN",
        "this callback URL is out of date: the sidecar serving it has restarted since the tool was registered; it registers its tools again with a new URL, so try again shortly",
    );
    answer(StatusCode::OK, &e)
}

/// Answers a request at `/cb/{token}/{tool}` (`server` checked the peer,
/// the method and the token, and read the body).
async fn on_call(shared: &Shared, tool: &str, body: Result<Bytes, BodyError>) -> Answer {
    let arrived = Instant::now();
    let body = match body {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
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
        Err(BodyError::Stalled) => {
            let e = Envelope::failure(
                Outcome::BadBody.code(),
                "the call's body did not arrive in time (callback.read_timeout)",
            );
            return answer(StatusCode::REQUEST_TIMEOUT, &e);
        }
        Err(BodyError::NoMemory) => {
            shared.rejections.count_busy();
            let e = Envelope::failure(
                "SIDECAR_BUSY",
                format!(
                    "the sidecar is busy: the calls it is reading or answering hold all the memory it gives call bodies ({} bytes) and none was freed in time; the tool did not run; try again shortly",
                    shared.body_memory_total
                ),
            );
            return answer(StatusCode::SERVICE_UNAVAILABLE, &e);
        }
        Err(BodyError::Unreadable(why)) => {
            let e = Envelope::failure(
                Outcome::BadBody.code(),
                format!("the sidecar could not read this call's body: {why}"),
            );
            return answer(StatusCode::OK, &e);
        }
    };
    let routes = shared.routes();
    let Some(route) = routes.get(tool) else {
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
    let draining = shared.transport.stop.is_cancelled();
    // What the history needs after the call (a body clone is a reference).
    let recording = (shared.history.get())
        .filter(|h| h.capacity() > 0)
        .map(|h| (h, route.spec.clone(), body.clone()));
    let handlers = shared.handlers.clone();
    let is_exec = matches!(route.spec.handler, crate::manifest::Handler::Exec(_));
    let call = async move { call::answer(&handlers, route, body, arrived, draining).await };
    let done = if is_exec {
        // An exec call runs in a task of its own:
        // a caller that hangs up cannot cut it off halfway, so its process
        // is always stopped and reaped. A panic stays in that task.
        shared
            .handlers
            .tasks
            .spawn(call)
            .await
            .map_err(|e| e.to_string())
    } else {
        // An http call runs right here, which saves a task per call on the
        // hot path. Should the caller hang up, the call is dropped: its
        // connection to the handler closes (as nginx's does) and it counts
        // as abandoned. It is tracked like a task, for the drain, and a
        // panic is caught, so it answers as a failed task would.
        CatchUnwind(std::pin::pin!(shared.handlers.tasks.track_future(call)))
            .await
            .map_err(|_| "it panicked".to_string())
    };
    let reply = done.unwrap_or_else(|err| {
        tracing::error!(tool, error = %err, "a call's task failed");
        Envelope::failure(
            "SIDECAR_FAILURE",
            "the sidecar failed while answering this call (a bug in the sidecar); the handler may or may not have run",
        )
    });
    if let Some((history, spec, body)) = recording {
        let duration = arrived.elapsed();
        history.record(Finished {
            tool: &spec.name,
            role: spec.role.as_deref(),
            arrived: std::time::SystemTime::now() - duration,
            duration,
            body: &body,
            reply: &reply,
        });
    }
    answer(StatusCode::OK, &reply)
}

/// A future whose panic becomes an `Err` (what a task's `JoinError` is).
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::pin::Pin::new(inner).poll(cx)
        })) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
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
