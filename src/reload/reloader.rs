//! The reload task: rescans the manifest set when the directories change,
//! every `rescan_interval` as a safety net for lost events, and on demand
//! (SIGHUP), and publishes the desired state only when it really changed.
//!
//! It owns the `ManifestSet`, the directory watch and the debounce of its
//! events; consumers get watch channels and a handle. While nothing happens
//! it sleeps: its only timers are the rescan interval and, after an event,
//! the debounce deadline. Rescans do blocking file I/O and schema
//! compilation, so they run on tokio's blocking pool. This task never
//! registers anything and never decides whether the daemon may start; the
//! daemon does the first load itself (`ManifestSet::rescan`) and judges it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::dir_watch::{Debounce, DirWatch};
use super::health::ManifestHealth;
use super::manifest_set::{ManifestSet, Rescan};
use crate::desired::DesiredState;
use crate::diag::Diagnostic;

/// How the reloader watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReloadSettings {
    debounce: Duration,
    rescan_interval: Duration,
    watch_events: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("the reload debounce must be between 1ms and 1m, not {0:?}")]
    Debounce(Duration),
    #[error("the rescan interval must be between 10ms and 24h, not {0:?}")]
    RescanInterval(Duration),
}

impl Default for ReloadSettings {
    fn default() -> Self {
        Self {
            debounce: Self::DEFAULT_DEBOUNCE,
            rescan_interval: Self::DEFAULT_RESCAN_INTERVAL,
            watch_events: true,
        }
    }
}

impl ReloadSettings {
    /// Long enough to merge an editor's write burst (or a ConfigMap swap)
    /// into one rescan, short enough to feel immediate.
    pub(crate) const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);
    /// A lost event delays a change by at most this much.
    pub(crate) const DEFAULT_RESCAN_INTERVAL: Duration = Duration::from_secs(30);

    pub fn new(debounce: Duration, rescan_interval: Duration) -> Result<Self, SettingsError> {
        // Zero would rescan at every single event of a burst.
        if !(Duration::from_millis(1)..=Duration::from_secs(60)).contains(&debounce) {
            return Err(SettingsError::Debounce(debounce));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(86_400)).contains(&rescan_interval) {
            return Err(SettingsError::RescanInterval(rescan_interval));
        }
        Ok(Self {
            debounce,
            rescan_interval,
            watch_events: true,
        })
    }

    /// Periodic rescans only, no file-system events: for file systems
    /// without inotify, and for tests of the safety net.
    pub fn without_events(mut self) -> Self {
        self.watch_events = false;
        self
    }
}

/// The outcome of a forced reload.
#[derive(Debug, Clone)]
pub struct ReloadSummary {
    /// The desired state was replaced (and published).
    pub changed: bool,
    pub health: Arc<ManifestHealth>,
}

#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the manifest reloader has stopped")]
pub struct ReloaderStopped;

type ForceRequest = oneshot::Sender<ReloadSummary>;

/// The reload task, before it runs.
#[derive(Debug)]
pub struct Reloader {
    set: ManifestSet,
    settings: ReloadSettings,
    desired: watch::Sender<Arc<DesiredState>>,
    health: watch::Sender<Arc<ManifestHealth>>,
    force: mpsc::Receiver<ForceRequest>,
    /// Woken by relevant file-system events (not debounced yet).
    dirty: Arc<Notify>,
    /// `None` with events off, or when watching failed (then only the
    /// periodic rescan sees changes).
    dir_watch: Option<DirWatch>,
}

/// What the rest of the daemon holds: the published desired state, the
/// manifests' health, and the reload button. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ReloadHandle {
    desired: watch::Receiver<Arc<DesiredState>>,
    health: watch::Receiver<Arc<ManifestHealth>>,
    force: mpsc::Sender<ForceRequest>,
}

impl Reloader {
    /// Takes over a loaded set; the channels start at its current state.
    /// The directories are watched from here on, and `run` starts with a
    /// rescan, so a change made after the set was loaded is never missed.
    pub fn new(set: ManifestSet, settings: ReloadSettings) -> (Self, ReloadHandle) {
        let (desired_tx, desired_rx) = watch::channel(set.desired());
        let (health_tx, health_rx) = watch::channel(Arc::new(set.health()));
        // Requests queue briefly at most: a reload answers each in turn.
        let (force_tx, force_rx) = mpsc::channel(8);
        let dirty = Arc::new(Notify::new());
        let dir_watch = if settings.watch_events {
            match DirWatch::new(&set.source().dirs, set.watched_files(), Arc::clone(&dirty)) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(
                        "cannot watch the manifest directories ({e}); changes are picked up every {:?}",
                        settings.rescan_interval
                    );
                    None
                }
            }
        } else {
            None
        };
        (
            Self {
                set,
                settings,
                desired: desired_tx,
                health: health_tx,
                force: force_rx,
                dirty,
                dir_watch,
            },
            ReloadHandle {
                desired: desired_rx,
                health: health_rx,
                force: force_tx,
            },
        )
    }

    /// Runs until `shutdown`. Spawn it on the daemon's task tracker.
    pub async fn run(self, shutdown: CancellationToken) {
        let Reloader {
            mut set,
            settings,
            desired,
            health,
            mut force,
            dirty,
            mut dir_watch,
        } = self;
        let mut debounce = Debounce::new(settings.debounce);
        // The startup rescan, at once: whatever changed since the set was
        // loaded.
        let mut startup = true;
        let first = tokio::time::Instant::now() + settings.rescan_interval;
        let mut ticks = tokio::time::interval_at(first, settings.rescan_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut force_open = true;
        loop {
            let due = debounce.due();
            let reply = if std::mem::take(&mut startup) {
                None
            } else {
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break,
                    req = force.recv(), if force_open => match req {
                        Some(reply) => Some(reply),
                        // Every handle is gone: only events and ticks remain.
                        None => {
                            force_open = false;
                            continue;
                        }
                    },
                    // Before new events: a burst that never pauses must
                    // still reach its (capped) deadline. Without a deadline
                    // the branch is off and the fallback never awaited.
                    () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => None,
                    // An event only moves the deadline; the rescan waits for
                    // the burst to end.
                    () = dirty.notified() => {
                        debounce.event(tokio::time::Instant::now());
                        continue;
                    }
                    _ = ticks.tick() => None,
                }
            };
            // Whatever started this rescan, it reads every change the
            // pending events announced; events during it wake `dirty` again.
            debounce.clear();
            let forced = reply.is_some();
            let joined = tokio::task::spawn_blocking(move || {
                let r = set.rescan(forced);
                (set, r)
            })
            .await;
            let rescan = match joined {
                Ok((back, rescan)) => {
                    set = back;
                    rescan
                }
                Err(e) => {
                    tracing::error!(
                        "the manifest rescan failed ({e}); hot reload stops and the last desired state stays"
                    );
                    return;
                }
            };
            let snapshot = Arc::new(set.health());
            log(&rescan, &snapshot);
            if rescan.changed {
                desired.send_replace(set.desired());
            }
            health.send_replace(Arc::clone(&snapshot));
            if let Some(w) = dir_watch.as_mut() {
                w.refresh(set.watched_files());
            }
            if let Some(reply) = reply {
                // The asker may have given up; nothing to do then.
                let _ = reply.send(ReloadSummary {
                    changed: rescan.changed,
                    health: snapshot,
                });
            }
        }
    }
}

fn log(rescan: &Rescan, health: &ManifestHealth) {
    rescan.problems.iter().for_each(Diagnostic::log);
    for n in &rescan.notes {
        tracing::info!("{n}");
    }
    if rescan.changed {
        tracing::info!("desired state changed: {}", health.summary());
    }
}

impl ReloadHandle {
    /// The desired state, updated only when it really changed.
    pub fn desired(&self) -> watch::Receiver<Arc<DesiredState>> {
        self.desired.clone()
    }

    /// The manifests' health after the latest rescan.
    pub fn health(&self) -> Arc<ManifestHealth> {
        Arc::clone(&self.health.borrow())
    }

    /// The manifests' health, updated after every rescan.
    pub fn health_updates(&self) -> watch::Receiver<Arc<ManifestHealth>> {
        self.health.clone()
    }

    /// Re-reads every manifest now, even unchanged ones, and returns when
    /// the result is published (for SIGHUP: send `READY=1` after this).
    pub async fn reload_now(&self) -> Result<ReloadSummary, ReloaderStopped> {
        let (tx, rx) = oneshot::channel();
        self.force.send(tx).await.map_err(|_| ReloaderStopped)?;
        rx.await.map_err(|_| ReloaderStopped)
    }
}
