//! The stand-in MCP server: what the sidecar's tests and the demo run as an
//! MCP server, and what plugin authors can try the MCP handler with
//! (`neko-sidecar dev-mcp`). Its tools exercise every kind of answer (text,
//! structured, images, audio, resource links and embedded resources, tool
//! errors, JSON-RPC errors, a call that never ends) and the protocol's moving
//! parts: paged `tools/list`, `list_changed`, cancellation, both
//! lifecycles (2026-07-28 `server/discover`, or with `legacy` a server of the
//! 2025-11-25 generation that only knows `initialize`), and a slow start
//! (`first_answer_delay`).
//!
//! It is built on rmcp's server side: rmcp frames JSON-RPC and runs the
//! lifecycle on stdio (`serve_stdio`, `DevMcp::serve_io`), Streamable
//! HTTP (`serve_http`) or, over channels of ours whose events `sse-stream`
//! writes, the legacy HTTP+SSE transport (`serve_sse`, in `sse`); this
//! module never frames a message itself.
//!
//! Map: the catalogue and paging in `tools` (pure), the stateless tools in
//! `calls`, the `ServerHandler` and the shared state in `handler`, the
//! HTTP+SSE transport in `sse`, the subcommand in `run`.

mod calls;
mod handler;
mod run;
mod sse;
mod stall;
#[cfg(test)]
mod tests;
mod tools;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::service::ServerInitializeError;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use calls::RPC_ERROR_MESSAGE;
pub use handler::{DevMcp, Stats};
pub(crate) use run::run_cli;
pub use sse::{SSE_PATH, SseEndpoint};
pub use tools::{BAD_SCHEMA_TOOL, EXTRA_TOOL, LONG_TOOL_NAME, TOOLS};

/// The path Streamable HTTP is served at.
pub const HTTP_PATH: &str = "/mcp";

/// How long `serve_http` lets open connections finish after shutdown
/// before it returns anyway.
const HTTP_DRAIN: Duration = Duration::from_secs(5);

/// What the stand-in serves besides its fixed tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevMcpOptions {
    /// `tools/list` pages of at most this many tools, with `nextCursor`;
    /// `None`: one page.
    pub page_size: Option<NonZeroUsize>,
    /// Be a server of the 2025-11-25 generation: `server/discover` is
    /// method-not-found (-32601), so a client falls back to `initialize`.
    pub legacy: bool,
    /// Also list [`LONG_TOOL_NAME`] (60 characters).
    pub long_name: bool,
    /// Also list [`BAD_SCHEMA_TOOL`], whose input schema is not valid JSON Schema.
    pub bad_schema: bool,
    /// Answer nothing for this long after starting, as a server does while
    /// `npx -y` downloads it or Python imports its libraries: on stdio it
    /// reads no input before then (the client's first message waits in the
    /// pipe), over HTTP it takes no connection before then (the client's
    /// first request waits in the listen queue).
    pub first_answer_delay: Option<Duration>,
    /// Over HTTP, answer requests for any `Host`, as a server behind a TLS
    /// front or reached by a name of its own (the tests of remote servers
    /// name it `mcp.test`); by default only loopback names are answered.
    pub any_host: bool,
    /// Misbehave as a broken or hostile server does (issue 49's cases),
    /// for the tests and benchmarks of the sidecar's budgets.
    pub fault: Option<Fault>,
}

/// A hostile server's behaviour (`dev-mcp --fault NAME`). Each is bounded
/// in count, so a test or benchmark that uses it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// After each `tools/list`, send [`FLOOD_PINGS`] `ping` requests at
    /// once; over HTTP (HTTP+SSE and Streamable HTTP), also never answer a
    /// POST that carries a reply (held until shutdown), as a server that
    /// sends its own requests and stalls the replies.
    PingFlood,
    /// [`Fault::PingFlood`], but over Streamable HTTP a POST that carries a
    /// reply is answered by an event stream that never ends (nothing sent
    /// after its headers until shutdown); over HTTP+SSE as `PingFlood`.
    PingFloodStream,
    /// Answer every `tools/list` page with one tool and a `nextCursor`,
    /// for ever.
    EndlessPages,
    /// List tools whose names change at every listing, and after each
    /// listing send [`CHURN_NOTICES`] `list_changed` notifications at once.
    RenameChurn,
}

/// How many `list_changed` [`Fault::RenameChurn`] sends after each listing.
pub const CHURN_NOTICES: usize = 500;

/// How many `ping` requests [`Fault::PingFlood`] sends after each listing.
pub const FLOOD_PINGS: usize = 1000;

/// Why serving ended other than by shutdown or the client leaving.
#[derive(Debug, thiserror::Error)]
pub enum DevMcpError {
    #[error("the MCP connection did not start: {0}")]
    Start(Box<ServerInitializeError>),
    #[error("the MCP connection failed: {0}")]
    Session(tokio::task::JoinError),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read the listener's local address: {0}")]
    LocalAddr(std::io::Error),
    #[error("cannot serve HTTP: {0}")]
    Http(std::io::Error),
    #[error("cannot write the URL to stdout: {0}")]
    Stdout(std::io::Error),
    #[error("cannot install the signal handlers: {0}")]
    Signal(std::io::Error),
}

/// Serves one client on this process's stdin and stdout until it closes
/// stdin or `shutdown` is cancelled.
pub async fn serve_stdio(
    opts: DevMcpOptions,
    shutdown: CancellationToken,
) -> Result<(), DevMcpError> {
    DevMcp::new(opts)
        .serve_io(stdin(), tokio::io::stdout(), shutdown)
        .await
}

/// Serves Streamable HTTP at [`HTTP_PATH`] on `listener` until `shutdown`
/// is cancelled; the listener is closed when this returns, so the same
/// port can be bound again.
pub async fn serve_http(
    listener: TcpListener,
    opts: DevMcpOptions,
    shutdown: CancellationToken,
) -> Result<(), DevMcpError> {
    DevMcp::new(opts).serve_http(listener, shutdown).await
}

/// Serves the legacy HTTP+SSE transport at [`SSE_PATH`] on `listener`
/// until `shutdown` is cancelled; the listener is closed when this returns.
/// (Tests use [`DevMcp::serve_sse`], which keeps the server's handle.)
pub(crate) async fn serve_sse(
    listener: TcpListener,
    opts: DevMcpOptions,
    shutdown: CancellationToken,
) -> Result<(), DevMcpError> {
    DevMcp::new(opts)
        .serve_sse(listener, SseEndpoint::Relative, shutdown)
        .await
}

impl DevMcp {
    /// Serves one client over a byte stream pair (a `tokio::io::duplex`
    /// half, a child's pipes) until it closes or `shutdown` is cancelled.
    pub async fn serve_io<R, W>(
        self,
        read: R,
        write: W,
        shutdown: CancellationToken,
    ) -> Result<(), DevMcpError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        if !self.start_slowly(&shutdown).await {
            return Ok(());
        }
        // The session's own token: cancelling it must not cancel the caller's.
        let session = shutdown.child_token();
        let input_closed = CancellationToken::new();
        let read = CancelAtEof {
            inner: read,
            eof: input_closed.clone(),
        };
        let running = match self.serve_with_ct((read, write), session.clone()).await {
            Ok(running) => running,
            Err(ServerInitializeError::Cancelled) => return Ok(()),
            Err(e) => return Err(DevMcpError::Start(Box::new(e))),
        };
        // After the end of its input rmcp lets running handlers finish, for
        // up to 5 s, before it cancels them; an open `subscriptions/listen`
        // only ends when cancelled, so it would hold the server that long.
        // The client is gone: cancel them at once.
        let mut waiting = std::pin::pin!(running.waiting());
        let ended = tokio::select! {
            ended = &mut waiting => ended,
            () = input_closed.cancelled() => {
                session.cancel();
                waiting.await
            }
        };
        ended.map(drop).map_err(DevMcpError::Session)
    }

    /// [`serve_http`] with this server, so a test can keep its counters.
    pub async fn serve_http(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), DevMcpError> {
        let local = listener.local_addr().map_err(DevMcpError::LocalAddr)?;
        if !self.start_slowly(&shutdown).await {
            return Ok(());
        }
        let config = StreamableHttpServerConfig::default()
            // Cancelling it ends every session and open stream, so that
            // axum's graceful shutdown has no connection left to wait for.
            .with_cancellation_token(shutdown.child_token());
        let any_host = self.options().any_host;
        let config = match allowed_host(local.ip()).filter(|_| !any_host) {
            Some(ip) => config.with_allowed_hosts([
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
                "::1".to_owned(),
                ip,
            ]),
            // Bound to every interface: clients come by any of its names.
            None => config.disable_allowed_hosts(),
        };
        let fault = self.options().fault;
        let server = self;
        let service: StreamableHttpService<DevMcp, LocalSessionManager> =
            StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config);
        let router = axum::Router::new().route_service(HTTP_PATH, service);
        let router = match fault {
            Some(f @ (Fault::PingFlood | Fault::PingFloodStream)) => {
                let stop = shutdown.clone();
                router.layer(axum::middleware::from_fn(move |request, next| {
                    stall::stall_replies(f, stop.clone(), request, next)
                }))
            }
            _ => router,
        };
        let serve = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned());
        tokio::select! {
            served = serve => served.map_err(DevMcpError::Http),
            () = async {
                shutdown.cancelled().await;
                tokio::time::sleep(HTTP_DRAIN).await;
            } => Ok(()),
        }
    }
}

impl DevMcp {
    /// Waits out `first_answer_delay`, if any; false when `shutdown` came
    /// first.
    async fn start_slowly(&self, shutdown: &CancellationToken) -> bool {
        let Some(delay) = self.options().first_answer_delay else {
            return true;
        };
        tokio::select! {
            () = shutdown.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }
}

/// A reader that cancels `eof` when its input ends (a read of no bytes
/// into room for some), so that the end of a stdio client is seen at once.
struct CancelAtEof<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for CancelAtEof<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let room = buf.remaining();
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(())))
            && room > 0
            && buf.filled().len() == before
        {
            self.eof.cancel();
        }
        polled
    }
}

/// The bound address as an allowed `Host`, or `None` for every interface.
/// rmcp refuses other hosts (DNS rebinding); the loopback names are always
/// allowed.
fn allowed_host(ip: IpAddr) -> Option<String> {
    if ip.is_unspecified() {
        None
    } else {
        Some(ip.to_string())
    }
}

/// This process's stdin, readable without a blocked thread where the
/// platform allows (`os::stdin` says how).
fn stdin() -> Box<dyn AsyncRead + Send + Unpin> {
    crate::os::stdin()
}
