//! MCP servers as tools: every `[[mcp_server]]` of the manifests kept
//! connected (`session`, over stdio, Streamable HTTP or the legacy
//! HTTP+SSE transport of `sse`), its tools made ours (`tools`), its answers
//! made envelopes (`answer`).
//!
//! The hub sits between the manifest reloader and the rest of the daemon:
//! it reads the manifests' desired state (tools and MCP servers), keeps one
//! session per server (a changed server is started again; a removed one
//! stopped), and publishes the desired state the callback server and the
//! engine see: the manifests' tools plus each server's offered tools. So
//! MCP tools go through the same routing, planner and engine as `[[tool]]`
//! ones: restarts, evictions, conflicts and roles behave the same. Like the
//! reloader, it publishes only when something changed, and an unchanged
//! tool keeps its `Arc`.

pub(crate) mod answer;
mod guard;
mod handshake;
mod listing;
pub(crate) mod oauth;
mod process;
mod remote_http;
mod session;
mod sse;
mod stderr;
pub(crate) mod tools;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backoff::{BackoffPolicy, Jitter};

use crate::desired::{DesiredState, DesiredTool, Fingerprint, same_spec, same_state};
use crate::manifest::Handler;
pub use oauth::SignIn;
pub(crate) use session::CallError;
use session::Session;
pub use session::{Phase, ServerStatus};
pub use tools::Rejected;

/// How long a server stopped for a restart by hand has to end before it
/// is killed (its successor starts meanwhile).
const RESTART_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The MCP servers of one sidecar: the sessions, shared by the hub task,
/// the callback server's calls and the admin endpoints. Cheap to clone.
#[derive(Clone)]
pub struct McpServers {
    inner: Arc<Inner>,
}

struct Inner {
    sessions: RwLock<BTreeMap<String, Arc<Session>>>,
    /// Told by a session whose listing changed.
    changed: Arc<Notify>,
    policy: BackoffPolicy,
    jitter: Jitter,
    /// The sessions' tasks, for `stop_all`.
    tasks: TaskTracker,
    /// The OAuth sign-ins of the `url` servers.
    oauth: Arc<oauth::OAuth>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServers").finish_non_exhaustive()
    }
}

impl McpServers {
    /// No servers yet; `policy` is the registration backoff, which restarts
    /// follow too.
    pub(crate) fn new(policy: BackoffPolicy, jitter: Jitter) -> Self {
        Self {
            inner: Arc::new(Inner {
                sessions: RwLock::new(BTreeMap::new()),
                changed: Arc::new(Notify::new()),
                policy,
                jitter,
                tasks: TaskTracker::new(),
                oauth: oauth::OAuth::new(oauth::store::Store::open()),
            }),
        }
    }

    /// The OAuth sign-ins (the admin listener's `/oauth/*` routes).
    pub(crate) fn oauth(&self) -> &Arc<oauth::OAuth> {
        &self.inner.oauth
    }

    pub(crate) fn session(&self, name: &str) -> Option<Arc<Session>> {
        self.read().get(name).cloned()
    }

    /// Every server as operators see it, by name.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.read().values().map(|s| s.status()).collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Session>>> {
        self.inner
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Starts, restarts and stops sessions so there is one per server of
    /// `desired`, each on its current spec. A restarted server keeps its
    /// last listing until it lists again, so its tools stay registered in
    /// place.
    fn reconcile(&self, desired: &DesiredState, stop_grace: std::time::Duration) {
        let mut sessions = self
            .inner
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let mut carried = BTreeMap::new();
        sessions.retain(|name, s| {
            let keep = desired
                .mcp_servers
                .get(name)
                .is_some_and(|spec| *spec == s.spec);
            if !keep {
                if let (true, Some(listing)) =
                    (desired.mcp_servers.contains_key(name), s.listing())
                {
                    carried.insert(name.clone(), listing);
                }
                tracing::info!(mcp_server = %name, "stopping the MCP server (its manifest changed or it was removed)");
                if let Some(auth) = s.auth() {
                    self.inner.oauth.forget(name, auth);
                }
                s.stop(Instant::now() + stop_grace);
            }
            keep
        });
        for (name, spec) in &desired.mcp_servers {
            if sessions.contains_key(name) {
                continue;
            }
            let previous = carried.remove(name);
            let auth = self.inner.oauth.server(spec);
            let session = Session::new(spec.clone(), previous, self.inner.changed.clone(), auth);
            tracing::info!(mcp_server = %name, transport = %spec.transport, "starting the MCP server");
            self.inner.tasks.spawn(
                session
                    .clone()
                    .run(self.inner.policy, self.inner.jitter.clone()),
            );
            sessions.insert(name.clone(), session);
        }
    }

    /// Stops the server `name` and starts it again at once on the same
    /// spec, whatever its phase (a stuck one waiting out its backoff too),
    /// for an operator's "restart" (the admin route `/ui/mcp/restart`). Its
    /// last listing is kept, so its tools stay registered meanwhile. `false`
    /// when there is no such server.
    pub(crate) fn restart(&self, name: &str) -> bool {
        let mut sessions = self
            .inner
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let Some(old) = sessions.get(name).cloned() else {
            return false;
        };
        tracing::info!(mcp_server = %name, "restarting the MCP server (asked for on the admin endpoint)");
        old.stop(Instant::now() + RESTART_STOP_GRACE);
        let session = Session::new(
            old.spec.clone(),
            old.listing(),
            self.inner.changed.clone(),
            old.auth().cloned(),
        );
        session.restarted_from(&old);
        self.inner.tasks.spawn(
            session
                .clone()
                .run(self.inner.policy, self.inner.jitter.clone()),
        );
        sessions.insert(name.to_owned(), session);
        true
    }

    /// The desired state main_server should see: the manifests' tools,
    /// then each server's offered tools in server-name order (a name is
    /// the first comer's). Unchanged tools keep `previous`'s `Arc`.
    fn compose(&self, manifest: &DesiredState, previous: &DesiredState) -> DesiredState {
        let mut tools = manifest.tools.clone();
        for session in self.read().values() {
            let Some(listing) = session.listing() else {
                let _ = session.set_offered(Vec::new(), Vec::new(), 0);
                continue;
            };
            let mut compiled = session.compiled();
            let mut offered = tools::offered_with(
                &session.spec,
                &listing,
                |name| {
                    tools.get(name).map(|t| match &t.spec.handler {
                        Handler::Mcp(m) => format!("tool `{name}` of MCP server `{}`", m.server),
                        _ => format!("tool `{name}` declared at {}", t.spec.origin),
                    })
                },
                &mut compiled,
            );
            let over = session
                .over_limit
                .load(std::sync::atomic::Ordering::Relaxed);
            if over > 0 {
                offered.rejected.push(tools::Rejected {
                    name: "…".into(),
                    reason: format!(
                        "the server lists {over} tools more than the {} the sidecar takes from one server; only the first {} listed are offered",
                        listing::MAX_TOOLS,
                        listing::MAX_TOOLS
                    ),
                });
            }
            session.set_compiled(compiled);
            let names = offered.tools.iter().map(|t| t.name.clone()).collect();
            let rejected = offered.rejected.clone();
            if session.set_offered(names, offered.rejected, offered.filtered) {
                for r in &rejected {
                    tracing::warn!(mcp_server = %session.spec.name, tool = %r.name, "not offered: {}", r.reason);
                }
            }
            for spec in offered.tools {
                let fingerprint = Fingerprint::of(&spec, &manifest.source);
                let tool = match previous.tools.get(&spec.name) {
                    Some(old) if old.fingerprint == fingerprint && same_spec(&old.spec, &spec) => {
                        old.clone()
                    }
                    _ => DesiredTool {
                        spec: Arc::new(spec),
                        fingerprint,
                    },
                };
                tools.insert(tool.spec.name.clone(), tool);
            }
        }
        DesiredState {
            source: manifest.source.clone(),
            tools,
            mcp_servers: BTreeMap::new(),
        }
    }

    /// The hub: follows `from_reload`, keeps the sessions, publishes the
    /// composed desired state on `to` when it changes, until `stop`.
    pub(crate) async fn run(
        self,
        mut from_reload: watch::Receiver<Arc<DesiredState>>,
        to: watch::Sender<Arc<DesiredState>>,
        stop_grace: std::time::Duration,
        stop: CancellationToken,
    ) {
        let mut manifest = from_reload.borrow_and_update().clone();
        self.reconcile(&manifest, stop_grace);
        loop {
            let published = to.borrow().clone();
            let next = self.compose(&manifest, &published);
            if !same_state(&published, &next) {
                let _ = to.send(Arc::new(next));
            }
            tokio::select! {
                () = stop.cancelled() => break,
                r = from_reload.changed() => {
                    if r.is_err() {
                        break;
                    }
                    manifest = from_reload.borrow_and_update().clone();
                    self.reconcile(&manifest, stop_grace);
                }
                () = self.inner.changed.notified() => {}
            }
        }
    }

    /// The first desired state, before any server listed: the manifests'
    /// tools alone.
    pub(crate) fn first(&self, manifest: &DesiredState) -> DesiredState {
        self.compose(manifest, &DesiredState::default())
    }

    /// `check --probe`: starts every server of `desired` once, waits until
    /// each has listed its tools or failed (at most `wait`), and reports
    /// what each offers and rejects, the manifests' tools taken into
    /// account; then stops them all.
    pub(crate) async fn probe(
        desired: &DesiredState,
        wait: std::time::Duration,
    ) -> Vec<ServerStatus> {
        // One try each: a failure is the answer, not a reason to wait. (A
        // policy whose initial delay is its cap is always valid.)
        let Ok(policy) = BackoffPolicy::new(wait, wait) else {
            return Vec::new();
        };
        let servers = Self::new(policy, Jitter::fixed(1.0));
        servers.reconcile(desired, std::time::Duration::from_secs(2));
        let until = Instant::now() + wait;
        loop {
            let settled = servers.read().values().all(|s| {
                let st = s.status();
                s.listing().is_some() || st.attempt > 0
            });
            if settled || Instant::now() >= until {
                break;
            }
            // A command, not the daemon: a short poll is the simple way to
            // wait on several sessions' first outcome.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        servers.compose(desired, &DesiredState::default());
        let statuses = servers.statuses();
        servers
            .stop_all(Instant::now() + std::time::Duration::from_secs(2))
            .await;
        statuses
    }

    /// Stops every server by `deadline` (stdin closed, SIGTERM, SIGKILL)
    /// and waits for their sessions to end.
    pub(crate) async fn stop_all(&self, deadline: Instant) {
        for s in self.read().values() {
            s.stop(deadline);
        }
        self.inner.tasks.close();
        let _ = tokio::time::timeout_at(
            deadline + std::time::Duration::from_millis(500),
            self.inner.tasks.wait(),
        )
        .await;
    }
}
