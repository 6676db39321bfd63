//! File-system events on the manifest directories, reduced to one bit:
//! "something relevant happened, rescan".
//!
//! The directories are watched, not the files, and not recursively: an
//! editor's rename-over or a ConfigMap's `..data` symlink swap replaces the
//! file (or the link under it), which a file watch would lose. Events are
//! debounced (notify-debouncer-full), so a burst of writes becomes one
//! rescan. A directory that is deleted and re-created is watched again when
//! `refresh` sees a new inode (the reloader calls it after every rescan,
//! periodic ones included). This module never reads manifests; which files
//! count is the scanner's business, so events only need to be a superset.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::RecursiveMode;
use notify::event::{AccessKind, AccessMode, EventKind};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::Notify;

/// Whether a changed directory entry can matter to a rescan. Editor swap
/// and backup files change often and never matter; everything else might
/// (a manifest, a schema file next to it, a ConfigMap's `..data` link or
/// `..2026_…` directory), and a needless rescan only costs a few reads.
pub fn is_rescan_trigger(name: &str) -> bool {
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
pub fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// The watches on the manifest directories.
pub struct DirWatch {
    debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
    dirs: Vec<PathBuf>,
    /// The (device, inode) each directory had when it was watched: a new
    /// inode at the same path is a re-created directory, whose old watch
    /// is dead.
    watched: HashMap<PathBuf, (u64, u64)>,
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
    /// Starts the debouncer; every relevant event (and every watcher error,
    /// since an error may mean lost events) wakes `dirty`.
    pub fn new(dirs: &[PathBuf], debounce: Duration, dirty: Arc<Notify>) -> notify::Result<Self> {
        let roots: Vec<PathBuf> = dirs.to_vec();
        let handler = move |result: DebounceEventResult| {
            let relevant = match result {
                // `is_change` leaves out the rescan's own reads.
                Ok(events) => events.iter().any(|e| {
                    e.need_rescan()
                        || is_change(&e.kind)
                            && e.paths.iter().any(|p| {
                                roots.iter().any(|r| r == p)
                                    || p.file_name()
                                        .and_then(|n| n.to_str())
                                        .is_none_or(is_rescan_trigger)
                            })
                }),
                Err(errors) => {
                    for e in errors {
                        tracing::warn!("manifest directory watch: {e}; rescanning");
                    }
                    true
                }
            };
            if relevant {
                dirty.notify_one();
            }
        };
        let debouncer = new_debouncer(debounce, None, handler)?;
        let mut watch = Self {
            debouncer,
            dirs: dirs.to_vec(),
            watched: HashMap::new(),
        };
        watch.refresh();
        Ok(watch)
    }

    /// Watches every directory that exists and is not watched yet (or was
    /// re-created), and forgets the ones that are gone.
    pub fn refresh(&mut self) {
        for dir in &self.dirs {
            let id = std::fs::metadata(dir)
                .ok()
                .filter(std::fs::Metadata::is_dir)
                .map(|m| (m.dev(), m.ino()));
            let known = self.watched.get(dir).copied();
            if id == known {
                continue;
            }
            if known.is_some() {
                // The kernel dropped the old watch with the directory;
                // notify may or may not know yet, so an error is expected.
                let _ = self.debouncer.unwatch(dir);
                self.watched.remove(dir);
            }
            let Some(id) = id else {
                tracing::warn!(
                    "manifest directory {} is gone; watching it again when it reappears",
                    dir.display()
                );
                continue;
            };
            match self.debouncer.watch(dir, RecursiveMode::NonRecursive) {
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
}
