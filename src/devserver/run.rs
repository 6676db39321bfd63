//! `neko-sidecar dev-server`: binds the address from the command line,
//! starts the stand-in, logs its URL and serves until Ctrl-C.
//!
//! The only place of the stand-in that waits on a signal.

use tokio::net::TcpListener;

use super::server::{DevServer, DevServerError};
use crate::cli::DevServerArgs;

/// Runs the stand-in until Ctrl-C.
pub(crate) async fn run_cli(args: DevServerArgs) -> Result<(), DevServerError> {
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| DevServerError::Bind {
            addr: args.listen,
            source,
        })?;
    let roles: Vec<String> = args
        .roles
        .into_iter()
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty())
        .collect();
    let handle = DevServer::builder().roles(roles.clone()).start(listener)?;
    tracing::info!(url = %handle.url(), roles = ?roles, "dev-server (stand-in main_server) listening; control routes under /__dev/");
    let waited = tokio::signal::ctrl_c().await;
    tracing::info!("dev-server shutting down");
    handle.stop_listener().await;
    waited.map_err(DevServerError::Signal)
}
