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
//! A panic while answering is caught; the call answers `SIDECAR_FAILURE`.
//! A handler that crashes is only that call's failure. An exec call runs in
//! a task of its own, so a caller that hangs up cannot leave its process
//! unreaped; an http call runs in its connection's task (one task less per
//! call) and is dropped with it, closing its handler connection.
//!
//! Threads: the server runs on worker threads of its own (one per CPU, at
//! most [`MAX_WORKERS`]), each a single-threaded tokio runtime with its own
//! pool of handler connections, all accepting from the one listener. A call
//! is then read, handled and answered on one thread, as nginx's workers do:
//! on the daemon's shared work-stealing runtime, every call crossed threads
//! several times (the server connection, the call task and the handler
//! connection each woke another worker), which cost more CPU than the call's
//! own work (BENCHMARKS.md, benchmark 1). It also keeps a flood of calls
//! from delaying the registration engine, and the reverse.

mod call;
pub mod envelope;
mod exec_handler;
pub mod h1;
mod handler;
mod http_handler;
pub mod limits;
pub mod listener;
mod routes;
mod server;
pub mod stats;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use http::StatusCode;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{CallbackConfig, HandlersConfig};
use crate::desired::DesiredState;
use envelope::Envelope;
use handler::HandlerContext;
use routes::RouteTable;
use server::{Answer, BodyError, answer};
use stats::{Rejections, ToolStatsSnapshot};

pub use stats::{Outcome, RejectionCounts};

/// How long a forced stop (a drain past its deadline) may take for the
/// stopped calls to answer and their processes to be reaped.
pub const FORCED_STOP_GRACE: Duration = Duration::from_millis(500);

/// The most worker threads the server runs, whatever the CPU count: calls
/// mostly wait for handlers, and a few threads saturate loopback.
pub const MAX_WORKERS: usize = 4;

/// How many worker threads to run by default: one per CPU the process may
/// use.
fn worker_count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WORKERS)
}

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
    /// Worker threads; 0 means one per CPU (at most [`MAX_WORKERS`]).
    pub workers: usize,
}

impl CallbackSettings {
    pub fn from_config(callback: &CallbackConfig, handlers: &HandlersConfig) -> Self {
        Self {
            max_body_bytes: callback.max_body_bytes,
            max_output_bytes: handlers.max_output_bytes,
            kill_grace: handlers.kill_grace,
            workers: callback.workers,
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
    #[error("cannot start the callback server's worker threads: {0}")]
    Workers(#[source] std::io::Error),
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
    rejections: Rejections,
    /// Cancelled when a drain passes its deadline (see `HandlerContext`).
    hard_stop: CancellationToken,
    /// Every running call, on whichever worker (see `HandlerContext`).
    tasks: TaskTracker,
    /// Cancelled to stop accepting (a child of the daemon's shutdown token).
    stop_accepting: CancellationToken,
    /// For the 413 message.
    max_body_bytes: usize,
    /// Open connections per worker thread, to spread long-lived
    /// connections evenly (see `server`).
    open_connections: Vec<AtomicUsize>,
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
        let workers = match settings.workers {
            0 => worker_count(),
            n => n.min(MAX_WORKERS),
        };
        let shared = Arc::new(Shared {
            token,
            routes: RwLock::new(Arc::new(RouteTable::default())),
            rejections: Rejections::default(),
            hard_stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
            stop_accepting: shutdown.child_token(),
            open_connections: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            max_body_bytes: settings.max_body_bytes,
        });
        // Everything that can fail is made here, so a failure is the
        // caller's error and not a thread's.
        let listener = listener.into_std().map_err(CallbackError::Workers)?;
        let mut threads = Vec::new();
        for index in 0..workers {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(CallbackError::Workers)?;
            let worker = Worker {
                index,
                shared: shared.clone(),
                handlers: Arc::new(HandlerContext {
                    upstreams: Arc::default(),
                    max_output_bytes: settings.max_output_bytes,
                    kill_grace: settings.kill_grace,
                    // A child per worker: every call waits on it, and a
                    // token's waiters sit behind one lock, which workers
                    // sharing the token would pass between their CPUs on
                    // every call. Cancelling the parent cancels them all.
                    hard_stop: shared.hard_stop.child_token(),
                    tasks: shared.tasks.clone(),
                }),
            };
            let listener = listener.try_clone().map_err(CallbackError::Workers)?;
            threads.push((runtime, worker, listener));
        }
        drop(listener);
        let server = TaskTracker::new();
        for (runtime, worker, listener) in threads {
            let running = server.token();
            let stop = shared.stop_accepting.clone();
            std::thread::Builder::new()
                .name(format!("neko-callback-{}", worker.index))
                .spawn(move || {
                    server::serve_on(runtime, listener, worker, stop);
                    drop(running);
                })
                .map_err(|e| {
                    // The workers already started stop with the rest.
                    shared.stop_accepting.cancel();
                    CallbackError::Workers(e)
                })?;
        }
        server.close();
        tracing::info!(%addr, "callback server listening");
        Ok(CallbackHandle {
            base_url: format!("http://{addr}"),
            shared: shared.clone(),
            server,
            _stop_when_dropped: Arc::new(shared.stop_accepting.clone().drop_guard()),
        })
    }
}

/// One worker thread's view: the shared state and its own handler clients.
#[derive(Debug, Clone)]
pub(crate) struct Worker {
    /// This worker's place in `Shared::open_connections`.
    index: usize,
    shared: Arc<Shared>,
    handlers: Arc<HandlerContext>,
}

/// The running server, as the daemon sees it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CallbackHandle {
    base_url: String,
    shared: Arc<Shared>,
    /// One token per worker thread, dropped when the thread ends.
    server: TaskTracker,
    /// When the last handle goes, the workers stop accepting (and end once
    /// their connections close), so a dropped server leaves no thread
    /// behind.
    _stop_when_dropped: Arc<tokio_util::sync::DropGuard>,
}

impl CallbackHandle {
    /// `http://IP:PORT` of the listener (IPv6 in brackets), no trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// How many callback connections each worker thread holds open now
    /// (for tests and diagnostics: the spread `server::over_share` keeps).
    pub fn connections_per_worker(&self) -> Vec<usize> {
        self.shared
            .open_connections
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
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
        s.tasks.close();
        let drained = if tokio::time::timeout_at(deadline, s.tasks.wait())
            .await
            .is_ok()
        {
            Drained::Clean
        } else {
            tracing::warn!("calls still running at the shutdown deadline; stopping them");
            s.hard_stop.cancel();
            let _ = tokio::time::timeout(FORCED_STOP_GRACE, s.tasks.wait()).await;
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

/// Answers a request at `/cb/{token}/{tool}` (the transport in `server`
/// checked the peer, the method and the body's size).
async fn on_call(
    worker: &Worker,
    token: &str,
    tool: &str,
    body: Result<Bytes, BodyError>,
) -> Answer {
    let arrived = Instant::now();
    let Worker {
        shared, handlers, ..
    } = worker;
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
        Err(BodyError::Unreadable(why)) => {
            let e = Envelope::failure(
                Outcome::BadBody.code(),
                format!("the sidecar could not read this call's body: {why}"),
            );
            return answer(StatusCode::OK, &e);
        }
    };
    if !token_matches(&shared.token, token) {
        shared.rejections.count_unknown_token();
        let e = Envelope::failure(
            "UNKNOWN_CALLBACK_TOKEN",
            "this callback URL is out of date: the sidecar serving it has restarted since the tool was registered; it registers its tools again with a new URL, so try again shortly",
        );
        return answer(StatusCode::OK, &e);
    }
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
    let draining = shared.stop_accepting.is_cancelled();
    let handlers = handlers.clone();
    let is_exec = matches!(route.spec.handler, crate::manifest::Handler::Exec(_));
    let call = async move { call::answer(&handlers, route, body, arrived, draining).await };
    let done = if is_exec {
        // An exec call runs in a task of its own (on this worker's thread):
        // a caller that hangs up cannot cut it off halfway, so its process
        // is always stopped and reaped. A panic stays in that task.
        shared.tasks.spawn(call).await.map_err(|e| e.to_string())
    } else {
        // An http call runs right here, which saves a task per call on the
        // hot path. Should the caller hang up, the call is dropped: its
        // connection to the handler closes (as nginx's does) and it counts
        // as abandoned. It is tracked like a task, for the drain, and a
        // panic is caught, so it answers as a failed task would.
        CatchUnwind(std::pin::pin!(shared.tasks.track_future(call)))
            .await
            .map_err(|_| "it panicked".to_string())
    };
    match done {
        Ok(reply) => server::reply(reply),
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
