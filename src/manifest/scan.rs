//! Finding manifest files in the configured directories.
//!
//! A manifest is a `*.toml` file directly in a manifest directory (symlinks
//! followed, so the Kubernetes ConfigMap layout works). Hidden files, `..*`
//! entries and editor leftovers are skipped. This module only lists files;
//! it never parses them.

use std::path::{Path, PathBuf};

use crate::diag::Diagnostic;

/// Whether a directory entry's file name is a manifest we should read.
/// Dotfiles (vim's `.x.toml.swp`, ConfigMap's `..data`), backups (`x.toml~`,
/// `x.toml.bak`) and emacs lock or autosave files never end in `.toml`, or
/// start with `.` or `#`, so the rule is short.
pub(crate) fn is_manifest_name(name: &str) -> bool {
    name.ends_with(".toml")
        && name.len() > ".toml".len()
        && !name.starts_with('.')
        && !name.starts_with('#')
}

/// The manifest files of every directory, sorted by path within each
/// directory, and a diagnostic for each directory that cannot be read.
pub(crate) fn manifest_files(dirs: &[PathBuf]) -> (Vec<PathBuf>, Vec<Diagnostic>) {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for dir in dirs {
        match list_dir(dir) {
            Ok((mut found, bad)) => {
                if found.is_empty() && bad.is_empty() {
                    diags.push(Diagnostic::warning(
                        dir,
                        None,
                        "the manifest directory has no *.toml manifests: this sidecar offers no tools from it",
                    ));
                }
                found.sort();
                files.extend(found);
                diags.extend(bad);
            }
            Err(d) => diags.push(d),
        }
    }
    (files, diags)
}

/// The manifests of one directory, and the entries that look like
/// manifests but cannot be read as files.
fn list_dir(dir: &Path) -> Result<(Vec<PathBuf>, Vec<Diagnostic>), Diagnostic> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        let what = match e.kind() {
            std::io::ErrorKind::NotFound => "the manifest directory does not exist".to_string(),
            std::io::ErrorKind::NotADirectory => {
                "the manifest directory is not a directory".to_string()
            }
            _ => format!("cannot read the manifest directory: {e}"),
        };
        Diagnostic::error(dir, None, format!("{what} (listed in `manifest_dirs`)"))
    })?;
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_manifest_name(name) {
            continue;
        }
        let path = entry.path();
        // Follow symlinks: a ConfigMap mounts `x.toml -> ..data/x.toml`.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => out.push(path),
            // A folder named like a manifest is somebody's layout, not a manifest.
            Ok(m) if m.is_dir() => {}
            Ok(_) => bad.push(Diagnostic::error(
                &path,
                None,
                "not a regular file (a FIFO, socket or device): a manifest must be a file",
            )),
            Err(e) => bad.push(Diagnostic::error(
                &path,
                None,
                format!("cannot open the manifest ({e}); a symlink whose target is missing?"),
            )),
        }
    }
    Ok((out, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_hidden_and_editor_files() {
        for ok in ["weather.toml", "a.b.toml"] {
            assert!(is_manifest_name(ok), "{ok}");
        }
        for skip in [
            ".weather.toml",
            ".weather.toml.swp",
            "weather.toml~",
            "weather.toml.bak",
            "..data",
            "..2026_11_29.toml",
            "#weather.toml#",
            ".#weather.toml",
            "4913",
            ".toml",
            "weather.json",
        ] {
            assert!(!is_manifest_name(skip), "{skip}");
        }
    }

    // Symlinks need a privilege on Windows.
    #[cfg(unix)]
    #[test]
    fn a_dangling_manifest_symlink_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(tmp.path().join("gone.toml"), tmp.path().join("x.toml"))
            .unwrap();
        let (files, diags) = manifest_files(&[tmp.path().to_path_buf()]);
        assert!(files.is_empty());
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(diags[0].is_error());
        assert_eq!(diags[0].path, tmp.path().join("x.toml"));
        assert!(diags[0].message.contains("symlink whose target is missing"));
    }

    #[cfg(unix)]
    #[test]
    fn lists_sorted_manifests_through_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir(d.join("..data")).unwrap();
        std::fs::write(d.join("..data/b.toml"), "x").unwrap();
        std::os::unix::fs::symlink(d.join("..data/b.toml"), d.join("b.toml")).unwrap();
        std::fs::write(d.join("a.toml"), "x").unwrap();
        std::fs::write(d.join(".a.toml.swp"), "x").unwrap();
        std::fs::create_dir(d.join("dir.toml")).unwrap();
        let (files, diags) = manifest_files(&[d.to_path_buf()]);
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(files, vec![d.join("a.toml"), d.join("b.toml")]);
    }
}
