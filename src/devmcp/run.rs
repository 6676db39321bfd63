//! `neko-sidecar dev-mcp`: the stand-in MCP server as a process, on stdio
//! (what the sidecar spawns), on Streamable HTTP (`--http ADDR`) or on the
//! legacy HTTP+SSE transport (`--sse ADDR`), until a stop request (SIGTERM
//! or SIGINT; Ctrl+C on Windows).
//!
//! It says when it is ready: `dev-mcp: ready (pid N)` on stderr (with
//! `--first-answer-delay-ms`, when its first answer will come), which the
//! sidecar forwards to its log, and with `--http` or `--sse` the URL alone
//! on stdout, so that a test can bind port 0 and read where it landed.
//! Stdout carries nothing else: on stdio it is the protocol.

use std::io::Write as _;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{DevMcpError, DevMcpOptions, HTTP_PATH, SSE_PATH, serve_http, serve_sse, serve_stdio};
use crate::cli::DevMcpArgs;

pub(crate) async fn run_cli(args: DevMcpArgs) -> Result<(), DevMcpError> {
    let opts = DevMcpOptions {
        page_size: args.page_size,
        legacy: args.legacy,
        long_name: args.long_name,
        bad_schema: args.bad_schema,
        first_answer_delay: args
            .first_answer_delay_ms
            .map(std::time::Duration::from_millis),
        any_host: false,
        fault: args.fault,
    };
    let shutdown = CancellationToken::new();
    let signals = cancel_on_signals(shutdown.clone())?;
    let served = match (args.http, args.sse) {
        (None, None) => {
            ready(&opts);
            serve_stdio(opts, shutdown).await
        }
        (Some(addr), _) => {
            let listener = bind(addr, HTTP_PATH).await?;
            ready(&opts);
            serve_http(listener, opts, shutdown).await
        }
        (None, Some(addr)) => {
            let listener = bind(addr, SSE_PATH).await?;
            ready(&opts);
            serve_sse(listener, opts, shutdown).await
        }
    };
    signals.abort();
    served
}

/// Binds `addr` and prints the URL of `path` there on stdout.
async fn bind(addr: std::net::SocketAddr, path: &str) -> Result<TcpListener, DevMcpError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| DevMcpError::Bind { addr, source })?;
    let local = listener.local_addr().map_err(DevMcpError::LocalAddr)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "http://{local}{path}")
        .and_then(|()| out.flush())
        .map_err(DevMcpError::Stdout)?;
    Ok(listener)
}

fn ready(opts: &DevMcpOptions) {
    match opts.first_answer_delay {
        Some(d) => eprintln!(
            "dev-mcp: ready (pid {}); first answer in {} ms",
            std::process::id(),
            d.as_millis()
        ),
        None => eprintln!("dev-mcp: ready (pid {})", std::process::id()),
    }
}

/// A stop request (SIGTERM, SIGINT; Ctrl+C and the like on Windows)
/// cancels `shutdown`; a reload request means nothing here.
fn cancel_on_signals(
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, DevMcpError> {
    let mut events = crate::os::Events::install().map_err(DevMcpError::Signal)?;
    Ok(tokio::spawn(async move {
        while let crate::os::Event::Reload(_) = events.next().await {}
        shutdown.cancel();
    }))
}
