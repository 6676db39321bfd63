//! Process trees: a program started with everything it will start in turn
//! held together, so that a stop reaches all of it; and the lookup of a
//! program on PATH, as the platform's own shell would do it, remembered
//! for the spawns of every call.
//!
//! On Unix the tree is a process group the program leads; on Windows a Job
//! Object with kill-on-close. No tree outlives the sidecar, even one killed
//! outright: on Linux the program gets SIGKILL when the sidecar dies
//! (`PR_SET_PDEATHSIG`), set by our own spawn (`linux_spawn.rs`, which
//! keeps std's `vfork` speed that a `pre_exec` would lose); on Windows the
//! Job Object ends with the sidecar's last handle to it. Elsewhere
//! process-wrap starts the tree (`wrapped_tree.rs`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Mutex;

use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

#[cfg(target_os = "linux")]
use super::linux_spawn::Tree;
#[cfg(not(target_os = "linux"))]
use super::wrapped_tree::Tree;
use super::{Platform, imp};

/// A started program and the processes it starts.
#[derive(Debug)]
pub(crate) struct ProcessTree {
    tree: Tree,
}

impl ProcessTree {
    /// Starts `command` at the root of a tree of its own, its stdin, stdout
    /// and stderr pipes (whatever `command` says of them). Dropping the
    /// value without `kill` ends the tree too, as a last resort.
    pub(crate) async fn spawn(command: Command) -> io::Result<Self> {
        #[cfg(target_os = "linux")]
        let tree = Tree::spawn(command.as_std()).await?;
        #[cfg(not(target_os = "linux"))]
        let tree = Tree::spawn(command).await?;
        Ok(Self { tree })
    }

    /// The root process's id, while it has not been reaped.
    pub(crate) fn id(&self) -> Option<u32> {
        self.tree.id()
    }

    pub(crate) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.tree.take_stdin()
    }

    pub(crate) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.tree.take_stdout()
    }

    pub(crate) fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.tree.take_stderr()
    }

    /// Waits for the root process to exit (not for what it started: a
    /// background job may outlive it until `kill`).
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.tree.wait().await
    }

    /// The root's exit status if it has exited, without waiting.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.tree.try_wait()
    }

    /// Asks the whole tree to stop (SIGTERM to the group). Returns false
    /// where there is no such request to make (Windows has no signal a
    /// windowless process can be asked to stop by): the caller then kills.
    pub(crate) fn terminate(&self) -> bool {
        self.tree.terminate()
    }

    /// Ends the whole tree now (SIGKILL to the group; the Job Object
    /// terminated), the root's exit included or not; a tree already gone
    /// is no error.
    pub(crate) fn kill(&mut self) {
        self.tree.kill();
    }
}

/// Programs already looked up, by (program, PATH, cwd): a call's spawn
/// then costs one `stat` instead of one per PATH directory. Bounded: a
/// full cache is emptied (the programs of a config are few).
struct Resolved {
    map: Mutex<Option<Cache>>,
}

/// (program, PATH, cwd) → the file found.
type Cache = HashMap<(String, Option<OsString>, PathBuf), PathBuf>;

const RESOLVED_MAX: usize = 256;

static RESOLVED: Resolved = Resolved::new();

impl Resolved {
    const fn new() -> Self {
        Self {
            map: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Cache>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resolve(
        &self,
        program: &str,
        cwd: &Path,
        path_var: Option<&OsStr>,
    ) -> Result<PathBuf, String> {
        let path_now = path_var
            .map(OsStr::to_os_string)
            .or_else(|| std::env::var_os("PATH"));
        let key = (program.to_string(), path_now, cwd.to_path_buf());
        let known = self.lock().as_ref().and_then(|m| m.get(&key).cloned());
        if let Some(found) = known.filter(|p| super::is_executable(p)) {
            return Ok(found);
        }
        let found = resolve_program(program, cwd, key.1.as_deref())?;
        let mut cache = self.lock();
        let map = cache.get_or_insert_with(HashMap::new);
        if map.len() >= RESOLVED_MAX {
            map.clear();
        }
        map.insert(key, found.clone());
        Ok(found)
    }

    fn forget(&self) {
        if let Some(map) = self.lock().as_mut() {
            map.clear();
        }
    }
}

/// `resolve_program`, remembered: the answer is looked up again when PATH
/// (the manifest's or the sidecar's) is another, when the file found last
/// time is gone or no longer runnable, and after every manifest load
/// (`forget_resolved_programs`), which is when a program newly put earlier
/// on PATH is found.
pub(crate) fn resolve_program_cached(
    program: &str,
    cwd: &Path,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, String> {
    RESOLVED.resolve(program, cwd, path_var)
}

/// Empties the cache of `resolve_program_cached` (a manifest was loaded).
pub(crate) fn forget_resolved_programs() {
    RESOLVED.forget();
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
    fn a_remembered_program_is_looked_up_again_once_gone_or_after_a_load() {
        let first = tempfile::tempdir().unwrap();
        let second = tempfile::tempdir().unwrap();
        let name = if cfg!(windows) {
            "tool-c.cmd"
        } else {
            "tool-c"
        };
        let make = |dir: &Path| {
            let p = dir.join(name);
            std::fs::write(&p, "").unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            p
        };
        let path = std::env::join_paths([first.path(), second.path()]).unwrap();
        let in_second = make(second.path());
        // A cache of the test's own: manifest loads of other tests empty
        // the process's.
        let cache = Resolved::new();
        let found = |path| cache.resolve("tool-c", second.path(), Some(path));
        assert_eq!(found(&path).unwrap(), in_second);
        // Found earlier on PATH now, but remembered until a load.
        let in_first = make(first.path());
        assert_eq!(found(&path).unwrap(), in_second);
        cache.forget();
        assert_eq!(found(&path).unwrap(), in_first);
        // Gone: looked up again at once.
        std::fs::remove_file(&in_first).unwrap();
        assert_eq!(found(&path).unwrap(), in_second);
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
