//! Where the sidecar keeps what it must remember across restarts (the
//! OAuth sign-ins of its MCP servers), and how such a file is written:
//! readable by its owner only, replaced atomically.
//!
//! The directory: `STATE_DIRECTORY` when set (systemd's `StateDirectory=`,
//! and how tests and operators choose one on any system); else the user's
//! local application data on Windows (`%LOCALAPPDATA%\neko-sidecar`), the
//! XDG state directory elsewhere (`$XDG_STATE_HOME/neko-sidecar`, by
//! default `~/.local/state/neko-sidecar`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The sidecar's state directory (not created), or why there is none.
pub(crate) fn state_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        // systemd joins several StateDirectory= entries with ':'; the
        // first is ours.
        let text = dir.to_string_lossy().into_owned();
        let first = if cfg!(windows) {
            text
        } else {
            text.split(':').next().unwrap_or_default().to_string()
        };
        return Ok(PathBuf::from(first));
    }
    default_dir()
}

#[cfg(windows)]
fn default_dir() -> Result<PathBuf, String> {
    match std::env::var_os("LOCALAPPDATA").filter(|d| !d.is_empty()) {
        Some(d) => Ok(PathBuf::from(d).join("neko-sidecar")),
        None => Err("neither STATE_DIRECTORY nor LOCALAPPDATA is set: set STATE_DIRECTORY to a folder only this user can read".into()),
    }
}

#[cfg(not(windows))]
fn default_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        if d.is_absolute() {
            return Ok(d.join("neko-sidecar"));
        }
    }
    match std::env::home_dir().filter(|h| h.is_absolute()) {
        Some(h) => Ok(h.join(".local/state/neko-sidecar")),
        None => Err("neither STATE_DIRECTORY, XDG_STATE_HOME nor HOME is set: set STATE_DIRECTORY (systemd: StateDirectory=neko-sidecar)".into()),
    }
}

/// Writes `bytes` to `path` so that a reader sees the old file or the new
/// one, never a part (a temporary file beside it, flushed to disk, then
/// renamed over it), readable and writable by the owner only. The
/// directory is created (owner only) when missing.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = open_private(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir);
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(unix)]
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// The rename made durable: the directory's entry flushed too (Unix; on
/// Windows the rename is durable once it returns).
#[cfg(unix)]
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_file_is_replaced_whole_and_readable_by_its_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("sub").join("oauth.json");
        write_private(&path, b"first").unwrap();
        write_private(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
    }
}
