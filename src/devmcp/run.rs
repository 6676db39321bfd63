//! `neko-sidecar dev-mcp`: the stand-in MCP server as a process, on stdio
//! (what the sidecar spawns) or on Streamable HTTP (`--http ADDR`), until
//! a stop request (SIGTERM or SIGINT; Ctrl+C on Windows).
//!
//! It says when it is ready: `dev-mcp: ready (pid N)` on stderr, which the
//! sidecar forwards to its log, and with `--http` the URL alone on stdout,
//! so that a test can bind port 0 and read where it landed. Stdout carries
//! nothing else: on stdio it is the protocol.

use std::io::Write as _;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{DevMcpError, DevMcpOptions, HTTP_PATH, serve_http, serve_stdio};
use crate::cli::DevMcpArgs;

pub(crate) async fn run_cli(args: DevMcpArgs) -> Result<(), DevMcpError> {
    let opts = DevMcpOptions {
        page_size: args.page_size,
        legacy: args.legacy,
        long_name: args.long_name,
        bad_schema: args.bad_schema,
    };
    let shutdown = CancellationToken::new();
    let signals = cancel_on_signals(shutdown.clone())?;
    let served = match args.http {
        None => {
            ready();
            serve_stdio(opts, shutdown).await
        }
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| DevMcpError::Bind { addr, source })?;
            let local = listener.local_addr().map_err(DevMcpError::LocalAddr)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "http://{local}{HTTP_PATH}")
                .and_then(|()| out.flush())
                .map_err(DevMcpError::Stdout)?;
            drop(out);
            ready();
            serve_http(listener, opts, shutdown).await
        }
    };
    signals.abort();
    served
}

fn ready() {
    eprintln!("dev-mcp: ready (pid {})", std::process::id());
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
