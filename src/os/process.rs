//! Process trees: a program started with everything it will start in turn
//! held together, so that a stop reaches all of it; and the lookup of a
//! program on PATH, as the platform's own shell would do it.
//!
//! Built on `process-wrap` (the watchexec project's crate, which rmcp's own
//! child-process transport uses too). On Unix the tree is a process group
//! the program leads, and on Linux the program also gets SIGKILL when the
//! sidecar dies (`PR_SET_PDEATHSIG`); on Windows it is a Job Object with
//! kill-on-close, so even a sidecar killed outright leaves nothing behind,
//! and no console window opens (`CREATE_NO_WINDOW`).

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

use super::{Platform, imp};

/// A started program and the processes it starts.
#[derive(Debug)]
pub(crate) struct ProcessTree {
    child: Box<dyn ChildWrapper>,
}

impl ProcessTree {
    /// Starts `command` at the root of a tree of its own. Dropping the
    /// value without `kill` ends the tree too, as a last resort.
    pub(crate) fn spawn(command: Command) -> io::Result<Self> {
        let mut wrap = CommandWrap::from(command);
        imp::contain(&mut wrap);
        wrap.wrap(KillOnDrop);
        Ok(Self {
            child: wrap.spawn()?,
        })
    }

    /// The root process's id, while it has not been reaped.
    pub(crate) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    pub(crate) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin().take()
    }

    pub(crate) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout().take()
    }

    pub(crate) fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr().take()
    }

    /// Waits for the root process to exit (not for what it started: a
    /// background job may outlive it until `kill`).
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        imp::wait_root(&mut self.child).await
    }

    /// The root's exit status if it has exited, without waiting.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Asks the whole tree to stop (SIGTERM to the group). Returns false
    /// where there is no such request to make (Windows has no signal a
    /// windowless process can be asked to stop by): the caller then kills.
    pub(crate) fn terminate(&self) -> bool {
        imp::terminate(self.child.as_ref())
    }

    /// Ends the whole tree now (SIGKILL to the group; the Job Object
    /// terminated), the root's exit included or not; a tree already gone
    /// is no error.
    pub(crate) fn kill(&mut self) {
        // The only expected error is that nothing is left to end.
        let _ = self.child.start_kill();
    }
}

/// A program looked up for spawning.
pub(crate) fn resolve_program(
    program: &str,
    cwd: &Path,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, String> {
    let platform = Platform::CURRENT;
    if platform.is_program_path(program) {
        let p = cwd.join(program);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{} does not exist", p.display()))
        };
    }
    let path_var = path_var
        .map(OsStr::to_os_string)
        .or_else(|| std::env::var_os("PATH"));
    which::which_in(program, path_var.as_ref(), cwd).map_err(|_| {
        let dirs: Vec<String> = path_var
            .as_ref()
            .map(|p| {
                std::env::split_paths(p)
                    .map(|d| d.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let exts = imp::program_extensions();
        let exts = if exts.is_empty() {
            String::new()
        } else {
            format!(", with the extensions {} (PATHEXT)", exts.join(" "))
        };
        if dirs.is_empty() {
            format!("not found: PATH is empty or unset{exts}")
        } else {
            format!("not found on PATH (looked in {}{exts})", dirs.join(", "))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_says_where_it_was_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = std::env::join_paths([dir.path()]).unwrap();
        let e = resolve_program("no-such-program-here", dir.path(), Some(&path)).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "not found on PATH (looked in {}",
                dir.path().display()
            )),
            "{e}"
        );
    }

    #[test]
    fn a_program_on_the_given_path_is_found_there() {
        let dir = tempfile::tempdir().unwrap();
        let name = if cfg!(windows) { "tool.cmd" } else { "tool" };
        let p = dir.path().join(name);
        std::fs::write(&p, "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([dir.path()]).unwrap();
        let found = resolve_program("tool", dir.path(), Some(&path)).unwrap();
        assert_eq!(found, p);
    }
}
