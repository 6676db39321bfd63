//! The health of a manifest set, as operators see it: per file, whether its
//! latest version is in use, since when, with which tools and problems.
//!
//! Plain data, built by `ManifestSet::health` after every rescan and
//! published by the reloader; nothing here reads files or decides anything.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::diag::{Diagnostic, plural};
use crate::manifest::UnbridgedServer;

/// Whether a file's latest version is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileHealth {
    /// The latest version is valid and its tools are desired.
    Ok,
    /// The latest version was refused; the last good version's tools (if
    /// the file ever had one) stay desired.
    Error,
}

/// One manifest file's health, as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    pub path: PathBuf,
    pub health: FileHealth,
    /// When the file entered this health (or, in error, since these exact
    /// problems were first seen).
    pub since: SystemTime,
    /// The tools this file contributes to the desired state now: its latest
    /// version's, or its last good version's while in error.
    pub tools: Vec<String>,
    /// Likewise, the MCP servers it declares (its imported ones included).
    pub mcp_servers: Vec<String>,
    /// Imported servers the sidecar cannot reach, with their reasons.
    pub unbridged: Vec<UnbridgedServer>,
    /// The latest version's errors (in error) or warnings.
    pub diagnostics: Vec<Diagnostic>,
}

impl FileReport {
    /// In error, but an older version's tools are still served.
    pub fn serving_last_good(&self) -> bool {
        self.health == FileHealth::Error && !(self.tools.is_empty() && self.mcp_servers.is_empty())
    }
}

/// Every file's health after a rescan, for the operator's view (`/status`)
/// or a readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ManifestHealth {
    /// In scan order.
    pub files: Vec<FileReport>,
    /// Directories that cannot be read (their files keep their tools) or
    /// hold no manifests.
    pub directories: Vec<Diagnostic>,
    pub tools: usize,
    /// How many rescans have run, so a watcher can see one happen.
    pub rescans: u64,
}

impl ManifestHealth {
    pub fn files_in_error(&self) -> usize {
        self.files
            .iter()
            .filter(|f| f.health == FileHealth::Error)
            .count()
    }

    /// Any file or directory error: what makes `check` fail.
    pub fn has_errors(&self) -> bool {
        self.files_in_error() > 0 || self.directories.iter().any(Diagnostic::is_error)
    }

    /// "3 files, 12 tools" or "3 files, 11 tools, 1 file in error".
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{}, {}",
            plural(self.files.len(), "manifest file"),
            plural(self.tools, "tool")
        );
        let errors = self.files_in_error();
        if errors > 0 {
            s.push_str(&format!(", {} in error", plural(errors, "file")));
        }
        s
    }
}
