//! The admin HTTP server: `/healthz`, `/readyz`, `/status`, `/metrics` and
//! the inspector page.
//!
//! Connections are held as the callback listener holds them (`callback::
//! transport`): at most [`MAX_CONNECTIONS`] (and a sixteenth of the
//! open-files limit), a head within `[callback] read_timeout`, an idle
//! connection closed after `[callback] idle_timeout`, a body (only
//! `POST /ui/call` has one) read whole, within the read timeout and
//! [`MAX_BODY_BYTES`], before its request claims a slot; a connection from
//! a peer that is not loopback, or whose requests fail the checks below,
//! never claims one and is the first closed at the bound. So idle
//! connections of another local process can neither lock the operator
//! out nor take the daemon's descriptors.
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
//! | `GET /i18n/{locale}` | the page's catalogue in that locale (`i18n.rs`), JSON |
//! | `POST /ui/calls` | the call history (`history.rs`), JSON; own Origin and the page's token only |
//! | `POST /ui/mcp/restart` | `{"server": NAME}`: that MCP server stopped and started again at once; own Origin and the page's token only |
//! | `GET /healthz` | 200 `ok` while the process serves |
//! | `GET /readyz` | 200 `{"ready":true,"reasons":[]}`, or 503 with the reasons |
//! | `GET /status` | 200, the JSON of `view.rs` |
//! | `GET /metrics` | 200, Prometheus text format 0.0.4 |
//! | `GET /identity?challenge=HEX` | 200 `{"proof": HEX}`, for `call` (`identity.rs`) |
//! | `GET /oauth/login/{name}`, `GET /oauth/callback`, `POST /oauth/logout/{name}` | an MCP server's sign-in (`oauth_routes.rs`) |
//! | anything else | 404 |

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::service::TowerToHyperService;
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
use crate::callback::listener::admin_connection_bound;
use crate::callback::transport::{Conn, ConnectionLimits, Serve, Transport, accept_loop};
use crate::daemon::Daemon;
use crate::devserver::gates::is_loopback_host;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot read the admin listener's address: {0}")]
    LocalAddr(#[source] std::io::Error),
}

/// The most connections the admin endpoints hold: an operator's browser
/// tabs, `status`, a probe and a scraper need a handful.
pub const MAX_CONNECTIONS: usize = 64;
/// The largest request body (`POST /ui/call`: a tool's arguments).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// For a request head from its first byte (and a first request from the
/// accept), and a body from its head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection without a request for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The admin endpoints as the connection machinery serves them.
struct Admin {
    router: TowerToHyperService<Router>,
    transport: Transport,
}

impl Serve for Admin {
    type Body = Body;
    type BodyError = axum::Error;

    fn transport(&self) -> &Transport {
        &self.transport
    }

    async fn serve(
        self: Arc<Self>,
        conn: Arc<Conn>,
        peer: SocketAddr,
        req: Request<Incoming>,
    ) -> Response {
        {
            let (mut parts, body) = req.into_parts();
            let has_body = parts.headers.contains_key(header::TRANSFER_ENCODING)
                || parts
                    .headers
                    .get(header::CONTENT_LENGTH)
                    .is_some_and(|v| v != "0");
            let host = parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok());
            let trusted = peer_allowed(peer) && is_loopback_host(host);
            let body = if !has_body {
                Body::empty()
            } else if !trusted {
                // Refused by `guard` below without reading it.
                conn.leave_body_unread();
                Body::empty()
            } else {
                let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
                match tokio::time::timeout(READ_TIMEOUT, limited.collect()).await {
                    Ok(Ok(b)) => Body::from(b.to_bytes()),
                    Ok(Err(e)) => {
                        conn.leave_body_unread();
                        let too_large = e.is::<http_body_util::LengthLimitError>();
                        let (code, text) = if too_large {
                            (
                                StatusCode::PAYLOAD_TOO_LARGE,
                                format!(
                                    "the request body is larger than the admin endpoints accept ({MAX_BODY_BYTES} bytes)\n"
                                ),
                            )
                        } else {
                            (
                                StatusCode::BAD_REQUEST,
                                format!("the request body could not be read: {e}\n"),
                            )
                        };
                        return closing((code, text).into_response());
                    }
                    Err(_) => {
                        conn.leave_body_unread();
                        return closing(
                            (
                                StatusCode::REQUEST_TIMEOUT,
                                "the request body did not arrive in time\n",
                            )
                                .into_response(),
                        );
                    }
                }
            };
            // Only a request that passes the peer and host checks holds its
            // connection's slot.
            let _slot = trusted.then(|| conn.claim(&self.transport));
            parts.extensions.insert(ConnectInfo(peer));
            let req = Request::from_parts(parts, body);
            match hyper::service::Service::call(&self.router, req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        }
    }
}

/// An answer after which the connection closes (its body was not read).
fn closing(mut r: Response) -> Response {
    r.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    r
}

/// Serves the admin endpoints on `listener` (bound by the caller, on
/// loopback) until `shutdown` is cancelled; running answers finish first.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> Result<(), AdminError> {
    let addr = listener.local_addr().map_err(AdminError::LocalAddr)?;
    let max_connections = admin_connection_bound();
    // Sign-ins come back here (RFC 8252's loopback redirect).
    state.mcp.oauth().set_admin(addr);
    let admin = Arc::new(Admin {
        router: TowerToHyperService::new(router(Arc::new(state))),
        transport: Transport::new(
            "admin",
            "the admin endpoints' connection bound",
            ConnectionLimits {
                read_timeout: READ_TIMEOUT,
                idle_timeout: IDLE_TIMEOUT,
                max_connections,
            },
            shutdown,
        ),
    });
    tracing::info!(
        %addr,
        max_connections,
        page = %format!("http://{addr}/"),
        "admin endpoints listening (/healthz, /readyz, /status, /metrics); the inspector page: open http://{addr}/ in a browser"
    );
    let tasks = admin.transport.tasks.clone();
    tasks.spawn(accept_loop(admin.clone(), listener));
    // Until `shutdown`: the accept loop returns, connections close after
    // their running answer.
    tasks.close();
    tasks.wait().await;
    Ok(())
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
    let state = AdminState::from_daemon(daemon);
    let token_file = daemon.config.admin.token_file.clone();
    if let Some(path) = &token_file {
        super::identity::write_token_file(path, state.identity_token.as_deref());
    }
    let shutdown = shutdown.clone();
    daemon.spawn(async move {
        serve_logged(listener, state, shutdown).await;
        if let Some(path) = token_file {
            super::identity::remove_token_file(&path);
        }
    });
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
        .route("/identity", get(super::identity::answer))
        .route("/", get(inspector::page))
        .route("/inspector.js", get(inspector::script))
        .route("/inspector.css", get(inspector::style))
        // Browsers ask for it on every page; an empty answer keeps their
        // consoles free of a 404.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/ui/status", get(inspector::status_part))
        .route("/ui/tools", get(inspector::tools))
        .route("/ui/call", post(inspector::call))
        .route("/ui/calls", post(inspector::calls))
        .route("/i18n/{locale}", get(inspector::catalogue))
        .route("/ui/mcp/restart", post(inspector::restart_mcp))
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
