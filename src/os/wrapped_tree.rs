//! Process trees where the sidecar does not spawn by itself (every
//! platform but Linux): process-wrap (the watchexec project's crate, which
//! rmcp's own child-process transport uses too). On Unix the tree is a
//! process group the program leads; on Windows it is a Job Object with
//! kill-on-close, so even a sidecar killed outright leaves nothing behind,
//! and no console window opens (`CREATE_NO_WINDOW`). Linux has its own
//! spawn (`linux_spawn.rs`), for the parent-death signal without a `fork`.

use std::io;
use std::process::{ExitStatus, Stdio};

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

use super::imp;

#[derive(Debug)]
pub(super) struct Tree {
    child: Box<dyn ChildWrapper>,
}

impl Tree {
    pub(super) async fn spawn(mut command: Command) -> io::Result<Self> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut wrap = CommandWrap::from(command);
        imp::contain(&mut wrap);
        wrap.wrap(KillOnDrop);
        Ok(Self {
            child: wrap.spawn()?,
        })
    }

    pub(super) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    pub(super) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin().take()
    }

    pub(super) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout().take()
    }

    pub(super) fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr().take()
    }

    pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
        imp::wait_root(&mut self.child).await
    }

    pub(super) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    pub(super) fn terminate(&self) -> bool {
        imp::terminate(self.child.as_ref())
    }

    pub(super) fn kill(&mut self) {
        // The only expected error is that nothing is left to end.
        let _ = self.child.start_kill();
    }
}
