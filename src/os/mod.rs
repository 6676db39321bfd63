//! What differs per operating system, behind one small portable API: which
//! platform this is (and what only some platforms have), the signals and
//! console events that stop or reload the daemon, process trees, the
//! transport of systemd's notify protocol, file identity, the open-files
//! limit, reading stdin without a blocked thread, and noticing that stdin
//! has ended.
//!
//! This is the only module with `cfg(unix)`, `cfg(windows)` or
//! `cfg(target_os = ...)` in its code: `unix.rs` (with `linux.rs` and
//! `linux_spawn.rs` for what Linux alone has) and `windows.rs` implement
//! the same small set of
//! functions, and the rest of the crate calls them through here. A feature
//! that a platform lacks is a value (`Platform::lacks`) that the manifest
//! loader turns into a `check` error, never a compile error or a silent
//! no-op.

mod browser;
mod process;
mod state;

pub(crate) use browser::open_browser;
pub(crate) use state::{state_dir, write_private};

pub(crate) use process::{
    ProcessTree, SpawnSpec, forget_resolved_programs, resolve_program, resolve_program_cached,
};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod linux_guard;
#[cfg(target_os = "linux")]
mod linux_spawn;
#[cfg(not(target_os = "linux"))]
mod wrapped_tree;
#[cfg(target_os = "linux")]
use linux as service;
#[cfg(not(target_os = "linux"))]
mod no_systemd;
#[cfg(not(target_os = "linux"))]
use no_systemd as service;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as imp;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as imp;

use std::fmt;
use std::path::Path;

/// An operating system as the sidecar tells them apart: by what each one
/// offers, not by its name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    MacOs,
    /// FreeBSD and the other Unix systems: process groups and Unix
    /// sockets, no systemd.
    OtherUnix,
    Windows,
}

/// A feature that only some platforms have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// An http handler reached through a Unix socket (`unix_socket`).
    UnixSocketHandler,
    /// systemd's notify protocol (`NOTIFY_SOCKET`) and its watchdog.
    SystemdNotify,
}

impl Platform {
    /// The platform this build runs on.
    pub const CURRENT: Platform = if cfg!(target_os = "linux") {
        Platform::Linux
    } else if cfg!(target_os = "macos") {
        Platform::MacOs
    } else if cfg!(windows) {
        Platform::Windows
    } else {
        Platform::OtherUnix
    };

    /// The name messages use, as Rust's `std::env::consts::OS` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Linux => "linux",
            Platform::MacOs => "macos",
            Platform::OtherUnix => "unix",
            Platform::Windows => "windows",
        }
    }

    /// What an operator sends to stop the sidecar, as the demo names it.
    pub fn stop_request(self) -> &'static str {
        match self {
            Platform::Windows => "Ctrl+C",
            _ => "SIGTERM",
        }
    }

    /// Why `feature` cannot be had here, in a sentence for a `check`
    /// error; `None` when it can.
    pub fn lacks(self, feature: Feature) -> Option<String> {
        let (available, what) = match feature {
            Feature::UnixSocketHandler => (
                self != Platform::Windows,
                "an http handler on a unix socket (`unix_socket`) is available on Linux and other Unix systems only",
            ),
            Feature::SystemdNotify => (
                self == Platform::Linux,
                "systemd's notify protocol is available on Linux only",
            ),
        };
        (!available).then(|| format!("{what}; this is {self}"))
    }

    /// Whether `path` is absolute as this platform reads paths: on
    /// Windows `C:\data` and `C:/data` are, `/data` is not (it lacks a
    /// drive), which std's `Path::is_absolute` decides only for the
    /// platform it was built for. Tests pass the platform they mean.
    pub fn is_absolute(self, path: &str) -> bool {
        match self {
            Platform::Windows => {
                let b = path.as_bytes();
                let drive = b.len() >= 3
                    && b[0].is_ascii_alphabetic()
                    && b[1] == b':'
                    && (b[2] == b'\\' || b[2] == b'/');
                let unc = path.starts_with(r"\\") || path.starts_with("//");
                drive || unc
            }
            _ => path.starts_with('/'),
        }
    }

    /// Why `path` cannot mean here what it seems to mean, when it is
    /// written for another platform: `C:\data` off Windows, or `/data`
    /// (no drive letter) on Windows. `None` for a path of this platform's
    /// form, right or wrong.
    pub fn foreign_path(self, path: &str) -> Option<String> {
        let windows = Platform::Windows;
        if self != windows && windows.is_absolute(path) && !self.is_absolute(path) {
            return Some(format!(
                "it is a Windows path, and this is {self}: give a path of this system"
            ));
        }
        if self == windows && path.starts_with(['/', '\\']) && !windows.is_absolute(path) {
            return Some(
                "it has no drive letter, so it is read on the drive of the manifest: give C:\\... (or C:/...) or a path relative to the manifest"
                    .to_string(),
            );
        }
        None
    }

    /// Whether a program named in a `command` is a path (looked up
    /// relative to `cwd`) rather than a bare name (looked up on PATH).
    pub fn is_program_path(self, program: &str) -> bool {
        match self {
            Platform::Windows => program.contains(['/', '\\']) || self.is_absolute(program),
            _ => program.contains('/'),
        }
    }
}

impl Default for Platform {
    fn default() -> Self {
        Platform::CURRENT
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Makes this process fit to be the daemon, once, before its runtime
/// starts (`neko-sidecar run`): the signal settings it may have inherited
/// are put right (`restore_sigchld`), and on Linux the guardian that ends
/// the handlers' process groups if the sidecar is killed outright is
/// started (`linux_guard.rs`; a failure there is logged, and the sidecar
/// runs without it).
pub fn prepare_daemon_process() {
    restore_sigchld();
    #[cfg(target_os = "linux")]
    if let Err(e) = linux_guard::start() {
        tracing::warn!(
            error = %e,
            "the guardian could not be started: processes started by handlers \
             may outlive a sidecar killed outright"
        );
    }
}

/// Puts SIGCHLD back to its default action if this process was started
/// with it ignored (a parent may ignore it, and the setting survives
/// `exec`): with SIGCHLD ignored the kernel reaps children by itself, so
/// every wait for a handler fails ("No child processes") and its pid is
/// free while the sidecar still means to signal it. Called at daemon start
/// and before every spawn (once per process); a no-op on Windows.
pub fn restore_sigchld() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(imp::restore_sigchld);
}

/// What the OS asked the daemon to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// Stop: SIGTERM or SIGINT; on Windows Ctrl+C, Ctrl+Break, the console
    /// closing, or the system shutting down. The name is for the log.
    Stop(&'static str),
    /// Read the configuration and the manifests again: SIGHUP. Windows has
    /// no such signal; reloads come from the manifest watch there.
    #[cfg_attr(windows, allow(dead_code))]
    Reload(&'static str),
}

/// The daemon's OS events, installed once per process.
pub(crate) struct Events(imp::Events);

impl Events {
    /// Installs the handlers. From then on the default actions (ending the
    /// process) no longer happen: the daemon decides.
    pub(crate) fn install() -> std::io::Result<Self> {
        imp::Events::install().map(Self)
    }

    /// The next event.
    pub(crate) async fn next(&mut self) -> Event {
        self.0.next().await
    }
}

/// A process's exit, in words for messages: the status, or on Unix the
/// signal that ended it.
pub(crate) fn describe_exit(status: std::process::ExitStatus) -> String {
    imp::describe_exit(status)
}

/// What tells two directories at the same path apart: a directory that was
/// removed and made again has another identity. Opaque to callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId(u64, u64);

/// The identity of the file `meta` was read from (device and inode on
/// Unix; creation time on Windows, where std gives no stable file index).
pub(crate) fn file_id(meta: &std::fs::Metadata) -> FileId {
    let (a, b) = imp::file_id(meta);
    FileId(a, b)
}

/// Whether `path` is a file this platform would run (the execute bit on
/// Unix; on Windows, any file: what runs is decided by its extension, which
/// the PATH lookup already chose).
pub(crate) fn is_executable(path: &Path) -> bool {
    imp::is_executable(path)
}

/// Raises the soft limit on open files to the hard one where there is such
/// a limit, and returns it; `None` where descriptors are not bounded per
/// process in that way (Windows).
pub(crate) fn open_files_limit() -> Option<u64> {
    imp::open_files_limit()
}

/// This process's stdin, readable without a blocked thread where that is
/// possible (a pipe on Unix is registered with the reactor).
pub(crate) fn stdin() -> Box<dyn tokio::io::AsyncRead + Send + Unpin> {
    imp::stdin()
}

/// Resolves when this process's stdin ends (end of file) or cannot be
/// read (a broken pipe, a closed handle), with what ended it, for the log;
/// whatever arrives before is discarded. This is how a parent that holds
/// the other end of a pipe stops the sidecar, by closing it or by dying:
/// its end closes either way, on every platform (`run
/// --stop-on-stdin-eof`).
pub(crate) async fn stdin_closed() -> String {
    imp::stdin_closed().await
}

/// Reads `input` to its end, discarding what it reads: what ended it.
#[cfg_attr(windows, allow(dead_code))]
async fn read_to_end_of(mut input: impl tokio::io::AsyncRead + Unpin) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 1024];
    loop {
        match input.read(&mut buf).await {
            Ok(0) => return "end of file".to_string(),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return format!("read error: {e}"),
        }
    }
}

/// [`stdin_closed`] on a thread of its own, for a stdin the reactor cannot
/// wait on. Not tokio's blocking pool: the runtime waits for that pool's
/// threads when it shuts down, and a read of a stdin that stays open
/// never returns; a plain thread ends with the process.
async fn stdin_closed_on_thread() -> String {
    use std::io::Read as _;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let watcher = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 1024];
            let why = loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break "end of file".to_string(),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break format!("read error: {e}"),
                }
            };
            let _ = tx.send(why);
        });
    // Not following the parent would leave the sidecar running after it:
    // a watcher that cannot start is a stop.
    if let Err(e) = watcher {
        return format!("stdin cannot be watched: {e}");
    }
    rx.await
        .unwrap_or_else(|_| "the stdin watcher ended".to_string())
}

/// The socket of systemd's notify protocol: datagrams to a path or, with
/// a leading `@`, a Linux abstract name. Elsewhere `connect` says that
/// only Linux has it.
#[derive(Debug)]
pub(crate) struct NotifySocket(service::NotifySocket);

impl NotifySocket {
    pub(crate) fn connect(path: &Path) -> std::io::Result<Self> {
        service::NotifySocket::connect(path).map(Self)
    }

    /// Sends one datagram; the number of bytes sent.
    pub(crate) fn send(&self, msg: &[u8]) -> std::io::Result<usize> {
        self.0.send(msg)
    }
}

/// systemd's watchdog interval for this process (`WATCHDOG_USEC`, when
/// `WATCHDOG_PID` is unset or names us); `None` elsewhere.
pub(crate) fn systemd_watchdog() -> Option<std::time::Duration> {
    service::systemd_watchdog()
}

/// `CLOCK_MONOTONIC` in microseconds, as systemd's `MONOTONIC_USEC` wants it.
pub(crate) fn monotonic_usec() -> std::io::Result<u64> {
    service::monotonic_usec()
}

/// How to run Python 3 here, as an argv prefix: `python3` or `python` on
/// Unix; on Windows the `py -3` launcher that python.org's installer puts on
/// PATH first, then `python` (`python3` there is often only the Microsoft
/// Store's stand-in). `None` when none is on PATH.
pub fn python() -> Option<Vec<String>> {
    let candidates: &[&[&str]] = if cfg!(windows) {
        &[&["py", "-3"], &["python"], &["python3"]]
    } else {
        &[&["python3"], &["python"]]
    };
    candidates
        .iter()
        .find(|argv| which::which(argv[0]).is_ok())
        .map(|argv| argv.iter().map(|s| (*s).to_string()).collect())
}

/// An http client that reaches its endpoint through the Unix socket `path`;
/// an error where there are none (the manifest loader refuses such a
/// handler there first).
pub(crate) fn unix_socket_client(
    builder: reqwest::ClientBuilder,
    path: &Path,
) -> Result<reqwest::ClientBuilder, String> {
    imp::unix_socket_client(builder, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_platform_names_itself_in_what_it_lacks() {
        let msg = Platform::Windows.lacks(Feature::UnixSocketHandler).unwrap();
        assert!(msg.ends_with("; this is windows"), "{msg}");
        assert_eq!(Platform::MacOs.lacks(Feature::UnixSocketHandler), None);
        assert_eq!(Platform::Linux.lacks(Feature::SystemdNotify), None);
        let msg = Platform::MacOs.lacks(Feature::SystemdNotify).unwrap();
        assert_eq!(
            msg,
            "systemd's notify protocol is available on Linux only; this is macos"
        );
    }

    #[test]
    fn windows_paths_have_a_drive_or_are_unc() {
        let w = Platform::Windows;
        for p in [r"C:\data", "C:/data", r"\\server\share", "d:\\"] {
            assert!(w.is_absolute(p), "{p}");
        }
        for p in ["/data", "data", r"data\x", "C:data"] {
            assert!(!w.is_absolute(p), "{p}");
        }
        assert!(Platform::Linux.is_absolute("/data"));
        assert!(!Platform::Linux.is_absolute(r"C:\data"));
        assert!(w.is_program_path(r"bin\tool.exe"));
        assert!(w.is_program_path("bin/tool.exe"));
        assert!(!w.is_program_path("npx"));
        assert!(!Platform::Linux.is_program_path(r"bin\tool"));
    }

    #[test]
    fn a_path_of_another_platform_is_named_as_such() {
        let on_linux = Platform::Linux.foreign_path(r"C:\data").unwrap();
        assert_eq!(
            on_linux,
            "it is a Windows path, and this is linux: give a path of this system"
        );
        assert!(Platform::Linux.foreign_path("C:/data").is_some());
        assert_eq!(Platform::Linux.foreign_path("/data"), None);
        assert_eq!(Platform::Linux.foreign_path("data"), None);
        let on_windows = Platform::Windows.foreign_path("/srv/data").unwrap();
        assert!(
            on_windows.starts_with("it has no drive letter"),
            "{on_windows}"
        );
        assert_eq!(Platform::Windows.foreign_path(r"C:\data"), None);
        assert_eq!(Platform::Windows.foreign_path("C:/data"), None);
        assert_eq!(Platform::Windows.foreign_path(r"..\data"), None);
    }
}
