//! OS events, turned into the daemon's controls: a stop (SIGTERM or SIGINT;
//! on Windows Ctrl+C, Ctrl+Break, the console closing or the system shutting
//! down) cancels the shutdown token (a second one exits at once), a reload
//! request (SIGHUP; Windows has none) asks for a reload. `os` says which
//! events a platform has. With `run --stop-on-stdin-eof`, the end of stdin
//! is a stop too (`follow_stdin`): the parent that holds the pipe stops
//! the sidecar by closing it, or by dying, and the sidecar never outlives
//! it.
//!
//! The binary installs this; in-process tests drive the token and the reload
//! channel directly. It never touches the daemon's state itself.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ReloadRequest;
use crate::os::{Event, Events};

/// Exit status of a second stop request during shutdown: the cleanup did
/// not finish, so it is not a clean stop.
pub(crate) const FORCED_EXIT: i32 = 130;

/// Installs the handlers; the returned task runs for the process lifetime.
pub(crate) fn install(
    shutdown: CancellationToken,
    reload: mpsc::Sender<ReloadRequest>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut events = Events::install()?;
    Ok(tokio::spawn(async move {
        loop {
            let what = match events.next().await {
                Event::Stop(what) => what,
                Event::Reload(what) => {
                    if reload.try_send(ReloadRequest { done: None }).is_err() {
                        tracing::warn!("{what}: a reload is already queued");
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

/// Stops the daemon when stdin ends (end of file or a read error), on the
/// same path as SIGTERM: one `clear`, calls drained, handlers' trees ended.
/// A stop already under way is left alone: a parent that closes the pipe
/// and then waits is not asking twice.
pub(crate) fn follow_stdin(shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let why = tokio::select! {
            why = crate::os::stdin_closed() => why,
            () = shutdown.cancelled() => return,
        };
        tracing::info!("stdin closed ({why}): shutting down");
        shutdown.cancel();
    })
}
