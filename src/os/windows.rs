//! The Windows half of `os`: console events, Job Objects, file identity
//! without inodes, PATHEXT.

use std::os::windows::fs::MetadataExt as _;
use std::path::Path;
use std::process::ExitStatus;

use process_wrap::tokio::{ChildWrapper, CommandWrap, CreationFlags, JobObject};
use tokio::signal::windows::{CtrlBreak, CtrlC, CtrlClose, CtrlShutdown};
use windows::Win32::System::Threading::CREATE_NO_WINDOW;

use super::{Event, Feature, Platform};

/// Ctrl+C, Ctrl+Break, the console window closing and the system shutting
/// down all stop. Windows has nothing like SIGHUP. A console close leaves
/// the process about 5 s (tokio keeps it alive while the handler runs); a
/// service gets its stop request from the service control manager instead.
pub(super) struct Events {
    c: CtrlC,
    brk: CtrlBreak,
    close: CtrlClose,
    shutdown: CtrlShutdown,
}

impl Events {
    pub(super) fn install() -> std::io::Result<Self> {
        use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close, ctrl_shutdown};
        Ok(Self {
            c: ctrl_c()?,
            brk: ctrl_break()?,
            close: ctrl_close()?,
            shutdown: ctrl_shutdown()?,
        })
    }

    pub(super) async fn next(&mut self) -> Event {
        tokio::select! {
            _ = self.c.recv() => Event::Stop("Ctrl+C"),
            _ = self.brk.recv() => Event::Stop("Ctrl+Break"),
            _ = self.close.recv() => Event::Stop("the console window closing"),
            _ = self.shutdown.recv() => Event::Stop("the system shutting down"),
        }
    }
}

/// Windows has exit codes only; a crash shows as an NTSTATUS code, which
/// reads better in hex (0xC0000005 is an access violation).
pub(super) fn describe_exit(status: ExitStatus) -> String {
    match status.code() {
        Some(c) if (c as u32) >= 0xC000_0000 => {
            format!("ended with status 0x{:08X} (a crash)", c as u32)
        }
        Some(c) => format!("exited with status {c}"),
        None => format!("ended abnormally ({status})"),
    }
}

/// std offers no stable file index on Windows; a directory made again at
/// the same path has another creation time, which is what is asked here.
pub(super) fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    (0, meta.creation_time())
}

/// What runs is decided by the extension, which the PATH lookup chose.
pub(super) fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// Windows bounds handles per process far above anything the callback
/// server holds; there is no per-process limit to raise.
pub(super) fn open_files_limit() -> Option<u64> {
    None
}

pub(super) fn stdin() -> Box<dyn tokio::io::AsyncRead + Send + Unpin> {
    Box::new(tokio::io::stdin())
}

/// An anonymous pipe cannot be waited on without a blocked read (it has
/// no overlapped mode), so a thread reads it. When the process at the
/// other end dies, the read fails with a broken pipe, which std reports as
/// the end of the file.
pub(super) async fn stdin_closed() -> String {
    super::stdin_closed_on_thread().await
}

/// A Job Object that ends every process in it when its last handle closes
/// (`KillOnDrop` asks for kill-on-close), so the tree goes even when the
/// sidecar is killed outright; no console window per process.
pub(super) fn contain(wrap: &mut CommandWrap) {
    wrap.wrap(JobObject);
    wrap.wrap(CreationFlags(CREATE_NO_WINDOW));
}

/// The Job Object's own `wait` waits for every process in the job; the
/// root alone is the process itself.
#[allow(unsafe_code)]
pub(super) async fn wait_root(child: &mut Box<dyn ChildWrapper>) -> std::io::Result<ExitStatus> {
    // SAFETY: waiting on the inner child only records its exit status in
    // that child; the Job Object around it keeps its handles and still
    // ends and waits for the job.
    match unsafe { child.as_mut().try_inner_child_mut() } {
        Some(inner) => inner.wait().await,
        None => child.wait().await,
    }
}

/// A windowless process has no console to send Ctrl+C to and Windows has
/// no SIGTERM: the caller ends the job instead.
pub(super) fn terminate(_child: &dyn ChildWrapper) -> bool {
    false
}

/// Windows has no SIGCHLD to inherit.
pub(super) fn restore_sigchld() {}

/// PATHEXT, as the PATH lookup applies it.
pub(super) fn program_extensions() -> Vec<String> {
    std::env::var("PATHEXT")
        .unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".into())
        .split(';')
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn unix_socket_client(
    _builder: reqwest::ClientBuilder,
    _path: &Path,
) -> Result<reqwest::ClientBuilder, String> {
    Err(Platform::CURRENT
        .lacks(Feature::UnixSocketHandler)
        .unwrap_or_default())
}
