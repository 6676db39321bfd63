//! The service side of systemd's notify protocol: readiness, status lines,
//! reload and stop announcements, and a watchdog that pings only while the
//! reconcile loop is proven alive.
//!
//! Messages are datagrams of `KEY=VALUE` lines sent to `NOTIFY_SOCKET`
//! (sd_notify(3)) through `os::NotifySocket`: only Linux has one, and
//! elsewhere a `NOTIFY_SOCKET` is reported and ignored. The socket path and the watchdog interval are values of a
//! `Notifier`, read from the environment once by `Notifier::from_env`, so tests
//! pass their own and never touch the process environment. With no socket
//! every call is a no-op, so the daemon runs the same outside systemd. This
//! module never decides *when* the service is ready or alive; the daemon says
//! so through `ready()` and `Heartbeat::beat()`.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::os::NotifySocket;

/// The variables through which systemd talks to the main process only.
/// Remove them from the environment of child processes (exec handlers), so
/// that a handler using an sd_notify library cannot speak for the service;
/// `NotifyAccess=main` makes systemd ignore it anyway.
/// The admin token a parent gave the sidecar (`admin::ADMIN_TOKEN_ENV`) is
/// the sidecar's alone as well.
pub(crate) const SERVICE_ONLY_ENV: [&str; 4] = [
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "NEKO_SIDECAR_ADMIN_TOKEN",
];

/// A notification that could not be delivered. The daemon logs it and goes
/// on: a missing notification must never stop the service itself.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("invalid NOTIFY_SOCKET address `{path}`: {source}")]
    Address { path: PathBuf, source: io::Error },
    #[error("cannot send `{what}` to the systemd notify socket `{path}`: {source}")]
    Send {
        what: String,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot read CLOCK_MONOTONIC for the reload notification: {0}")]
    Clock(io::Error),
}

/// Where notifications go (the socket itself is in `os`: only Linux has
/// one).
#[derive(Debug)]
struct Target {
    /// As given, for messages.
    path: PathBuf,
    socket: NotifySocket,
}

/// Sends notify-protocol messages to one socket, or nowhere.
///
/// Cheap to clone; clones share the socket.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    target: Option<Arc<Target>>,
    /// `WATCHDOG_USEC`: systemd restarts the service when no `WATCHDOG=1`
    /// arrives within it. `None`: no watchdog is configured.
    watchdog: Option<Duration>,
}

impl Notifier {
    /// A notifier that sends nothing (not running under systemd).
    pub(crate) fn disabled() -> Self {
        Self::default()
    }

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` (the
    /// watchdog is ours only when `WATCHDOG_PID` is unset or our pid).
    /// An unset or unusable socket gives a disabled notifier.
    pub fn from_env() -> Result<Self, NotifyError> {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(Self::disabled());
        };
        let notifier = Self::with_socket(PathBuf::from(path))?;
        Ok(match crate::os::systemd_watchdog() {
            Some(usec) => notifier.with_watchdog(usec),
            None => notifier,
        })
    }

    /// Sends to this socket. A leading `@` names a Linux abstract socket,
    /// as in `NOTIFY_SOCKET`. Off Linux this is an error that says so.
    pub fn with_socket(path: impl Into<PathBuf>) -> Result<Self, NotifyError> {
        let path = path.into();
        let socket = NotifySocket::connect(&path).map_err(|source| NotifyError::Address {
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            target: Some(Arc::new(Target { path, socket })),
            watchdog: None,
        })
    }

    /// Sets the watchdog interval (systemd's `WATCHDOG_USEC`) explicitly.
    pub fn with_watchdog(mut self, usec: Duration) -> Self {
        self.watchdog = Some(usec).filter(|d| !d.is_zero());
        self
    }

    /// Whether messages go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// systemd's watchdog interval, when one is configured for us.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `READY=1`: startup, or a reload, is complete.
    pub fn ready(&self) -> Result<(), NotifyError> {
        self.send(&["READY=1".into()])
    }

    /// `STATUS=...`: one line shown by `systemctl status`. Line breaks would
    /// end the value and start a new `KEY=VALUE`, so they become spaces.
    pub fn status(&self, line: &str) -> Result<(), NotifyError> {
        let line = line.replace(['\n', '\r'], " ");
        self.send(&[format!("STATUS={line}")])
    }

    /// `RELOADING=1` with `MONOTONIC_USEC`: systemd ≥ 253 fails a
    /// `Type=notify-reload` reload without the timestamp; older versions
    /// ignore it. Send `ready()` when the reload is done.
    pub fn reloading(&self) -> Result<(), NotifyError> {
        if !self.is_enabled() {
            return Ok(());
        }
        let now = crate::os::monotonic_usec().map_err(NotifyError::Clock)?;
        self.send(&["RELOADING=1".into(), format!("MONOTONIC_USEC={now}")])
    }

    /// `STOPPING=1`: shutdown has begun.
    pub fn stopping(&self) -> Result<(), NotifyError> {
        self.send(&["STOPPING=1".into()])
    }

    /// A watchdog for this notifier, when systemd configured one.
    pub fn watchdog(&self, heartbeat: Heartbeat) -> Option<Watchdog> {
        let usec = self.watchdog?;
        self.target.as_ref()?;
        Some(Watchdog {
            notifier: self.clone(),
            heartbeat,
            ping_every: usec / 2,
            stale_after: usec,
        })
    }

    /// Sends `KEY=VALUE` lines (sd_notify(3)).
    fn send(&self, states: &[String]) -> Result<(), NotifyError> {
        let Some(target) = &self.target else {
            return Ok(());
        };
        // One datagram holds all the lines, so systemd sees them together
        // (RELOADING=1 needs its MONOTONIC_USEC in the same message).
        let msg: String = states.iter().map(|s| format!("{s}\n")).collect();
        let err = |source| NotifyError::Send {
            what: msg.trim_end().replace('\n', " "),
            path: target.path.clone(),
            source,
        };
        let sent = target.socket.send(msg.as_bytes()).map_err(err)?;
        if sent != msg.len() {
            return Err(err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the datagram was truncated",
            )));
        }
        Ok(())
    }
}

/// Proof that the reconcile loop still turns: the loop calls `beat()` on
/// every iteration (including idle timer wake-ups), the watchdog reads when
/// it last did.
///
/// Cheap to clone; clones share the beat.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    epoch: Instant,
    /// Microseconds after `epoch` of the last beat, plus one; 0 means the
    /// loop has not beaten yet (so a loop that never starts is never pinged
    /// for).
    last: Arc<AtomicU64>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self::new()
    }
}

impl Heartbeat {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records that the loop is alive now.
    pub fn beat(&self) {
        let micros = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX - 1);
        self.last.store(micros + 1, Ordering::Release);
    }

    /// How long ago the last beat was; `None` before the first one.
    pub(crate) fn age(&self) -> Option<Duration> {
        match self.last.load(Ordering::Acquire) {
            0 => None,
            n => Some(
                self.epoch
                    .elapsed()
                    .saturating_sub(Duration::from_micros(n - 1)),
            ),
        }
    }
}

/// Sends `WATCHDOG=1` every half watchdog interval, but only while the
/// heartbeat is fresh, so a wedged loop gets the service restarted instead
/// of kept alive by a timer that has nothing to do with it.
#[derive(Debug)]
pub struct Watchdog {
    notifier: Notifier,
    heartbeat: Heartbeat,
    ping_every: Duration,
    /// A beat older than this proves nothing. Equal to the watchdog
    /// interval, so a loop that beats at least every half interval is always
    /// pinged for, and a wedged loop is restarted within two intervals.
    stale_after: Duration,
}

impl Watchdog {
    /// How often a ping is considered.
    pub fn ping_every(&self) -> Duration {
        self.ping_every
    }

    /// The oldest beat that still allows a ping.
    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// Pings until `shutdown`; a failed ping is logged and retried at the
    /// next period (systemd will restart us if they keep failing).
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(self.ping_every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut wedged = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.heartbeat.age() {
                Some(age) if age <= self.stale_after => {
                    if wedged {
                        tracing::info!("the reconcile loop is alive again; watchdog pings resume");
                        wedged = false;
                    }
                    if let Err(e) = self.notifier.send(&["WATCHDOG=1".into()]) {
                        tracing::warn!("{e}");
                    }
                }
                Some(age) if !wedged => {
                    tracing::error!(
                        "the reconcile loop has not turned for {age:?}: watchdog pings stop, so systemd restarts the service"
                    );
                    wedged = true;
                }
                Some(_) | None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_has_no_age_until_it_beats() {
        let h = Heartbeat::new();
        assert_eq!(h.age(), None);
        h.beat();
        let age = h.age().unwrap();
        assert!(age < Duration::from_secs(5), "{age:?}");
    }

    #[test]
    fn a_disabled_notifier_sends_nothing_and_has_no_watchdog() {
        let n = Notifier::disabled().with_watchdog(Duration::from_secs(30));
        assert!(!n.is_enabled());
        n.ready().unwrap();
        n.reloading().unwrap();
        assert!(n.watchdog(Heartbeat::new()).is_none());
    }
}
