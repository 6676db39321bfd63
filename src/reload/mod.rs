//! Manifest hot reload with keep-last-good per file.
//!
//! `ManifestSet` holds every file's last good version and the desired state
//! they make (`manifest_set`; `health` is its view for operators),
//! `content` hashes what a manifest depends on, `dir_watch` turns
//! file-system events into "rescan" and holds the debounce rule, and
//! `Reloader` runs it all as one task that publishes the desired state on a
//! watch channel when, and only when, it changes. Nothing here talks to main_server or serves calls; the
//! engine and the callback server consume the channel.

mod content;
mod dir_watch;
mod health;
mod manifest_set;
mod reloader;

pub use health::{FileHealth, FileReport, ManifestHealth};
pub use manifest_set::{ManifestSet, ManifestSource, Rescan};
pub use reloader::{
    ReloadHandle, ReloadSettings, ReloadSummary, Reloader, ReloaderStopped, SettingsError,
};
