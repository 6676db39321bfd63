//! The stand-in's MCP server: [`DevMcp`], rmcp's `ServerHandler` written by
//! hand (no macros), with the state every connection shares: the counters,
//! whether `toggle` has added `extra`, and who is told when the tool list
//! changes.
//!
//! rmcp frames and dispatches everything; this file only decides what the
//! server answers. It never picks a transport (`mod.rs` and `run` do), and
//! what the stateless tools answer is `calls`'.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverRequestMethod,
    DiscoverResult, Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, SubscriptionFilter,
    Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::DevMcpOptions;
use super::calls;
use super::tools::{self, BAD_SCHEMA_TOOL, Catalogue, EXTRA_TOOL, LONG_TOOL_NAME};

/// The name the stand-in gives in `serverInfo`.
const SERVER_NAME: &str = "neko-sidecar-dev-mcp";

/// How long `toggle` waits for one other listener to take its
/// notification: a client that stopped reading must not hold the call.
const NOTIFY_DEADLINE: Duration = Duration::from_secs(1);

/// The counters since the server started, as `stats` reports them (without
/// `hanging`, which is for in-process tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// `tools/call` requests, whatever the tool (the `stats` call counts itself).
    pub calls: u64,
    /// `hang` calls that ended because their request was cancelled (by
    /// `notifications/cancelled`, or by the connection going away).
    pub cancelled: u64,
    /// `tools/list` requests; every page is one.
    pub list_calls: u64,
    /// `hang` calls running now: a test waits for 1 before it cancels.
    pub hanging: u64,
}

/// The stand-in MCP server. Cheap to clone: every clone (one per
/// Streamable HTTP session) shares the same tools and counters.
#[derive(Clone)]
pub struct DevMcp {
    shared: Arc<Shared>,
}

struct Shared {
    opts: DevMcpOptions,
    /// Whether `toggle` has added `extra`; it starts absent.
    extra: Mutex<bool>,
    /// The counters; a watch so that a test can wait for a value instead
    /// of sleeping.
    stats: watch::Sender<Stats>,
    listeners: Mutex<Listeners>,
    /// Bumped by `cut_streams`: every HTTP+SSE event stream open then ends.
    streams_cut: watch::Sender<u64>,
}

/// Who hears `notifications/tools/list_changed` besides the caller of
/// `toggle`. The two protocol generations differ: a 2025-11-25 session
/// (begun with `initialize`) takes notifications at any time, while on
/// 2026-07-28 a client asks for them with `subscriptions/listen`.
#[derive(Default)]
struct Listeners {
    /// Sessions begun with `initialize`; a closed one is dropped when seen.
    sessions: Vec<Peer<RoleServer>>,
    /// Open `subscriptions/listen` streams that accepted tool list changes,
    /// by a key of ours (request ids repeat across connections).
    subscriptions: Vec<(u64, SubscriptionSink)>,
    next_key: u64,
}

impl DevMcp {
    pub fn new(opts: DevMcpOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                opts,
                extra: Mutex::new(false),
                stats: watch::Sender::new(Stats::default()),
                listeners: Mutex::new(Listeners::default()),
                streams_cut: watch::Sender::new(0),
            }),
        }
    }

    pub(super) fn options(&self) -> &DevMcpOptions {
        &self.shared.opts
    }

    /// The counters, updated as they change (`wait_for` them with a timeout).
    pub fn stats(&self) -> watch::Receiver<Stats> {
        self.shared.stats.subscribe()
    }

    /// Ends every HTTP+SSE event stream open now, the server staying up,
    /// as a connection dropped on the way does (`serve_sse`; for tests).
    pub fn cut_streams(&self) {
        self.shared.streams_cut.send_modify(|n| *n += 1);
    }

    /// Told when `cut_streams` is called.
    pub(super) fn streams_cut(&self) -> watch::Receiver<u64> {
        self.shared.streams_cut.subscribe()
    }

    fn count(&self, change: impl FnOnce(&mut Stats)) {
        self.shared.stats.send_modify(change);
    }

    fn catalogue(&self) -> Catalogue {
        Catalogue {
            long_name: self.shared.opts.long_name,
            bad_schema: self.shared.opts.bad_schema,
            extra: *lock(&self.shared.extra),
        }
    }

    /// With `legacy`, a request of the 2026-07-28 lifecycle (its version in
    /// `_meta`, no `initialize`) gets what a 2025-11-25 server would give
    /// it: no service. rmcp accepts such a request before any handler runs,
    /// so the refusal is here.
    fn refuse_modern_when_legacy(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let modern = context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        if self.shared.opts.legacy && modern {
            return Err(ErrorData::invalid_request(
                "this server speaks MCP 2025-11-25 and earlier: begin with initialize",
                None,
            ));
        }
        Ok(())
    }

    async fn hang(&self, ct: CancellationToken) -> Result<CallToolResponse, ErrorData> {
        let _running = Hanging::start(self);
        ct.cancelled().await;
        self.count(|s| s.cancelled += 1);
        // rmcp drops the answer to a cancelled request, so this is never
        // sent; a tool result rather than an error keeps rmcp from logging
        // a warning for it.
        Ok(CallToolResult::error(vec![ContentBlock::text("hang was cancelled")]).into())
    }

    fn stats_result(&self) -> CallToolResult {
        let s = *self.shared.stats.borrow();
        CallToolResult::structured(json!({
            "calls": s.calls,
            "cancelled": s.cancelled,
            "list_calls": s.list_calls,
        }))
    }

    async fn toggle(&self, context: &RequestContext<RoleServer>) -> CallToolResult {
        let added = {
            let mut extra = lock(&self.shared.extra);
            *extra = !*extra;
            *extra
        };
        self.announce_tool_list_changed(context).await;
        let text = if added {
            "extra added"
        } else {
            "extra removed"
        };
        CallToolResult::success(vec![ContentBlock::text(text)])
    }

    /// Sends `notifications/tools/list_changed` to the caller, to every other
    /// `initialize` session, and on every `subscriptions/listen` stream that
    /// asked for it. The caller's goes first and is awaited, so on its
    /// connection the notification precedes `toggle`'s answer.
    async fn announce_tool_list_changed(&self, caller: &RequestContext<RoleServer>) {
        let caller_is_session = caller
            .protocol_version()
            .is_some_and(|v| v.has_initialize());
        if !caller_is_session {
            // A 2026-07-28 caller has no session to find it by; rmcp hands
            // an unscoped notification to `ClientHandler::on_tool_list_changed`.
            if let Err(e) = caller.peer.notify_tool_list_changed().await {
                tracing::debug!("dev-mcp: the caller did not take list_changed: {e}");
            }
        }
        let (sessions, subscriptions) = {
            let mut listeners = lock(&self.shared.listeners);
            listeners.sessions.retain(|p| !p.is_transport_closed());
            (listeners.sessions.clone(), listeners.subscriptions.clone())
        };
        for peer in sessions {
            let sent = tokio::time::timeout(NOTIFY_DEADLINE, peer.notify_tool_list_changed()).await;
            if !matches!(sent, Ok(Ok(()))) {
                tracing::debug!("dev-mcp: a session did not take list_changed");
            }
        }
        for (key, sink) in subscriptions {
            let sent = tokio::time::timeout(NOTIFY_DEADLINE, sink.notify_tool_list_changed()).await;
            if !matches!(sent, Ok(Ok(()))) {
                remove_subscription(&self.shared, key);
            }
        }
    }
}

/// Sends [`super::FLOOD_PINGS`] pings to `peer` at once, each waiting at
/// most a few seconds for its answer (`Fault::PingFlood`). They are sent
/// from the handler of the request that asked (`tools/list`), before its
/// answer: rmcp marks them as that request's, so over Streamable HTTP they
/// ride its response stream, which the client reads for sure (a standalone
/// GET stream it may never open); on stdio and HTTP+SSE the mark changes
/// nothing.
async fn flood_with_pings(peer: &Peer<RoleServer>) {
    for _ in 0..super::FLOOD_PINGS {
        let mut options = rmcp::service::PeerRequestOptions::no_options();
        options.timeout = Some(Duration::from_secs(5));
        let ping = peer
            .send_request_with_option(
                rmcp::model::ServerRequest::PingRequest(rmcp::model::PingRequest::default()),
                options,
            )
            .await;
        let Ok(ping) = ping else { break };
        tokio::spawn(async move {
            let _ = ping.await_response().await;
        });
    }
}

impl ServerHandler for DevMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let info = ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The neko-sidecar stand-in MCP server: tools that exercise every kind of answer, for tests and demos.",
            );
        if self.shared.opts.legacy {
            info.with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        } else {
            info
        }
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // What rmcp's default does, plus remembering the session so that a
        // `toggle` on another connection reaches it.
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        let mut listeners = lock(&self.shared.listeners);
        listeners.sessions.retain(|p| !p.is_transport_closed());
        listeners.sessions.push(context.peer);
        Ok(result)
    }

    // The protocol versions stay rmcp's default (every known one) even with
    // `legacy`: rmcp checks a discover request's version against them before
    // `discover` runs, and a narrowed list would answer "unsupported
    // version" there, which a client takes for a modern server it cannot
    // talk to, not for a legacy one.
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        if self.shared.opts.legacy {
            // What a 2025-11-25 server answers to a method it does not know.
            return Err(ErrorData::method_not_found::<DiscoverRequestMethod>());
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.refuse_modern_when_legacy(&context)?;
        self.count(|s| s.list_calls += 1);
        if matches!(
            self.shared.opts.fault,
            Some(super::Fault::PingFlood | super::Fault::PingFloodStream)
        ) {
            flood_with_pings(&context.peer).await;
        }
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        match self.shared.opts.fault {
            Some(super::Fault::EndlessPages) => {
                let n: u64 = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
                let mut result = ListToolsResult::with_all_items(vec![tools::numbered(n)]);
                result.next_cursor = Some((n + 1).to_string());
                return Ok(result);
            }
            Some(super::Fault::RenameChurn) => {
                let listing = self.shared.stats.borrow().list_calls;
                let peer = context.peer.clone();
                tokio::spawn(async move {
                    for _ in 0..super::CHURN_NOTICES {
                        if peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                    }
                });
                let names = (0..5).map(|i| tools::numbered(listing * 5 + i)).collect();
                return Ok(ListToolsResult::with_all_items(names));
            }
            _ => {}
        }
        let (page, next) =
            tools::page(self.catalogue().tools(), cursor, self.shared.opts.page_size)?;
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.catalogue()
            .tools()
            .into_iter()
            .find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.refuse_modern_when_legacy(&context)?;
        self.count(|s| s.calls += 1);
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => calls::echo(&args),
            "add" => calls::add(&args),
            "image" => calls::image(&args),
            "images" => calls::images(&args),
            "mixed" => calls::mixed(),
            "fail" => calls::fail(&args),
            "rpc_error" => return Err(calls::rpc_error()),
            "hang" => return self.hang(context.ct.clone()).await,
            "stats" => self.stats_result(),
            "pid" => CallToolResult::structured(json!({ "pid": std::process::id() })),
            "toggle" => self.toggle(&context).await,
            EXTRA_TOOL if self.catalogue().extra => calls::echo(&args),
            name @ (LONG_TOOL_NAME | BAD_SCHEMA_TOOL) if self.get_tool(name).is_some() => {
                calls::listed_only(name)
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Tool list changes are all there is to hear; rmcp narrows this to
        // what the client asked for.
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        if context.accepted().tools_list_changed != Some(true) {
            context.cancelled().await;
            return Ok(());
        }
        let key = {
            let mut listeners = lock(&self.shared.listeners);
            let key = listeners.next_key;
            listeners.next_key += 1;
            listeners.subscriptions.push((key, context.sink().clone()));
            key
        };
        let _registered = Subscribed {
            shared: &self.shared,
            key,
        };
        context.cancelled().await;
        Ok(())
    }

    // Kept as rmcp's default, spelled out because `discover` depends on it.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }
}

/// A `hang` call in progress, counted in `hanging` until it ends however it ends.
struct Hanging<'a>(&'a DevMcp);

impl<'a> Hanging<'a> {
    fn start(server: &'a DevMcp) -> Self {
        server.count(|s| s.hanging += 1);
        Self(server)
    }
}

impl Drop for Hanging<'_> {
    fn drop(&mut self) {
        self.0.count(|s| s.hanging = s.hanging.saturating_sub(1));
    }
}

/// A listen stream's registration, removed when the stream ends (or its
/// future is dropped with the connection).
struct Subscribed<'a> {
    shared: &'a Shared,
    key: u64,
}

impl Drop for Subscribed<'_> {
    fn drop(&mut self) {
        remove_subscription(self.shared, self.key);
    }
}

fn remove_subscription(shared: &Shared, key: u64) {
    lock(&shared.listeners)
        .subscriptions
        .retain(|(k, _)| *k != key);
}

/// A poisoned lock still holds consistent data here (every critical section
/// is a plain assignment or push), so it is used as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
