//! Process trees where the sidecar does not spawn by itself (every
//! platform but Linux): process-wrap (the watchexec project's crate, which
//! rmcp's own child-process transport uses too). On Unix the tree is a
//! process group the program leads; on Windows it is a Job Object with
//! kill-on-close, so even a sidecar killed outright leaves nothing behind,
//! and no console window opens (`CREATE_NO_WINDOW`). Linux has its own
//! spawn (`linux_spawn.rs`), for the parent-death signal without a `fork`.

use std::io;
use std::process::ExitStatus;

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

use super::imp;
use super::process::{SpawnSpec, Stdio};

#[derive(Debug)]
pub(super) struct Tree {
    child: Box<dyn ChildWrapper>,
}

impl Tree {
    /// Starts `spec` (already validated by `ProcessTree::spawn`): every
    /// part of it is given to std's `Command`, the environment as the
    /// same changes in the same order (std compares names as the platform
    /// does: without case on Windows).
    pub(super) async fn spawn(spec: &SpawnSpec) -> io::Result<Self> {
        super::restore_sigchld();
        let mut command = Command::new(spec.get_program());
        command.args(spec.get_args());
        if spec.get_env_clear() {
            command.env_clear();
        }
        for (k, v) in spec.get_env_changes() {
            match v {
                Some(v) => command.env(k, v),
                None => command.env_remove(k),
            };
        }
        if let Some(dir) = spec.get_cwd() {
            command.current_dir(dir);
        }
        let [i, o, e] = spec.get_stdio().map(|s| match s {
            Stdio::Pipe => std::process::Stdio::piped,
            Stdio::Null => std::process::Stdio::null,
        });
        command.stdin(i()).stdout(o()).stderr(e());
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
