//! The stand-in as a library value: a builder that starts it on a bound
//! listener, and a cloneable, thread-safe handle that tests use to drive
//! faults, read the request log and the registry, and really stop and
//! re-bind the listener (main_server down, then up again).
//!
//! It owns the listener lifecycle only; request handling lives in
//! `router.rs`, `http.rs`, `api_routes.rs` and `control.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::builtin::{BuiltinTool, default_builtins};
use super::http::AppState;
use super::invoke::{InvokeAnswer, InvokeError, InvokeRequest, invoke};
use super::ledger::LedgerEntry;
use super::registry::RoleTools;
use super::request_log::RequestRecord;
use super::router::router;
use super::state::Shared;
use super::tool::Tool;

/// How long a stopping listener waits for in-flight requests.
const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// The roles served when none are given, as main_server's defaults.
pub fn default_roles() -> Vec<String> {
    vec!["小八".to_owned(), "Lanlan".to_owned()]
}

/// Errors of starting or re-binding the stand-in.
#[derive(Debug, thiserror::Error)]
pub enum DevServerError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read the listener's local address: {0}")]
    LocalAddr(std::io::Error),
    #[error("cannot wait for Ctrl-C: {0}")]
    Signal(std::io::Error),
}

/// Entry point: `DevServer::builder()`.
pub struct DevServer;

impl DevServer {
    pub fn builder() -> DevServerBuilder {
        DevServerBuilder {
            roles: default_roles(),
            builtins: default_builtins(),
        }
    }
}

/// Configures a stand-in before it starts.
#[derive(Debug, Clone)]
pub struct DevServerBuilder {
    roles: Vec<String>,
    builtins: Vec<BuiltinTool>,
}

impl DevServerBuilder {
    /// The roles (characters) served, in order. Default: `小八`, `Lanlan`.
    /// None at all is allowed: main_server before any character exists.
    pub fn roles<I, S>(mut self, roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// No built-in tools at all (by default `recall_memory`, as upstream),
    /// as main_server run with `NEKO_DISABLE_BUILTIN_TOOLS`.
    pub fn disable_builtin_tools(mut self) -> Self {
        self.builtins = Vec::new();
        self
    }

    /// Starts serving on `listener`. Must be called inside a Tokio runtime.
    pub fn start(self, listener: TcpListener) -> Result<DevServerHandle, DevServerError> {
        let addr = listener.local_addr().map_err(DevServerError::LocalAddr)?;
        let shared = Arc::new(Shared::new(&self.roles, self.builtins));
        let serving = spawn_serving(shared.clone(), listener);
        Ok(DevServerHandle {
            shared,
            addr,
            serving: Arc::new(tokio::sync::Mutex::new(Some(serving))),
        })
    }
}

/// One listener generation being served.
struct Serving {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

fn spawn_serving(shared: Arc<Shared>, listener: TcpListener) -> Serving {
    let stop = CancellationToken::new();
    let app = router(AppState {
        shared,
        stop: stop.clone(),
    });
    let signal = stop.clone().cancelled_owned();
    let task = tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, service)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::error!(error = %e, "dev-server listener failed");
        }
    });
    Serving { stop, task }
}

/// Controls a running stand-in. Cheap to clone; every method is safe to
/// call from any task.
#[derive(Clone)]
pub struct DevServerHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    serving: Arc<tokio::sync::Mutex<Option<Serving>>>,
}

/// Every role's tools with every field the server holds (parameters,
/// timeout, scope), which `GET /api/tools` does not show.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrySnapshot {
    pub roles: Vec<RoleTools>,
}

impl RegistrySnapshot {
    pub fn role_names(&self) -> Vec<&str> {
        self.roles.iter().map(|r| r.role.as_str()).collect()
    }

    /// The tools of `role`, in order; `None` for an unknown role.
    pub fn tools(&self, role: &str) -> Option<&[Tool]> {
        self.roles
            .iter()
            .find(|r| r.role == role)
            .map(|r| r.tools.as_slice())
    }

    /// The tool `name` as `role` holds it.
    pub fn tool(&self, role: &str, name: &str) -> Option<&Tool> {
        self.tools(role)?.iter().find(|t| t.name == name)
    }

    /// The tool names of `role`, in order (empty for an unknown role).
    pub fn names(&self, role: &str) -> Vec<&str> {
        self.tools(role)
            .unwrap_or_default()
            .iter()
            .map(|t| t.name.as_str())
            .collect()
    }
}

impl DevServerHandle {
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Forgets every registration and the ledger (built-ins come back), like
    /// a main_server restart without downtime. Roles, faults and the log stay.
    pub fn restart(&self) {
        self.shared.restart();
    }

    /// Really closes the listening socket: new connections are refused and
    /// idle keep-alive connections are closed. Held (delayed) answers end at
    /// once. No-op when already stopped.
    pub async fn stop_listener(&self) {
        let serving = self.serving.lock().await.take();
        if let Some(Serving { stop, mut task }) = serving {
            stop.cancel();
            if tokio::time::timeout(STOP_DEADLINE, &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }

    /// Binds the same address again and serves. No-op when serving.
    pub async fn start_listener(&self) -> Result<(), DevServerError> {
        let mut slot = self.serving.lock().await;
        if slot.is_none() {
            let listener =
                TcpListener::bind(self.addr)
                    .await
                    .map_err(|source| DevServerError::Bind {
                        addr: self.addr,
                        source,
                    })?;
            *slot = Some(spawn_serving(self.shared.clone(), listener));
        }
        Ok(())
    }

    /// True while the listener is open.
    pub async fn is_listening(&self) -> bool {
        self.serving.lock().await.is_some()
    }

    /// While on, every `/api/*` route answers 409 `storage_startup_blocked`.
    pub fn set_storage_blocked(&self, blocked: bool) {
        self.shared.with_faults(|f| f.storage_blocked = blocked);
    }

    /// The next `count` `/api/*` requests answer `status` and change nothing.
    pub fn fail_next(&self, count: u32, status: StatusCode) {
        self.shared
            .with_faults(|f| f.fail_next = (count > 0).then_some((count, status)));
    }

    /// Holds every `/api/*` answer for `delay` after it took effect.
    pub fn set_delay(&self, delay: Duration) {
        self.shared.with_faults(|f| f.delay = delay);
    }

    /// Makes `role`'s sync fail (registry still written, role reported in
    /// `failed_roles`), or succeed again.
    pub fn fail_role_sync(&self, role: &str, fail: bool) {
        super::control::set_role_sync(&self.shared, role, fail);
    }

    /// Adds a role as main_server builds a new session manager: the
    /// built-ins, then the ledger's global registrations and those scoped
    /// to it. False if it existed.
    pub fn add_role(&self, role: &str) -> bool {
        self.shared
            .with_world(|w| w.registry.add_role(role, &self.shared.builtins))
    }

    /// Removes a role and its tools; false if it did not exist. The ledger
    /// keeps its entries, so the role added again gets them back.
    pub fn remove_role(&self, role: &str) -> bool {
        self.shared.with_world(|w| w.registry.remove_role(role))
    }

    /// Removes every role: main_server with no character at all. Returns
    /// the roles removed, in order.
    pub fn remove_all_roles(&self) -> Vec<String> {
        super::control::remove_all_roles(&self.shared)
    }

    /// Rebuilds `role`'s session manager (as saving its API settings does
    /// upstream): its tools are reset to the built-ins and the ledger is
    /// replayed into it. False for an unknown role.
    pub fn rebuild_role(&self, role: &str) -> bool {
        self.shared
            .with_world(|w| w.registry.rebuild_role(role, &self.shared.builtins))
    }

    /// The ledger of accepted registrations, in replay order.
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        self.shared
            .read_world(|w| w.registry.ledger().entries().to_vec())
    }

    /// Every logged request outside `/__dev/`, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.read_log(|log| log.records())
    }

    pub fn clear_request_log(&self) {
        self.shared.with_log(|log| log.clear());
    }

    /// The full registry, with parameters, timeouts and scopes.
    pub fn registry_snapshot(&self) -> RegistrySnapshot {
        RegistrySnapshot {
            roles: self.shared.read_world(|w| w.registry.roles()),
        }
    }

    /// Calls a tool as the model would (same as `POST /__dev/invoke`).
    pub async fn invoke(&self, req: InvokeRequest) -> Result<InvokeAnswer, InvokeError> {
        invoke(&self.shared, req).await
    }

    /// Waits until `condition` holds, re-checking after every registry
    /// change or logged request; false if `timeout` passed first.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&DevServerHandle) -> bool,
    ) -> bool {
        let mut changes = self.shared.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.mark_unchanged();
            if condition(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                // A change that is always ready (a busy server) would never
                // let the timeout fire: the deadline is checked here too.
                Ok(Ok(())) if tokio::time::Instant::now() < deadline => {}
                Ok(Ok(())) => return condition(self),
                // The sender lives in `shared`, which we hold: it cannot
                // close, but a closed channel must not spin.
                Ok(Err(_)) | Err(_) => return condition(self),
            }
        }
    }
}
