//! OS signals, turned into the daemon's controls: SIGTERM and SIGINT cancel
//! the shutdown token (a second one exits at once), SIGHUP asks for a reload.
//!
//! The binary installs this; in-process tests drive the token and the reload
//! channel directly. It never touches the daemon's state itself.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ReloadRequest;

/// Exit status of a second SIGTERM/SIGINT during shutdown: the cleanup did
/// not finish, so it is not a clean stop.
pub(crate) const FORCED_EXIT: i32 = 130;

/// Installs the handlers; the returned task runs for the process lifetime.
pub(crate) fn install(
    shutdown: CancellationToken,
    reload: mpsc::Sender<ReloadRequest>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        loop {
            let what = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                _ = hup.recv() => {
                    if reload.try_send(ReloadRequest { done: None }).is_err() {
                        tracing::warn!("SIGHUP: a reload is already queued");
                    }
                    continue;
                }
            };
            if shutdown.is_cancelled() {
                tracing::warn!("{what} again: exiting at once, without finishing the cleanup");
                std::process::exit(FORCED_EXIT);
            }
            tracing::info!("{what}: shutting down (send it again to exit at once)");
            shutdown.cancel();
        }
    }))
}
