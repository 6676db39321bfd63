//! The examples as the release archives ship them (issue 33): the Windows
//! zip's copies of the manifests (`packaging/windows/examples/`) are the
//! Linux ones with programs a Windows machine has (`py -3`, python.org's
//! launcher, for `python3`; a cmd batch file for the `sh` script), and
//! `check` from the unpacked archive of this platform warns of nothing once
//! the programs its examples name are on PATH.
//!
//! The programs on PATH here are empty stand-ins: `check` only looks them
//! up, so this shows which programs the manifests name, not that the
//! scripts run. The scripts run in `callback/examples.rs` and the demo
//! (and, from the real zip under Wine with the real Node.js for Windows,
//! in `packaging/release.sh --check`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{BIN, repo};

/// The manifest lines that must differ between the two copies, each
/// Linux line with its Windows counterpart.
const DIFFERENCES: &[(&str, &str)] = &[
    (
        r#"handler = { type = "exec", command = ["python3", "../handlers/convert_units.py"] }"#,
        r#"handler = { type = "exec", command = ["py", "-3", "../handlers/convert_units.py"] }"#,
    ),
    (
        r#"handler = { type = "exec", command = ["sh", "../handlers/disk_usage.sh"], env = { LC_ALL = "C" } }"#,
        r#"handler = { type = "exec", command = ["cmd", "/d", "/c", '..\handlers\disk_usage.cmd'] }"#,
    ),
    // cmd's `dir` gives the free space only (disk_usage.cmd says why).
    (
        r#"description = "How full the disk of the machine running the plugin is: used, total and free space.""#,
        r#"description = "How much space is free on the disk of the machine running the plugin.""#,
    ),
    (
        r#"command = ["python3", "../handlers/weather_mcp.py"]"#,
        r#"command = ["py", "-3", "../handlers/weather_mcp.py"]"#,
    ),
];

/// The lines of a manifest that are not comments or blank.
fn settings(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

fn toml_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    names
}

#[test]
fn the_windows_examples_are_the_linux_ones_with_programs_windows_has() {
    let linux = repo().join("examples/tools");
    let windows = repo().join("packaging/windows/examples/tools");
    let mut used = vec![false; DIFFERENCES.len()];
    for name in toml_files(&windows) {
        let (l, w) = (settings(&linux.join(&name)), settings(&windows.join(&name)));
        assert_eq!(l.len(), w.len(), "{name}: {l:#?}\n{w:#?}");
        for (a, b) in l.iter().zip(&w) {
            if a == b {
                continue;
            }
            let i = DIFFERENCES
                .iter()
                .position(|d| *d == (a.as_str(), b.as_str()))
                .unwrap_or_else(|| panic!("{name}: `{a}` became `{b}`"));
            used[i] = true;
        }
    }
    assert!(
        used.iter().all(|u| *u),
        "a difference no file has: {used:?}"
    );
    // Every Linux manifest that names a program Windows lacks has its copy.
    for name in toml_files(&linux) {
        let text = std::fs::read_to_string(linux.join(&name)).unwrap();
        if text.contains("\"python3\"") || text.contains("[\"sh\"") {
            assert!(windows.join(&name).is_file(), "{name} has no Windows copy");
        }
    }
}

/// Copies `from` into `to`, recursively.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// This platform's archive, unpacked, as `packaging/release.sh` lays it
/// out: on Windows the zip's config and the examples with the Windows
/// copies over them (and no `sh` script), elsewhere the repository's.
fn unpacked_archive(root: &Path) {
    copy_tree(&repo().join("examples"), &root.join("examples"));
    if cfg!(windows) {
        std::fs::copy(
            repo().join("packaging/windows/agent.toml.example"),
            root.join("agent.toml.example"),
        )
        .unwrap();
        std::fs::remove_file(root.join("examples/handlers/disk_usage.sh")).unwrap();
        copy_tree(
            &repo().join("packaging/windows/examples"),
            &root.join("examples"),
        );
    } else {
        std::fs::copy(
            repo().join("agent.toml.example"),
            root.join("agent.toml.example"),
        )
        .unwrap();
    }
}

/// A folder of empty programs with these names (`.exe` on Windows).
fn stand_ins(dir: &Path, names: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for n in names {
        let p = dir.join(format!("{n}{}", std::env::consts::EXE_SUFFIX));
        std::fs::write(&p, "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    dir.to_path_buf()
}

#[test]
fn check_from_the_unpacked_archive_warns_of_nothing_once_the_examples_programs_are_on_path() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("archive");
    unpacked_archive(&root);
    // What the examples name on this platform; `cmd` is Windows' own.
    let programs: &[&str] = if cfg!(windows) {
        &["py", "node"]
    } else {
        &["python3", "node", "sh"]
    };
    let bin = stand_ins(&tmp.path().join("bin"), programs);
    let mut path = vec![bin];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let out = Command::new(BIN)
        .args(["check", "--config", "agent.toml.example"])
        .current_dir(&root)
        .env("PATH", std::env::join_paths(path).unwrap())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{:?}\n{text}", out.status);
    assert!(!text.contains("warning"), "{text}");
    assert!(text.contains(": ok"), "{text}");
}
