//! One `[[mcp_server]]` kept connected: start it (or connect to it), do the
//! handshake, list its tools, list again when they change, notice when it
//! dies or stops answering and start it again, forever, with the
//! registration backoff; and, for calls, the live MCP session.
//!
//! While the server is down, its last listing stays (its tools stay
//! registered) and calls get a clear error that says it is restarting. The
//! backoff starts over only after the server stayed up for `STABLE_UPTIME`,
//! so a server that dies at every start is not restarted in a tight loop.
//! It decides nothing about registration: the hub turns listings into tools.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    PingRequest, ServerNotification, SubscriptionFilter,
};
use rmcp::service::RunningService;
use rmcp::{ClientHandler, Peer, RoleClient};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::guard::Guard;
use super::handshake::{Generation, Handshake, handshake};
use super::listing;
use super::process::{self, ServerProcess};
use super::remote_http::{LastFailure, RemoteHttp};
use super::sse::SseTransport;
use super::stderr::{self, StderrTail};
use super::tools::{Listed, Rejected};
use crate::backoff::{BackoffPolicy, Jitter, Retry};
use crate::manifest::{HttpKind, HttpOptions, McpServerSpec, McpTransport, remote};

/// After this long up, a server that dies is restarted after the initial
/// backoff again, not after the last delay.
const STABLE_UPTIME: Duration = Duration::from_secs(30);
/// Between two liveness pings of an idle session.
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// A server that answers neither a listing nor a ping in this long is
/// taken as hung, and started again.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// Listed again at least this often when the server gives no time to live,
/// so a server that changes its tools without saying so is still followed.
const DEFAULT_RELIST: Duration = Duration::from_secs(300);
/// The shortest time to live we follow: a server saying "0 ms" must not
/// make us list in a loop.
const MIN_RELIST: Duration = Duration::from_secs(1);
/// The least time between two listings of one server: `list_changed`
/// notifications closer together are coalesced into one listing.
const RELIST_GAP: Duration = Duration::from_secs(1);
/// Requests in flight at once on one Streamable HTTP session.
const HTTP_CONCURRENCY: usize = 64;

/// Where a server is in its life, for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// First start, not ready yet.
    Starting,
    /// Handshake done, tools listed: calls go through.
    Ready,
    /// Lost (or never reached) and waiting to try again.
    Restarting,
    /// Stopped for good (removed from the manifests, or shutdown).
    Stopped,
}

/// One server as operators see it (`/status`, `status`, `/metrics`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub name: String,
    /// "stdio COMMAND", "http URL", or "sse URL" (also once a `url`
    /// whose transport was not given turned out to serve HTTP+SSE); never
    /// env or header values.
    pub transport: String,
    pub phase: Phase,
    /// Failed starts in a row (0 when ready).
    pub attempt: u32,
    pub last_error: Option<String>,
    /// The protocol version negotiated (e.g. "2026-07-28", "2025-11-25").
    pub protocol: Option<String>,
    /// Of a stdio server's process, while it runs.
    pub pid: Option<u32>,
    /// Times it was started again after being ready.
    pub restarts: u64,
    /// The names we offer main_server from its listing.
    pub tools: Vec<String>,
    /// Listed tools not offered, each with its reason.
    pub rejected: Vec<Rejected>,
    /// Left out by `include`/`exclude`.
    pub filtered: usize,
    /// When the last listing arrived.
    #[serde(skip)]
    pub listed_at: Option<SystemTime>,
    /// A server that signs in with OAuth: signed in, or needing a sign-in
    /// (with its link); never a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign_in: Option<super::oauth::SignIn>,
}

/// Why a call could not be made on the session.
#[derive(Debug)]
pub(crate) enum CallError {
    /// Not connected now (starting, restarting, stopped).
    Unavailable(String),
    /// The server answered with a JSON-RPC error.
    Rpc { code: i32, message: String },
    /// The server asked for more input, or made a task: things a tool call
    /// from main_server cannot carry on with.
    Unsupported(String),
    /// The session broke during the call.
    Lost(String),
}

/// The client side we present to the server: it only hears "your tools
/// changed" from an older server (a newer one sends that on a
/// subscription, see `serve`).
struct Listener {
    changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.changed.notify_one();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("neko-sidecar", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// One server's session, shared by its task, the hub and the calls.
pub(crate) struct Session {
    pub spec: Arc<McpServerSpec>,
    status: Mutex<ServerStatus>,
    /// The last listing; kept while the server is down.
    listing: Mutex<Option<Arc<Vec<Listed>>>>,
    /// Present while ready.
    peer: RwLock<Option<Peer<RoleClient>>>,
    /// `max_concurrency`, across the server's tools.
    slots: Option<Semaphore>,
    /// Calls running now (pings wait while any does).
    in_flight: std::sync::atomic::AtomicUsize,
    /// A call saw the session break: reconnect now rather than at the ping.
    broken: Notify,
    /// Tools of the last listing past `listing::MAX_TOOLS`, not offered.
    pub(crate) over_limit: std::sync::atomic::AtomicUsize,
    /// The schemas of the last offer, compiled (the hub's, see
    /// `tools::Compiled`): only those that changed are compiled again.
    compiled: Mutex<super::tools::Compiled>,
    /// Told when the listing changed (the hub's).
    hub: Arc<Notify>,
    stop: CancellationToken,
    /// By when a stop must be done; set before `stop` is cancelled.
    stop_by: Mutex<Option<Instant>>,
    /// The protocol generation the server spoke, for its restarts; a
    /// changed table makes a new session, which probes afresh.
    generation: Mutex<Generation>,
    /// A `url` whose transport was not given turned out to serve the
    /// legacy HTTP+SSE transport: its restarts go there at once, until a
    /// start there fails.
    sse_found: Mutex<bool>,
    /// What must never be shown (header values, the URL's query values
    /// and password): scrubbed from every error before it is logged,
    /// kept in the status or sent to the model.
    secrets: Vec<String>,
    /// Its OAuth sign-in (a `url` server without `oauth = false`).
    auth: Option<Arc<super::oauth::ServerAuth>>,
}

impl Session {
    pub(crate) fn new(
        spec: Arc<McpServerSpec>,
        listing: Option<Arc<Vec<Listed>>>,
        hub: Arc<Notify>,
        auth: Option<Arc<super::oauth::ServerAuth>>,
    ) -> Arc<Self> {
        let status = ServerStatus {
            name: spec.name.clone(),
            transport: spec.transport.to_string(),
            phase: Phase::Starting,
            attempt: 0,
            last_error: None,
            protocol: None,
            pid: None,
            restarts: 0,
            tools: Vec::new(),
            rejected: Vec::new(),
            filtered: 0,
            listed_at: None,
            sign_in: None,
        };
        let secrets = match &spec.transport {
            McpTransport::Http { url, headers, .. } => remote::secrets_of(url, headers),
            McpTransport::Stdio { .. } => Vec::new(),
        };
        crate::logging::keep_out(&secrets);
        Arc::new(Self {
            auth,
            secrets,
            slots: spec.max_concurrency.map(|n| Semaphore::new(n.get())),
            spec,
            status: Mutex::new(status),
            listing: Mutex::new(listing),
            peer: RwLock::new(None),
            in_flight: Default::default(),
            broken: Notify::new(),
            over_limit: Default::default(),
            compiled: Mutex::default(),
            hub,
            stop: CancellationToken::new(),
            stop_by: Mutex::new(None),
            generation: Mutex::new(Generation::Unknown),
            sse_found: Mutex::new(false),
        })
    }

    pub(crate) fn status(&self) -> ServerStatus {
        let mut s = lock(&self.status).clone();
        s.sign_in = self.auth.as_ref().and_then(|a| a.status());
        s
    }

    /// Its OAuth sign-in, if it signs in.
    pub(crate) fn auth(&self) -> Option<&Arc<super::oauth::ServerAuth>> {
        self.auth.as_ref()
    }

    /// A session started in place of an old one by hand (`McpServers::
    /// restart`) goes on counting its restarts.
    pub(super) fn restarted_from(&self, old: &Session) {
        let restarts = lock(&old.status).restarts + 1;
        self.update(|s| s.restarts = restarts);
    }

    pub(crate) fn listing(&self) -> Option<Arc<Vec<Listed>>> {
        lock(&self.listing).clone()
    }

    /// What the hub made of the listing, for operators; whether the
    /// rejections changed (they are logged once per change).
    /// The compiled schemas of the last offer, for the hub to reuse; it
    /// puts back what the new offer compiled ([`Session::set_compiled`]).
    pub(crate) fn compiled(&self) -> super::tools::Compiled {
        std::mem::take(&mut *lock(&self.compiled))
    }

    pub(crate) fn set_compiled(&self, compiled: super::tools::Compiled) {
        *lock(&self.compiled) = compiled;
    }

    pub(crate) fn set_offered(
        &self,
        tools: Vec<String>,
        rejected: Vec<Rejected>,
        filtered: usize,
    ) -> bool {
        let mut s = lock(&self.status);
        let changed = s.rejected != rejected;
        s.tools = tools;
        s.rejected = rejected;
        s.filtered = filtered;
        changed
    }

    /// Asks the session to stop by `deadline`; `run` returns when it has.
    pub(crate) fn stop(&self, deadline: Instant) {
        *lock(&self.stop_by) = Some(deadline);
        self.stop.cancel();
    }

    /// Waits for one of the server's `max_concurrency` slots (`None`: it
    /// has no such limit), to hand to [`Self::call`].
    pub(crate) async fn slot(&self) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, CallError> {
        match &self.slots {
            Some(s) => Ok(Some(s.acquire().await.map_err(|_| self.unavailable())?)),
            None => Ok(None),
        }
    }

    /// The server's `max_concurrency`, if any.
    pub(crate) fn max_concurrency(&self) -> Option<usize> {
        self.spec.max_concurrency.map(|n| n.get())
    }

    /// `text` with this server's secrets replaced by `…`.
    fn scrub(&self, text: &str) -> String {
        // The sign-in's tokens and codes are kept out of every text too.
        remote::scrub(&crate::logging::scrub(text), &self.secrets)
    }

    fn update(&self, f: impl FnOnce(&mut ServerStatus)) {
        f(&mut lock(&self.status));
    }

    /// Calls the MCP tool `tool` with `arguments`, the result as JSON on
    /// the wire. Dropping the future (at the deadline) cancels the request
    /// on the server (`notifications/cancelled`, rmcp's drop guard).
    ///
    /// `_slot` is one of the server's `max_concurrency` slots, from
    /// [`Self::slot`]: the caller waits for it apart, so that a call that
    /// never got one says so (`TOO_MANY_CALLS`) rather than "did not answer".
    pub(crate) async fn call(
        &self,
        _slot: Option<tokio::sync::SemaphorePermit<'_>>,
        tool: &str,
        arguments: serde_json::Map<String, Json>,
    ) -> Result<Json, CallError> {
        let peer = self
            .peer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| self.unavailable())?;
        let _running = InFlight::enter(&self.in_flight);
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        match peer.call_tool_once(params).await {
            Ok(rmcp::model::CallToolResponse::Complete(result)) => serde_json::to_value(&result)
                .map_err(|e| CallError::Lost(format!("its answer could not be read: {e}"))),
            Ok(rmcp::model::CallToolResponse::InputRequired(_)) => Err(CallError::Unsupported(
                "the tool asked for more input (input_required), which a call from main_server cannot give".into(),
            )),
            Ok(_) => Err(CallError::Unsupported(
                "the tool answered with a task to poll, which a call from main_server cannot wait for".into(),
            )),
            Err(rmcp::ServiceError::McpError(e)) => Err(CallError::Rpc {
                code: e.code.0,
                message: e.message.to_string(),
            }),
            Err(e) => {
                self.broken.notify_one();
                // A refresh refused during the call: the user must sign in.
                if let Some(auth) = &self.auth
                    && auth.needs_sign_in()
                {
                    return Err(CallError::Unavailable(auth.sign_in_message()));
                }
                Err(CallError::Lost(self.scrub(&e.to_string())))
            }
        }
    }

    fn unavailable(&self) -> CallError {
        if let Some(auth) = &self.auth
            && auth.needs_sign_in()
        {
            return CallError::Unavailable(auth.sign_in_message());
        }
        let s = self.status();
        let why = match (s.phase, &s.last_error) {
            (Phase::Stopped, _) => "is stopped".to_string(),
            (Phase::Starting, None) => "is starting".to_string(),
            (_, Some(e)) => format!(
                "is restarting (attempt {}; last error: {e})",
                s.attempt.max(1)
            ),
            (_, None) => "is restarting".to_string(),
        };
        CallError::Unavailable(format!(
            "the MCP server `{}` {why}; its tools stay registered and answer again once it is back: try again shortly",
            self.spec.name
        ))
    }

    /// The session's life: connect, serve, reconnect, until stopped.
    pub(crate) async fn run(self: Arc<Self>, policy: BackoffPolicy, jitter: Jitter) {
        let mut retry = Retry::default();
        loop {
            if self.stop.is_cancelled() {
                break;
            }
            let started = Instant::now();
            let outcome = self.serve_once().await;
            *self.peer.write().unwrap_or_else(|e| e.into_inner()) = None;
            let Err(error) = outcome else {
                break; // stopped
            };
            let error = self.scrub(&error);
            if started.elapsed() >= STABLE_UPTIME {
                retry.reset();
            }
            let delay = retry.failed(&policy, jitter.unit());
            let attempt = retry.attempt();
            tracing::warn!(
                mcp_server = %self.spec.name,
                attempt,
                retry_in_ms = delay.as_millis() as u64,
                "{error}"
            );
            self.update(|s| {
                if s.phase == Phase::Ready {
                    s.restarts += 1;
                }
                s.phase = if s.restarts > 0 {
                    Phase::Restarting
                } else {
                    Phase::Starting
                };
                s.attempt = attempt;
                s.last_error = Some(error);
                s.pid = None;
            });
            // A server waiting for a sign-in is tried again once the user
            // signed in, not on a timer: without one it can only say 401.
            let waits = self.auth.as_ref().is_some_and(|a| a.waits_for_user());
            let signed_in = async {
                match &self.auth {
                    Some(a) => a.signed_in.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.stop.cancelled() => break,
                () = tokio::time::sleep(delay), if !waits => {}
                () = signed_in => retry.reset(),
            }
        }
        self.update(|s| {
            s.phase = Phase::Stopped;
            s.pid = None;
        });
    }

    /// One connection, from start to loss: `Ok` when stopped, else why it
    /// ended.
    async fn serve_once(&self) -> Result<(), String> {
        let changed = Arc::new(Notify::new());
        let handler = || Listener {
            changed: changed.clone(),
        };
        let budget = self.spec.startup_timeout();
        // This session's budget of the server's requests and our replies.
        let guard = Guard::new();
        // The end of the stdio server's stderr, for the reasons below.
        let tail = StderrTail::default();
        // A copy: the lock is not held across the handshake's awaits.
        let mut known = *lock(&self.generation);
        let (running, mut process): (RunningService<RoleClient, Listener>, Option<ServerProcess>) =
            match &self.spec.transport {
                McpTransport::Stdio { command, cwd, env } => {
                    let open = || async {
                        process::spawn(&self.spec.name, command, cwd, env, &tail)
                            .await
                            .map_err(|e| {
                                format!(
                                    "cannot start `{}`: {e}{}",
                                    command[0],
                                    stderr::hint_not_started(&e)
                                )
                            })
                            .map(|(proc, stdout, stdin)| {
                                let pid = proc.id();
                                self.update(|s| s.pid = pid);
                                ((stdout, stdin), proc)
                            })
                    };
                    let close = |proc: ServerProcess| async move {
                        format!("; the process {}", proc.stop(self.close_deadline()).await)
                    };
                    let ended = handshake(
                        &self.spec.name,
                        &mut known,
                        budget,
                        &self.stop,
                        &guard,
                        handler,
                        open,
                        close,
                    )
                    .await;
                    *lock(&self.generation) = known;
                    match ended {
                        Handshake::Ready { running, conn } => (running, Some(conn)),
                        Handshake::Failed(e) | Handshake::HttpClientError(e) => {
                            // A program that could not be started has no
                            // stderr; one that did may have said why.
                            return Err(format!(
                                "the handshake failed: {e}{}",
                                tail.explain().await
                            ));
                        }
                        Handshake::Stopped => return Ok(()),
                    }
                }
                McpTransport::Http {
                    url,
                    headers,
                    kind,
                    options,
                } => {
                    let ended = self
                        .connect_http(
                            url, headers, *kind, options, &mut known, budget, &guard, &handler,
                        )
                        .await;
                    *lock(&self.generation) = known;
                    match ended {
                        Ok(Some(running)) => (running, None),
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(e),
                    }
                }
            };
        let peer = running.peer().clone();
        // Every listing is asked for on purpose (a change, a reconnect, its
        // time to live): rmcp's cache would answer some from memory, and
        // with the server gone, a stale copy instead of the error.
        peer.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
            .await;
        let version = peer.peer_info().map(|i| i.protocol_version.clone());
        let protocol = version.as_ref().map(|v| v.as_str().to_string());
        let cancel = running.cancellation_token();
        // `None` once it has ended (an ended future must not be polled).
        let mut ended = Some(Box::pin(running.waiting()));

        // A 2026-07-28 server sends list changes on a subscription only.
        // One that does not acknowledge in time is listed at its time to
        // live instead.
        let mut subscription = match &version {
            Some(v) if !v.has_initialize() => {
                let filter = SubscriptionFilter::builder().tools_list_changed().build();
                match tokio::time::timeout(ANSWER_TIMEOUT, peer.listen(filter)).await {
                    Ok(Ok(sub)) => Some(sub),
                    _ => None,
                }
            }
            _ => None,
        };

        let listed = tokio::select! {
            biased;
            () = guard.tripped() => Err(String::new()),
            listed = self.list(&peer) => listed,
        };
        let mut relist_at = match listed {
            Ok(at) => at,
            Err(e) => {
                cancel.cancel();
                self.finish(process.take(), &mut ended).await;
                // The budget's reason, when it ended the session, says
                // more than the listing's "Transport close".
                return Err(match guard.reason() {
                    Some(why) => format!("the MCP server `{}`: {why}", self.spec.name),
                    None => e,
                });
            }
        };
        *self.peer.write().unwrap_or_else(|e| e.into_inner()) = Some(peer.clone());
        self.update(|s| {
            s.phase = Phase::Ready;
            s.attempt = 0;
            s.last_error = None;
            s.protocol = protocol.clone();
        });
        tracing::info!(
            mcp_server = %self.spec.name,
            protocol = protocol.as_deref().unwrap_or("?"),
            "MCP server ready"
        );
        let mut ping_at = Instant::now() + PING_INTERVAL;
        let mut listed_at = Instant::now();
        let why = loop {
            let next_event = async {
                match subscription.as_mut() {
                    Some(sub) => match sub.next().await {
                        Ok(Some(ServerNotification::ToolListChangedNotification(_))) => true,
                        Ok(Some(_)) => false,
                        // The subscription ended: the handler path remains.
                        _ => std::future::pending().await,
                    },
                    None => std::future::pending().await,
                }
            };
            let exited = async {
                match process.as_mut() {
                    Some(p) => p.exited().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.stop.cancelled() => {
                    cancel.cancel();
                    self.finish(process.take(), &mut ended).await;
                    return Ok(());
                }
                how = exited => break format!("the MCP server `{}` {how}{}", self.spec.name, tail.explain().await),
                () = guard.tripped() => {
                    break format!("the MCP server `{}`: {}", self.spec.name, guard.reason().unwrap_or_default());
                }
                _ = async { if let Some(e) = ended.as_mut() { e.await } else { std::future::pending().await } } => {
                    ended = None;
                    if let Some(why) = guard.reason() {
                        break format!("the MCP server `{}`: {why}", self.spec.name);
                    }
                    break format!("the MCP server `{}` closed the session", self.spec.name);
                }
                () = self.broken.notified() => break format!("the session with the MCP server `{}` broke during a call", self.spec.name),
                // A change is listed at once, or [`RELIST_GAP`] after the
                // last listing: a flood of `list_changed` is one listing a
                // second, not one each.
                () = changed.notified() => {
                    relist_at = relist_at.min((listed_at + RELIST_GAP).max(Instant::now()));
                }
                relevant = next_event => {
                    if relevant {
                        relist_at = relist_at.min((listed_at + RELIST_GAP).max(Instant::now()));
                    }
                }
                () = tokio::time::sleep_until(relist_at) => {
                    listed_at = Instant::now();
                    if let Err(e) = self.relist(&peer, &mut relist_at).await { break e; }
                }
                () = tokio::time::sleep_until(ping_at) => {
                    ping_at = Instant::now() + PING_INTERVAL;
                    if self.in_flight.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                        let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
                        match tokio::time::timeout(ANSWER_TIMEOUT, ping).await {
                            Ok(r) if answered(&r) => {}
                            Ok(Err(e)) => break format!("the MCP server `{}` failed a ping: {e}", self.spec.name),
                            Ok(Ok(_)) => {}
                            Err(_) => break format!("the MCP server `{}` did not answer a ping in {} s", self.spec.name, ANSWER_TIMEOUT.as_secs()),
                        }
                    }
                }
            }
        };
        *self.peer.write().unwrap_or_else(|e| e.into_inner()) = None;
        cancel.cancel();
        self.finish(process.take(), &mut ended).await;
        Err(why)
    }

    /// Connects to a `url` server by the transport `kind` says. With
    /// `Detect`, Streamable HTTP first and, when a POST of its handshake is
    /// answered with an HTTP 4xx, the legacy HTTP+SSE transport by a GET,
    /// as the MCP specification asks of clients (see `handshake`); what was
    /// found is kept for the restarts. `Ok(None)`: stopped.
    #[allow(clippy::too_many_arguments)] // reason: one server's table and the session's state, read once
    async fn connect_http(
        &self,
        url: &str,
        headers: &std::collections::BTreeMap<String, String>,
        kind: HttpKind,
        options: &HttpOptions,
        known: &mut Generation,
        budget: Duration,
        guard: &Arc<Guard>,
        handler: &impl Fn() -> Listener,
    ) -> Result<Option<RunningService<RoleClient, Listener>>, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("the URL is not a URL: {e}"))?;
        // The URL as it may be shown: its query may hold an API key.
        let shown = remote::redact_url(url);
        let server_client = crate::tls::server_client(&parsed, options)?;
        let client = server_client.http.clone();
        let remote = RemoteHttp {
            http: client.clone(),
            last: LastFailure::default(),
            auth: self.auth.clone(),
        };
        // A refused certificate explains a failure better than anything;
        // then the cause of the last failed request (refused, timed out,
        // a proxy's answer), which rmcp's error leaves out.
        let why = |e: String| match server_client.take_refusal() {
            Some(refused) => refused,
            None => match remote.last.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(cause) if !e.contains(&cause) => {
                    format!(
                        "{e} ({cause}{}{})",
                        timeout_hint(&cause, options),
                        proxy_hint(&parsed, options)
                    )
                }
                _ => e,
            },
        };
        let headers = header_map(headers)?;
        let sse_first = match kind {
            HttpKind::Sse => true,
            HttpKind::StreamableHttp => false,
            HttpKind::Detect => *lock(&self.sse_found),
        };
        let mut streamable_failed = None;
        // A refreshed token is tried at once, once.
        let mut renewed = false;
        // Only a refreshed token goes round again.
        'streamable: loop {
            if sse_first {
                break 'streamable;
            }
            // Each try on a session of its own: nothing abandoned on one
            // can answer on the next.
            let open =
                || std::future::ready(Ok((http_transport(remote.clone(), url, &headers), ())));
            let close = |()| std::future::ready(String::new());
            let ended = handshake(
                &self.spec.name,
                known,
                budget,
                &self.stop,
                guard,
                handler,
                open,
                close,
            )
            .await;
            // A `401`: the MCP specification's sign-in, not the legacy
            // transport's fallback.
            if let (Handshake::Failed(_) | Handshake::HttpClientError(_), Some(auth)) =
                (&ended, &self.auth)
                && let Some(challenge) = auth.take_challenge()
            {
                match auth.unauthorized(challenge).await {
                    super::oauth::Unauthorized::Retry if !renewed => {
                        renewed = true;
                        continue 'streamable;
                    }
                    super::oauth::Unauthorized::Retry => {
                        return Err(format!(
                            "cannot connect to {shown}: it refused a freshly refreshed access token (HTTP 401)"
                        ));
                    }
                    super::oauth::Unauthorized::NeedsSignIn(msg) => {
                        return Err(format!("cannot connect to {shown}: {msg}"));
                    }
                    super::oauth::Unauthorized::Refused(why) => {
                        return Err(format!(
                            "cannot connect to {shown}: it needs a sign-in (HTTP 401), which cannot work: {why}"
                        ));
                    }
                }
            }
            match ended {
                Handshake::Ready { running, .. } => {
                    self.show_transport(HttpKind::StreamableHttp);
                    return Ok(Some(running));
                }
                Handshake::Stopped => return Ok(None),
                Handshake::HttpClientError(e) if kind == HttpKind::Detect => {
                    tracing::info!(
                        mcp_server = %self.spec.name,
                        "the URL answered the POST of the handshake with an HTTP 4xx ({}): trying the legacy HTTP+SSE transport (MCP 2024-11-05) with a GET",
                        self.scrub(&e)
                    );
                    streamable_failed = Some(e);
                }
                Handshake::HttpClientError(e) => {
                    return Err(format!(
                        "cannot connect to {shown}: {e} (a server of the legacy HTTP+SSE transport answers so: then say transport = \"sse\", or leave `transport` out to have it tried)"
                    ));
                }
                Handshake::Failed(e) => {
                    return Err(format!("cannot connect to {shown}: {}", why(e)));
                }
            }
            break 'streamable;
        }
        // The HTTP+SSE transport is of the 2024-11-05 generation: its
        // servers are greeted with `initialize`, never `server/discover`.
        let mut older = Generation::Older;
        // Well within the budget, so that a stream that never names its
        // endpoint is reported as that, not as a handshake out of time.
        let endpoint_wait = ANSWER_TIMEOUT.min(budget / 2);
        // The legacy transport sends the sign-in's token as a header of its
        // GET and POSTs, taken at connection time.
        let mut headers = headers;
        if let Some(auth) = &self.auth
            && !headers.contains_key(http::header::AUTHORIZATION)
            && let Some(token) = auth.bearer().await
            && let Ok(v) = http::HeaderValue::try_from(format!("Bearer {token}"))
        {
            headers.insert(http::header::AUTHORIZATION, v);
        }
        let open = || {
            std::future::ready(
                SseTransport::new(
                    &self.spec.name,
                    client.clone(),
                    url,
                    headers.clone(),
                    endpoint_wait,
                    self.auth.clone(),
                )
                .map(|t| (t, ())),
            )
        };
        let close = |()| std::future::ready(String::new());
        match handshake(
            &self.spec.name,
            &mut older,
            budget,
            &self.stop,
            guard,
            handler,
            open,
            close,
        )
        .await
        {
            Handshake::Ready { running, .. } => {
                if kind == HttpKind::Detect && !sse_first {
                    tracing::info!(
                        mcp_server = %self.spec.name,
                        "the server speaks the legacy HTTP+SSE transport; its restarts use it at once"
                    );
                }
                *lock(&self.sse_found) = kind == HttpKind::Detect;
                self.show_transport(HttpKind::Sse);
                Ok(Some(running))
            }
            Handshake::Stopped => Ok(None),
            Handshake::Failed(e) | Handshake::HttpClientError(e) => {
                *lock(&self.sse_found) = false;
                // The legacy transport's GET (or a POST) answered 401: the
                // transport handed its challenge to the sign-in, whose
                // discovery starts from its resource_metadata.
                if let Some(auth) = &self.auth
                    && e.contains("401 Unauthorized")
                {
                    let challenge = auth.take_challenge().unwrap_or_default();
                    return Err(match auth.unauthorized(challenge).await {
                        super::oauth::Unauthorized::Retry => format!(
                            "cannot connect to {shown}: its access token was refreshed; connecting again"
                        ),
                        super::oauth::Unauthorized::NeedsSignIn(msg) => {
                            format!("cannot connect to {shown}: {msg}")
                        }
                        super::oauth::Unauthorized::Refused(why) => format!(
                            "cannot connect to {shown}: it needs a sign-in (HTTP 401), which cannot work: {why}"
                        ),
                    });
                }
                let e = why(e);
                Err(match streamable_failed {
                    Some(first) => format!(
                        "cannot connect to {shown}: over Streamable HTTP, {first}; then over the HTTP+SSE transport, {e}"
                    ),
                    None => format!("cannot connect to {shown} over the HTTP+SSE transport: {e}"),
                })
            }
        }
    }

    /// Shows the transport a `url` server was reached by in its status
    /// ("sse URL", "http URL"), the URL as it was shown.
    fn show_transport(&self, kind: HttpKind) {
        self.update(|s| {
            if let Some((_, rest)) = s.transport.split_once(' ') {
                s.transport = format!("{} {rest}", kind.label());
            }
        });
    }

    /// Closes the session (stdin closes with it) and stops the process:
    /// a third of the time left for the session to end, the rest for the
    /// process (`ServerProcess::stop`).
    async fn finish<F: Future + Unpin>(
        &self,
        process: Option<ServerProcess>,
        ended: &mut Option<F>,
    ) {
        let deadline = if self.stop.is_cancelled() {
            self.stop_deadline()
        } else {
            Instant::now() + Duration::from_secs(2)
        };
        if let Some(e) = ended.take() {
            let now = Instant::now();
            let closed_by = now + deadline.saturating_duration_since(now) / 3;
            let _ = tokio::time::timeout_at(closed_by, e).await;
        }
        if let Some(p) = process {
            let how = p.stop(deadline).await;
            tracing::debug!(mcp_server = %self.spec.name, "the process {how}");
        }
    }

    fn stop_deadline(&self) -> Instant {
        lock(&self.stop_by).unwrap_or_else(|| Instant::now() + Duration::from_secs(2))
    }

    /// By when a connection closed during the handshake must be gone: the
    /// stop's deadline when stopping, else a second.
    fn close_deadline(&self) -> Instant {
        if self.stop.is_cancelled() {
            self.stop_deadline()
        } else {
            Instant::now() + Duration::from_secs(1)
        }
    }

    async fn relist(&self, peer: &Peer<RoleClient>, relist_at: &mut Instant) -> Result<(), String> {
        *relist_at = self.list(peer).await?;
        Ok(())
    }

    /// Every page of `tools/list`, within the listing's budget: at most
    /// [`listing::MAX_PAGES`] pages and [`listing::MAX_BYTES`] bytes (a
    /// server past either is refused, with the reason), and at most
    /// [`listing::MAX_TOOLS`] tools (the first are kept, the rest said in
    /// the status). A stop ends it at once.
    async fn list_pages(&self, peer: &Peer<RoleClient>) -> Result<listing::Pages, String> {
        let name = &self.spec.name;
        let mut pages = listing::Pages::default();
        let mut cursor = None;
        loop {
            let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
            let page = tokio::select! {
                () = self.stop.cancelled() => return Err(format!("the MCP server `{name}` is being stopped")),
                page = peer.list_tools(Some(params)) => page,
            }
            .map_err(|e| format!("tools/list of the MCP server `{name}` failed: {}", listing::service_error(&e)))?;
            cursor = pages.add(page).map_err(|why| {
                format!("tools/list of the MCP server `{name}` was refused: {why}")
            })?;
            if cursor.is_none() {
                return Ok(pages);
            }
        }
    }

    /// Lists every page, keeps the listing, tells the hub if it changed;
    /// returns when to list again.
    async fn list(&self, peer: &Peer<RoleClient>) -> Result<Instant, String> {
        let merged = match tokio::time::timeout(ANSWER_TIMEOUT, self.list_pages(peer)).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(format!(
                    "tools/list of the MCP server `{}` got no answer in {} s",
                    self.spec.name,
                    ANSWER_TIMEOUT.as_secs()
                ));
            }
        };
        let listing = merged.listing;
        self.over_limit
            .store(merged.over, std::sync::atomic::Ordering::Relaxed);
        let ttl = merged
            .ttl_ms
            .map_or(DEFAULT_RELIST, Duration::from_millis)
            .clamp(MIN_RELIST, DEFAULT_RELIST);
        let changed = {
            let mut cur = lock(&self.listing);
            let changed = cur.as_deref() != Some(&listing);
            if changed {
                *cur = Some(Arc::new(listing));
            }
            changed
        };
        self.update(|s| s.listed_at = Some(SystemTime::now()));
        if changed {
            self.hub.notify_one();
        }
        Ok(Instant::now() + ttl)
    }
}

/// Whether a ping's outcome shows the server alive: any answer does, an
/// error answer too, since servers of the 2026-07-28 generation may not
/// know `ping` (the Python SDK answers -32601, method not found); only a
/// broken transport does not.
fn answered<T>(outcome: &Result<T, rmcp::ServiceError>) -> bool {
    matches!(outcome, Ok(_) | Err(rmcp::ServiceError::McpError(_)))
}

/// Counts a call in flight for as long as it lives.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(n: &'a std::sync::atomic::AtomicUsize) -> Self {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Which of a server's timeouts a failed request's cause ran into, in
/// words, or nothing.
fn timeout_hint(cause: &str, options: &HttpOptions) -> String {
    if !cause.contains("timed out") {
        String::new()
    } else if cause.contains("(Connect)") {
        format!(
            ": the connection (TCP and TLS handshake) took longer than connect_timeout_seconds = {}",
            options.connect_timeout.as_secs_f64()
        )
    } else {
        format!(
            ": the server sent nothing for read_timeout_seconds = {}",
            options.read_timeout.as_secs_f64()
        )
    }
}

/// The proxy a request to `url` went through, as a clause of a failure's
/// reason, or nothing: a proxy that is down fails every request.
fn proxy_hint(url: &reqwest::Url, options: &HttpOptions) -> String {
    if crate::contract::url_host_is_loopback(url) {
        return String::new();
    }
    match &options.proxy {
        crate::manifest::ProxySetting::Url(p) => {
            format!("; through the proxy {}", remote::redact_url(p))
        }
        crate::manifest::ProxySetting::Off => String::new(),
        crate::manifest::ProxySetting::System => {
            let var = ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
                .into_iter()
                .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
            match var {
                Some(v) if url.scheme() == "https" || v.to_lowercase() == "all_proxy" => format!(
                    "; through the proxy of {v} (set `proxy = false` in the server's table to go direct)"
                ),
                _ => String::new(),
            }
        }
    }
}

/// A `url` server's `headers` as HTTP headers (their values never in the
/// error).
fn header_map(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<http::HeaderMap, String> {
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        let name = http::HeaderName::try_from(k.as_str())
            .map_err(|e| format!("header `{k}` is not a header name: {e}"))?;
        let value = http::HeaderValue::try_from(v.as_str())
            .map_err(|e| format!("the value of header `{k}` is not allowed: {e}"))?;
        map.insert(name, value);
    }
    Ok(map)
}

fn http_transport(
    client: RemoteHttp,
    url: &str,
    headers: &http::HeaderMap,
) -> rmcp::transport::StreamableHttpClientTransport<RemoteHttp> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let headers = headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(headers)
        .max_concurrent_requests(HTTP_CONCURRENCY);
    rmcp::transport::StreamableHttpClientTransport::with_client(client, config)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::answered;
    use rmcp::ServiceError;
    use rmcp::model::ErrorData;

    #[test]
    fn a_ping_answered_even_with_an_error_shows_the_server_alive() {
        let unknown: Result<(), ServiceError> =
            Err(ServiceError::McpError(ErrorData::method_not_found::<
                rmcp::model::PingRequestMethod,
            >()));
        assert!(answered(&unknown));
        assert!(answered(&Ok::<(), ServiceError>(())));
        assert!(!answered(&Err::<(), _>(ServiceError::TransportClosed)));
    }
}
