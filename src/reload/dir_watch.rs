//! File-system events on the manifest directories, reduced to one bit:
//! "something relevant happened", and the debounce that turns a burst of
//! such bits into one rescan.
//!
//! The directories are watched, not the files, and not recursively: an
//! editor's rename-over or a ConfigMap's `..data` symlink swap replaces the
//! file (or the link under it), which a file watch would lose. A directory
//! that is deleted and re-created is watched again when `refresh` sees a new
//! inode (the reloader calls it after every rescan, periodic ones included).
//! This module never reads manifests; which files count is the scanner's
//! business, so events only need to be a superset.
//!
//! Nothing here runs while nothing happens: notify's inotify thread blocks
//! until the kernel has an event, and [`Debounce`] is a deadline the
//! reloader sleeps until, not a timer that ticks. (notify-debouncer-full,
//! used before, woke every quarter of the debounce to look for expired
//! events, which was most of an idle daemon's CPU time.)

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecursiveMode, Watcher as _};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Whether a changed directory entry can matter to a rescan. Editor swap
/// and backup files change often and never matter; everything else might
/// (a manifest, a schema file next to it, a ConfigMap's `..data` link or
/// `..2026_…` directory), and a needless rescan only costs a few reads.
pub(crate) fn is_rescan_trigger(name: &str) -> bool {
    let editor_junk = (name.starts_with('.') && !name.starts_with(".."))
        || name.starts_with('#')
        || name.ends_with('~')
        || [".swp", ".swx", ".swo", ".bak"]
            .iter()
            .any(|s| name.ends_with(s))
        // vim probes a directory's writability with a file named 4913.
        || name == "4913";
    !editor_junk
}

/// Whether an event of this kind can mean a directory entry changed.
/// Opening or reading a file changes nothing, and the rescan itself opens
/// the directory and every manifest in it: if those events counted, every
/// rescan would cause the next one, a debounce period later, forever. A
/// close after writing does count (it marks the end of a write).
pub(crate) fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// The watches on the manifest directories.
pub(crate) struct DirWatch {
    watcher: notify::RecommendedWatcher,
    dirs: Vec<PathBuf>,
    /// The identity (device and inode on Unix) each directory had when it was watched: a new
    /// inode at the same path is a re-created directory, whose old watch
    /// is dead.
    watched: HashMap<PathBuf, crate::os::FileId>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch")
            .field("dirs", &self.dirs)
            .field("watched", &self.watched)
            .finish_non_exhaustive()
    }
}

impl DirWatch {
    /// Starts the watcher; every relevant event (and every watcher error,
    /// since an error may mean lost events) wakes `dirty`, at once: the
    /// debounce is the reloader's ([`Debounce`]). A `Notify` rather than a
    /// queue, because only "something happened" matters: a burst of
    /// thousands of events leaves one stored wake-up, not thousands.
    pub(crate) fn new(dirs: &[PathBuf], dirty: Arc<Notify>) -> notify::Result<Self> {
        let roots: Vec<PathBuf> = dirs.to_vec();
        let handler = move |result: notify::Result<notify::Event>| {
            let relevant = match result {
                // `is_change` leaves out the rescan's own reads.
                Ok(e) => {
                    e.need_rescan()
                        || is_change(&e.kind)
                            && e.paths.iter().any(|p| {
                                roots.iter().any(|r| r == p)
                                    || p.file_name()
                                        .and_then(|n| n.to_str())
                                        .is_none_or(is_rescan_trigger)
                            })
                }
                Err(e) => {
                    tracing::warn!("manifest directory watch: {e}; rescanning");
                    true
                }
            };
            if relevant {
                dirty.notify_one();
            }
        };
        let watcher = notify::recommended_watcher(handler)?;
        let mut watch = Self {
            watcher,
            dirs: dirs.to_vec(),
            watched: HashMap::new(),
        };
        watch.refresh();
        Ok(watch)
    }

    /// Watches every directory that exists and is not watched yet (or was
    /// re-created), and forgets the ones that are gone.
    pub(crate) fn refresh(&mut self) {
        for dir in &self.dirs {
            let id = std::fs::metadata(dir)
                .ok()
                .filter(std::fs::Metadata::is_dir)
                .map(|m| crate::os::file_id(&m));
            let known = self.watched.get(dir).copied();
            if id == known {
                continue;
            }
            if known.is_some() {
                // The kernel dropped the old watch with the directory;
                // notify may or may not know yet, so an error is expected.
                let _ = self.watcher.unwatch(dir);
                self.watched.remove(dir);
            }
            let Some(id) = id else {
                tracing::warn!(
                    "manifest directory {} is gone; watching it again when it reappears",
                    dir.display()
                );
                continue;
            };
            match self.watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    if known.is_some() {
                        tracing::info!(
                            "manifest directory {} was re-created; watching it again",
                            dir.display()
                        );
                    }
                    self.watched.insert(dir.clone(), id);
                }
                Err(e) => tracing::warn!(
                    "cannot watch manifest directory {}: {e}; changes are picked up by the periodic rescan only",
                    dir.display()
                ),
            }
        }
    }
}

/// When a burst of events is due for its rescan: `debounce` after its last
/// event, so an editor's writes, or a ConfigMap swap, make one rescan after
/// they end; but never later than [`Debounce::MAX_DELAY_PERIODS`] periods
/// after its first event, so a file rewritten without pause is still picked
/// up. Pure (the caller passes the time), so the rule is tested without
/// waiting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Debounce {
    period: Duration,
    /// The first event of the burst not yet rescanned, and when it is due.
    pending: Option<(Instant, Instant)>,
}

impl Debounce {
    /// A burst is rescanned at most this many debounce periods after its
    /// first event, however long it goes on.
    pub(crate) const MAX_DELAY_PERIODS: u32 = 10;

    pub(crate) fn new(period: Duration) -> Self {
        Self {
            period,
            pending: None,
        }
    }

    /// An event at `now`: the rescan moves to a period later (within the cap).
    pub(crate) fn event(&mut self, now: Instant) {
        let first = self.pending.map_or(now, |(first, _)| first);
        let due = (now + self.period).min(first + self.period * Self::MAX_DELAY_PERIODS);
        self.pending = Some((first, due));
    }

    /// When the pending burst is due, if there is one.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.pending.map(|(_, due)| due)
    }

    /// A rescan started: it reads everything the pending events changed.
    pub(crate) fn clear(&mut self) {
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editor_junk_never_triggers_and_configmap_swaps_do() {
        for yes in [
            "x.toml",
            "..data",
            "..data_tmp",
            "..2026_11_29_10_00_00.123",
            "s.json",
            "tmp",
        ] {
            assert!(is_rescan_trigger(yes), "{yes}");
        }
        for no in [
            ".x.toml.swp",
            ".x.toml.swx",
            "x.toml~",
            "x.toml.bak",
            "#x.toml#",
            ".#x.toml",
            "4913",
            ".hidden",
        ] {
            assert!(!is_rescan_trigger(no), "{no}");
        }
    }

    #[test]
    fn reading_a_manifest_is_not_a_change_but_writing_is() {
        use notify::event::{CreateKind, DataChange, ModifyKind, RemoveKind};
        for no in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Any),
        ] {
            assert!(!is_change(&no), "{no:?}");
        }
        for yes in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ] {
            assert!(is_change(&yes), "{yes:?}");
        }
    }

    #[test]
    fn each_event_moves_the_rescan_a_period_later() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debounce::new(ms(200));
        assert_eq!(d.due(), None);
        d.event(t0);
        assert_eq!(d.due(), Some(t0 + ms(200)));
        d.event(t0 + ms(150));
        assert_eq!(d.due(), Some(t0 + ms(350)));
        d.clear();
        assert_eq!(d.due(), None);
        // After a rescan, a new burst counts from its own first event.
        d.event(t0 + ms(5000));
        assert_eq!(d.due(), Some(t0 + ms(5200)));
    }

    #[test]
    fn a_burst_that_never_pauses_is_rescanned_after_ten_periods() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debounce::new(ms(200));
        for i in 0..100 {
            d.event(t0 + ms(100 * i));
        }
        assert_eq!(d.due(), Some(t0 + ms(2000)));
    }
}
