//! The Unix half of `os`: signals, process groups (through process-wrap,
//! off Linux), inodes, the open-files limit, pipes on the reactor,
//! Unix-socket http clients. What Linux alone has is in `linux.rs` and
//! `linux_spawn.rs`.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::ExitStatus;

#[cfg(not(target_os = "linux"))]
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::Event;

/// SIGTERM and SIGINT stop, SIGHUP reloads.
pub(super) struct Events {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Events {
    pub(super) fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    pub(super) async fn next(&mut self) -> Event {
        tokio::select! {
            _ = self.term.recv() => Event::Stop("SIGTERM"),
            _ = self.int.recv() => Event::Stop("SIGINT"),
            _ = self.hup.recv() => Event::Reload("SIGHUP"),
        }
    }
}

pub(super) fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}{}", signal_name(s)),
        (None, None) => format!("ended abnormally ({status})"),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        6 => " (SIGABRT)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

pub(super) fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

pub(super) fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Go's runtime and most servers raise the soft limit to the hard one too;
/// systemd starts services with a soft limit of 1024.
pub(super) fn open_files_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
        limit = getrlimit(Resource::Nofile);
    }
    limit.current
}

/// tokio's `stdin()` reads on a blocking thread that nothing can
/// interrupt, so after SIGTERM the runtime would wait for the next line
/// before the process could exit; a pipe is registered with the reactor
/// instead. A terminal or a file keeps `stdin()`.
pub(super) fn stdin() -> Box<dyn tokio::io::AsyncRead + Send + Unpin> {
    match stdin_pipe() {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdin()),
    }
}

/// stdin as a pipe on the reactor; `None` when it is not a pipe.
fn stdin_pipe() -> Option<tokio::net::unix::pipe::Receiver> {
    use std::os::fd::AsFd as _;
    std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok())
}

/// A pipe is waited on by the reactor; anything else (a terminal, a file,
/// `/dev/null`) by a thread.
pub(super) async fn stdin_closed() -> String {
    match stdin_pipe() {
        Some(pipe) => super::read_to_end_of(pipe).await,
        None => super::stdin_closed_on_thread().await,
    }
}

/// The program leads a process group of its own, so one signal reaches
/// everything it starts (Linux spawns by itself: `linux_spawn.rs`).
#[cfg(not(target_os = "linux"))]
pub(super) fn contain(wrap: &mut CommandWrap) {
    wrap.wrap(ProcessGroup::leader());
}

/// The group's `wait` reaps the leader and then only those of our own
/// children that are in the group; the leader's children are not ours, so
/// it never waits for them.
#[cfg(not(target_os = "linux"))]
pub(super) async fn wait_root(child: &mut Box<dyn ChildWrapper>) -> std::io::Result<ExitStatus> {
    child.wait().await
}

#[cfg(not(target_os = "linux"))]
pub(super) fn terminate(child: &dyn ChildWrapper) -> bool {
    // ESRCH (the group is gone) is the only expected error: then there is
    // nothing left to ask.
    let _ = child.signal(libc_sigterm());
    true
}

#[cfg(not(target_os = "linux"))]
fn libc_sigterm() -> i32 {
    rustix::process::Signal::TERM.as_raw()
}

/// SIGCHLD ignored (inherited) becomes the default again; a handler
/// (tokio's, for instance) is left alone.
#[allow(unsafe_code)]
pub(super) fn restore_sigchld() {
    // SAFETY: sigaction reads and writes this process's disposition of one
    // signal, with structures zeroed and then filled here.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut old) != 0 {
            return;
        }
        if old.sa_sigaction == libc::SIG_IGN {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            libc::sigaction(libc::SIGCHLD, &dfl, std::ptr::null_mut());
        }
    }
}

/// Unix runs a file by its execute bit, whatever its name.
pub(super) fn program_extensions() -> Vec<String> {
    Vec::new()
}

pub(super) fn unix_socket_client(
    builder: reqwest::ClientBuilder,
    path: &Path,
) -> Result<reqwest::ClientBuilder, String> {
    Ok(builder.unix_socket(path.to_path_buf()))
}
