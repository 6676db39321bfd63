//! The admin HTTP server: `/healthz`, `/readyz`, `/status`, `/metrics` and
//! the inspector page.
//!
//! Only loopback peers are served (403 otherwise), and only requests whose
//! `Host` is a loopback address or `localhost` (400 otherwise): `/status`
//! and the page show callback URLs, whose token is what keeps a web page
//! the user visits from calling tools, so a DNS-rebinding page must not
//! read them. Every answer carries a Content-Security-Policy without inline
//! script. Handlers take one [`Sample`](super::Sample) and render it; the
//! server never changes the daemon's state, but for an MCP server's
//! sign-in, which its `/oauth/*` routes hand to `mcp::oauth`.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the inspector page (`page.rs`, `inspector.rs`) |
//! | `GET /inspector.js`, `/inspector.css` | its script and style, embedded |
//! | `GET /ui/status` | the page's status part, HTML |
//! | `GET /ui/tools` | every tool's description and schema, JSON |
//! | `POST /ui/call` | calls a tool as main_server would; own Origin and the page's token only |
//! | `GET /healthz` | 200 `ok` while the process serves |
//! | `GET /readyz` | 200 `{"ready":true,"reasons":[]}`, or 503 with the reasons |
//! | `GET /status` | 200, the JSON of `view.rs` |
//! | `GET /metrics` | 200, Prometheus text format 0.0.4 |
//! | `GET /oauth/login/{name}`, `GET /oauth/callback`, `POST /oauth/logout/{name}` | an MCP server's sign-in (`oauth_routes.rs`) |
//! | anything else | 404 |

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::inspector;
use super::metrics;
use super::prom::CONTENT_TYPE;
use super::readiness::judge;
use super::sample::AdminState;
use super::view;
use crate::callback::limits::peer_allowed;
use crate::daemon::Daemon;
use crate::devserver::gates::is_loopback_host;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot read the admin listener's address: {0}")]
    LocalAddr(#[source] std::io::Error),
    #[error("the admin server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Serves the admin endpoints on `listener` (bound by the caller, on
/// loopback) until `shutdown` is cancelled; in-flight answers finish first.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> Result<(), AdminError> {
    let addr = listener.local_addr().map_err(AdminError::LocalAddr)?;
    // Sign-ins come back here (RFC 8252's loopback redirect).
    state.mcp.oauth().set_admin(addr);
    let app = router(Arc::new(state));
    tracing::info!(
        %addr,
        page = %format!("http://{addr}/"),
        "admin endpoints listening (/healthz, /readyz, /status, /metrics); the inspector page: open http://{addr}/ in a browser"
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.cancelled_owned())
    .await
    .map_err(AdminError::Serve)
}

/// Starts the admin endpoints of a running daemon on its `[admin] listen`
/// address, until `shutdown` (the daemon's own token), as one of the
/// daemon's tasks, so its shutdown waits for them within its deadline.
/// Returns the bound address, or `None` when
/// they are turned off or the address cannot be bound: that is logged as an
/// error, but the daemon keeps registering tools and serving calls, since
/// the operator surface must never take the tools down with it.
pub async fn start_for(daemon: &Daemon, shutdown: &CancellationToken) -> Option<SocketAddr> {
    let addr = daemon.config.admin.listen?;
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(
                %addr,
                "the admin endpoints are off: cannot listen on {addr} ({e}); `neko-sidecar status` and readiness probes will fail. Another sidecar on this machine may use the port: give each its own [admin] listen"
            );
            return None;
        }
    };
    let bound = listener.local_addr().ok();
    daemon.spawn(serve_logged(
        listener,
        AdminState::from_daemon(daemon),
        shutdown.clone(),
    ));
    bound
}

/// Serves on `listener` in a task of its own until `shutdown` (an error is
/// logged there). For tests that bind port 0; the daemon's endpoints are
/// started by [`start_for`], in the daemon's own tasks.
pub fn spawn(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(serve_logged(listener, state, shutdown))
}

/// [`serve`], with its error logged.
async fn serve_logged(listener: TcpListener, state: AdminState, shutdown: CancellationToken) {
    if let Err(e) = serve(listener, state, shutdown).await {
        tracing::error!("{e}");
    }
}

fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/", get(inspector::page))
        .route("/inspector.js", get(inspector::script))
        .route("/inspector.css", get(inspector::style))
        // Browsers ask for it on every page; an empty answer keeps their
        // consoles free of a 404.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/ui/status", get(inspector::status_part))
        .route("/ui/tools", get(inspector::tools))
        .route("/ui/call", post(inspector::call))
        .route("/oauth/login/{name}", get(super::oauth_routes::login))
        .route("/oauth/callback", get(super::oauth_routes::callback))
        .route("/oauth/logout/{name}", post(super::oauth_routes::logout))
        .fallback(not_found)
        .layer(middleware::from_fn(inspector::security_headers))
        .layer(middleware::from_fn(guard))
        .with_state(state)
}

/// The loopback-peer and trusted-host rules, before any route.
async fn guard(ConnectInfo(peer): ConnectInfo<SocketAddr>, req: Request, next: Next) -> Response {
    if !peer_allowed(peer) {
        tracing::warn!(%peer, "refused an admin request from a non-loopback peer");
        return (
            StatusCode::FORBIDDEN,
            "the admin endpoints serve loopback peers only\n",
        )
            .into_response();
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if !is_loopback_host(host) {
        return (
            StatusCode::BAD_REQUEST,
            "untrusted Host header: use a loopback address (127.0.0.1, [::1]) or localhost\n",
        )
            .into_response();
    }
    next.run(req).await
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Arc<AdminState>>) -> Response {
    let verdict = judge(&state.sample());
    let code = if verdict.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(verdict)).into_response()
}

async fn status(State(state): State<Arc<AdminState>>) -> Response {
    axum::Json(view::build(&state.sample())).into_response()
}

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        metrics::render(&state.sample()),
    )
        .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found: the admin endpoints are / (the inspector page), /healthz, /readyz, /status and /metrics\n",
    )
        .into_response()
}
