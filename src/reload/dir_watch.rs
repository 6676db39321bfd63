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
//! Files that manifests depend on outside the manifest directories (an
//! `[[mcp_import]]`'s server list, say Claude Desktop's config) are
//! followed the same way, through their directory: an editor that saves by
//! rename and a program that rewrites in place both show. There only
//! events on those exact files count, since such a directory is another
//! program's and changes for its own reasons.
//!
//! Events are matched against our paths in the form the watcher names
//! them by ([`reported_forms`]): notify makes a relative watch path
//! absolute against the working directory, and macOS's FSEvents reports
//! real paths, symlinks resolved. The paths of the config (manifest
//! directories, schemas, imported files) stay as the user wrote them, for
//! every message; only this module needs them in the watcher's form.
//!
//! Nothing here runs while nothing happens: notify's inotify thread blocks
//! until the kernel has an event, and [`Debounce`] is a deadline the
//! reloader sleeps until, not a timer that ticks. (notify-debouncer-full,
//! used before, woke every quarter of the debounce to look for expired
//! events, which was most of an idle daemon's CPU time.)

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
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

/// The forms under which the watcher may name `dir` in its events: the
/// absolute path we hand it (so the form does not depend on notify joining
/// the working directory itself), and the canonical one, which macOS's
/// FSEvents reports (symlinks resolved, `/var` as `/private/var`); on the
/// other platforms it is an extra entry that never matches. Without the
/// absolute form, a relative `manifest_dirs` (the README's own
/// `--config agent.toml.example`) never matched an event (issue 33).
fn reported_forms(dir: &Path) -> Vec<PathBuf> {
    let mut forms = vec![watched_as(dir)];
    if let Ok(real) = std::fs::canonicalize(dir)
        && !forms.contains(&real)
    {
        forms.push(real);
    }
    forms
}

/// The path `dir` is handed to the watcher as: absolute, against the
/// working directory, which the daemon never changes. It fails only when
/// the working directory is gone; then notify cannot make it absolute
/// either, and the watch fails with a warning.
fn watched_as(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// What events are matched against: the manifest directories and the
/// followed files, each in every form the watcher may report it by.
#[derive(Debug, Default)]
struct Targets {
    roots: Vec<PathBuf>,
    files: BTreeSet<PathBuf>,
}

impl Targets {
    /// Whether an event on `p` can matter: a manifest directory itself, a
    /// followed file, or an entry of a manifest directory that is not
    /// editor junk.
    fn matches(&self, p: &Path) -> bool {
        self.roots.iter().any(|r| r == p)
            || self.files.contains(p)
            || p.parent()
                .is_some_and(|d| self.roots.iter().any(|r| r == d))
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_none_or(is_rescan_trigger)
    }
}

/// The watches on the manifest directories, and on the folders of the
/// files the manifests depend on.
pub(crate) struct DirWatch {
    watcher: notify::RecommendedWatcher,
    /// The manifest directories as configured (for messages).
    dirs: Vec<PathBuf>,
    /// Shared with the event handler, which counts only events on the
    /// directories' entries and, in the other folders, on the followed
    /// files; renewed at every `refresh` (a directory that did not exist
    /// has no canonical form yet).
    targets: Arc<RwLock<Targets>>,
    /// The identity each directory had when it was watched (`os::file_id`:
    /// device and inode on Unix): another one at the same path is a
    /// re-created directory, whose old watch is dead.
    watched: HashMap<PathBuf, crate::os::FileId>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch")
            .field("dirs", &self.dirs)
            .field("targets", &self.targets)
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
    pub(crate) fn new(
        dirs: &[PathBuf],
        files: Vec<PathBuf>,
        dirty: Arc<Notify>,
    ) -> notify::Result<Self> {
        let targets: Arc<RwLock<Targets>> = Arc::default();
        let shared = Arc::clone(&targets);
        let handler = move |result: notify::Result<notify::Event>| {
            let relevant = match result {
                // `is_change` leaves out the rescan's own reads.
                Ok(e) => {
                    let targets = shared.read().unwrap_or_else(|e| e.into_inner());
                    e.need_rescan()
                        || is_change(&e.kind) && e.paths.iter().any(|p| targets.matches(p))
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
            targets,
            watched: HashMap::new(),
        };
        watch.refresh(files);
        Ok(watch)
    }

    /// Follows `files` (replacing the previous list), watches every
    /// directory that exists and is not watched yet (or was re-created),
    /// and forgets the ones that are gone or no longer needed.
    pub(crate) fn refresh(&mut self, files: Vec<PathBuf>) {
        let id_of = |d: &Path| std::fs::metadata(d).ok().map(|m| crate::os::file_id(&m));
        let mut wanted: Vec<PathBuf> = self.dirs.clone();
        let mut followed = BTreeSet::new();
        for f in files {
            let (Some(parent), Some(name)) = (f.parent(), f.file_name()) else {
                continue;
            };
            // `s.json` of a manifest in `.` is in the working directory.
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            // inotify has one watch per directory, however it is spelled
            // (`tools/..`, a symlink), and names its events after the
            // spelling watched last; so a folder watched already is the
            // one the file is followed in.
            let same = id_of(parent).and_then(|id| {
                wanted
                    .iter()
                    .find(|w| w.as_path() != parent && id_of(w) == Some(id))
                    .cloned()
            });
            let folder = match same {
                Some(dir) => dir,
                None => {
                    if !wanted.iter().any(|w| w == parent) {
                        wanted.push(parent.to_path_buf());
                    }
                    parent.to_path_buf()
                }
            };
            followed.extend(reported_forms(&folder).into_iter().map(|d| d.join(name)));
        }
        let roots = self.dirs.iter().flat_map(|d| reported_forms(d)).collect();
        *self.targets.write().unwrap_or_else(|e| e.into_inner()) = Targets {
            roots,
            files: followed,
        };
        let unneeded: Vec<PathBuf> = self
            .watched
            .keys()
            .filter(|d| !wanted.contains(d))
            .cloned()
            .collect();
        for dir in unneeded {
            let _ = self.watcher.unwatch(&watched_as(&dir));
            self.watched.remove(&dir);
        }
        for dir in &wanted {
            let manifest_dir = self.dirs.contains(dir);
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
                let _ = self.watcher.unwatch(&watched_as(dir));
                self.watched.remove(dir);
            }
            let Some(id) = id else {
                // A missing folder of an imported file is the manifest's
                // error already, reported by the rescan.
                if manifest_dir {
                    tracing::warn!(
                        "manifest directory {} is gone; watching it again when it reappears",
                        dir.display()
                    );
                }
                continue;
            };
            match self
                .watcher
                .watch(&watched_as(dir), RecursiveMode::NonRecursive)
            {
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

    /// Issue 33: notify names events by absolute paths (it joins the
    /// working directory to a relative watch path), so relative manifest
    /// directories and followed files must match in that form.
    #[test]
    fn events_named_by_absolute_paths_match_relative_directories_and_files() {
        let targets = Targets {
            roots: reported_forms(Path::new("tools")),
            files: reported_forms(Path::new("elsewhere"))
                .into_iter()
                .map(|d| d.join("claude.json"))
                .collect(),
        };
        let tools = std::path::absolute("tools").unwrap();
        let elsewhere = std::path::absolute("elsewhere").unwrap();
        assert!(targets.matches(&tools));
        assert!(targets.matches(&tools.join("x.toml")));
        assert!(!targets.matches(&tools.join(".x.toml.swp")));
        assert!(targets.matches(&elsewhere.join("claude.json")));
        assert!(!targets.matches(&elsewhere.join("other.json")));
        assert!(!targets.matches(&std::path::absolute("other/x.toml").unwrap()));
    }

    /// macOS's FSEvents reports real paths: a manifest directory reached
    /// through a symlink matches by its target too. (Unix: symlinks.)
    #[cfg(unix)]
    #[test]
    fn a_directory_behind_a_symlink_matches_by_its_real_path() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let targets = Targets {
            roots: reported_forms(&link),
            files: BTreeSet::new(),
        };
        assert!(targets.matches(&link.join("x.toml")));
        assert!(targets.matches(&real.canonicalize().unwrap().join("x.toml")));
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
