//! Process trees: a program started with everything it will start in turn
//! held together, so that a stop reaches all of it; what to start, spelled
//! out ([`SpawnSpec`]); and the lookup of a program on PATH, as the
//! platform's own shell would do it, remembered for the spawns of every
//! call.
//!
//! On Unix the tree is a process group the program leads; on Windows a Job
//! Object with kill-on-close. On Linux our own spawn (`linux_spawn.rs`,
//! which keeps std's `vfork` speed that a `pre_exec` would lose) gives the
//! program the parent-death signal (`PR_SET_PDEATHSIG`), and `neko-sidecar
//! run` starts a guardian (`linux_guard.rs`) that kills every group still
//! alive when the sidecar dies. Elsewhere process-wrap starts the tree
//! (`wrapped_tree.rs`).
//!
//! What holds when the sidecar is killed outright (`kill -9`), exactly:
//! - Windows: the whole Job Object ends (kill-on-close), whatever left it
//!   by breaking away only.
//! - Linux, `neko-sidecar run`: the root gets SIGKILL from the kernel, and
//!   the guardian sends SIGKILL to each tree's process group; a process
//!   that left its group (`setsid`, `setpgid`: a program that daemonizes
//!   itself) or that runs as another user (a setuid program) is not
//!   reached, nor is anything if the guardian itself was killed first.
//!   Under systemd the unit's cgroup ends all of them anyway.
//! - macOS and the other Unix systems: nothing ends the tree.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Mutex;

use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

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
    /// Starts `spec` at the root of a tree of its own. A string with a NUL
    /// byte (which no program can be given) or an environment variable name
    /// that is empty or holds `=` is refused before anything starts, on
    /// every platform. Dropping the value without `kill` ends the tree too,
    /// as a last resort; so does dropping the future of a spawn under way.
    pub(crate) async fn spawn(spec: &SpawnSpec) -> io::Result<Self> {
        spec.validate()?;
        let tree = Tree::spawn(spec).await?;
        Ok(Self { tree })
    }

    /// The root process's id, until it has exited.
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
    /// background job may outlive it until `kill`). On Unix the root is
    /// not reaped yet: its id stays ours, so that `terminate` and `kill`
    /// reach its group and nothing else; `kill` (or the drop) reaps it.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.tree.wait().await
    }

    /// The root's exit status if it has exited, without waiting.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.tree.try_wait()
    }

    /// Asks the whole tree to stop (SIGTERM to the group). Returns false
    /// where there is no such request to make (Windows has no signal a
    /// windowless process can be asked to stop by; on Linux, a root
    /// already reaped by `kill`, whose id may be another's by now): the
    /// caller then kills.
    pub(crate) fn terminate(&self) -> bool {
        self.tree.terminate()
    }

    /// Ends the whole tree now (SIGKILL to the group; the Job Object
    /// terminated), the root's exit included or not, and reaps the root if
    /// it has exited; a tree already gone is no error. On Linux the group
    /// is signalled only while its root is not reaped, so a stop never
    /// reaches a process that was given the same id since.
    pub(crate) fn kill(&mut self) {
        self.tree.kill();
    }
}

/// Where one of a child's standard streams goes. The handlers of today
/// take three pipes; the null device is spelled out (and tested) so that a
/// caller wanting none says so rather than leaving a pipe unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Stdio {
    /// A pipe whose other end the caller takes (`take_stdin`, ...).
    Pipe,
    /// The null device.
    Null,
}

/// What to start, spelled out: the program, its arguments, its environment
/// (the sidecar's own with changes, or only what is given), its working
/// directory, its stdin, stdout and stderr. Every platform's spawn honours
/// all of it; there is nothing else to set, so nothing can be set and
/// ignored (std's `Command` has settings our Linux spawn would not read).
#[derive(Debug, Clone)]
pub(crate) struct SpawnSpec {
    program: OsString,
    args: Vec<OsString>,
    /// Start from an empty environment instead of the sidecar's.
    env_clear: bool,
    /// Changes, in order: a value set, or `None` for a variable removed.
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    stdio: [Stdio; 3],
}

#[allow(dead_code)] // Each caller uses some of the setters.
impl SpawnSpec {
    /// `program`, run as it is named (a path, or a name the platform looks
    /// up: see `resolve_program`), with the sidecar's environment and
    /// working directory and three pipes.
    pub(crate) fn new(program: impl Into<OsString>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env_clear: false,
            env: Vec::new(),
            cwd: None,
            stdio: [Stdio::Pipe; 3],
        }
    }

    pub(crate) fn arg(&mut self, arg: impl Into<OsString>) -> &mut Self {
        self.args.push(arg.into());
        self
    }

    pub(crate) fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(
        &mut self,
        args: I,
    ) -> &mut Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets a variable (over the sidecar's value, or an earlier change).
    pub(crate) fn env(
        &mut self,
        key: impl Into<OsString>,
        value: impl Into<OsString>,
    ) -> &mut Self {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    pub(crate) fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Removes a variable the child would otherwise get.
    pub(crate) fn env_remove(&mut self, key: impl Into<OsString>) -> &mut Self {
        self.env.push((key.into(), None));
        self
    }

    /// The child starts from an empty environment: it gets only the
    /// variables set on this spec (before or after this call), on every
    /// platform.
    pub(crate) fn env_clear(&mut self) -> &mut Self {
        self.env_clear = true;
        self.env.retain(|(_, v)| v.is_some());
        self
    }

    pub(crate) fn cwd(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.cwd = Some(dir.into());
        self
    }

    pub(crate) fn stdin(&mut self, s: Stdio) -> &mut Self {
        self.stdio[0] = s;
        self
    }

    pub(crate) fn stdout(&mut self, s: Stdio) -> &mut Self {
        self.stdio[1] = s;
        self
    }

    pub(crate) fn stderr(&mut self, s: Stdio) -> &mut Self {
        self.stdio[2] = s;
        self
    }

    pub(crate) fn get_program(&self) -> &OsStr {
        &self.program
    }

    pub(crate) fn get_args(&self) -> &[OsString] {
        &self.args
    }

    pub(crate) fn get_env_clear(&self) -> bool {
        self.env_clear
    }

    /// The changes to the environment, in the order given.
    pub(crate) fn get_env_changes(&self) -> &[(OsString, Option<OsString>)] {
        &self.env
    }

    pub(crate) fn get_cwd(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    pub(crate) fn get_stdio(&self) -> [Stdio; 3] {
        self.stdio
    }

    /// Refuses what no platform can pass on unchanged: a NUL byte in any
    /// string (the C strings of `execve` and `CreateProcess` end there, and
    /// std would put `<string-with-nul>` in its place), an environment
    /// variable name that is empty or holds `=`. The error names the
    /// string.
    pub(crate) fn validate(&self) -> io::Result<()> {
        fn nul(s: &OsStr) -> bool {
            s.as_encoded_bytes().contains(&0)
        }
        let refuse = |what: String| {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} contains a NUL byte, which no program can be given"),
            ))
        };
        if self.program.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the program's name is empty",
            ));
        }
        if nul(&self.program) {
            return refuse("the program's name".into());
        }
        if let Some(i) = self.args.iter().position(|a| nul(a)) {
            return refuse(format!("argument {}", i + 1));
        }
        if self.cwd.as_ref().is_some_and(|d| nul(d.as_os_str())) {
            return refuse("the working directory".into());
        }
        for (k, v) in &self.env {
            let name = k.to_string_lossy();
            if k.is_empty() || k.as_encoded_bytes().contains(&b'=') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("environment variable name \"{name}\" is empty or holds `=`"),
                ));
            }
            if nul(k) {
                return refuse(format!(
                    "environment variable name \"{}\"",
                    name.replace('\0', "\\0")
                ));
            }
            if v.as_deref().is_some_and(nul) {
                return refuse(format!("environment variable `{name}`"));
            }
        }
        Ok(())
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
    fn a_nul_byte_or_a_bad_variable_name_is_refused_before_anything_starts() {
        let refused = |spec: &SpawnSpec| spec.validate().unwrap_err().to_string();
        let mut s = SpawnSpec::new("prog");
        s.arg("fine").arg("a\u{0}b");
        assert_eq!(
            refused(&s),
            "argument 2 contains a NUL byte, which no program can be given"
        );
        assert!(refused(&SpawnSpec::new("p\u{0}")).starts_with("the program's name"));
        let mut s = SpawnSpec::new("prog");
        s.cwd("a\u{0}b");
        assert!(refused(&s).starts_with("the working directory"));
        let mut s = SpawnSpec::new("prog");
        s.env("A", "x\u{0}");
        assert!(refused(&s).starts_with("environment variable `A`"));
        let mut s = SpawnSpec::new("prog");
        s.env("A=B", "x");
        assert!(
            refused(&s).contains("is empty or holds `=`"),
            "{}",
            refused(&s)
        );
        assert!(SpawnSpec::new("").validate().is_err());
        let mut s = SpawnSpec::new("prog");
        s.arg("ok").env("A", "1").env_remove("B").cwd("dir");
        s.validate().unwrap();
    }

    /// The same spec means the same child on every platform: program,
    /// arguments, a cleared environment with what is set, the working
    /// directory, a null stdin and stderr.
    #[tokio::test]
    async fn every_part_of_the_spec_reaches_the_child() {
        use tokio::io::AsyncReadExt as _;
        let dir = tempfile::tempdir().unwrap();
        let mut spec = if cfg!(windows) {
            let mut s = SpawnSpec::new("cmd");
            s.args(["/d", "/c", "echo %NEKO_A%^|%NEKO_GONE%& cd"]);
            s
        } else {
            let mut s = SpawnSpec::new("/bin/sh");
            // HOME, which the tests' environment has (dash would give
            // PATH a default of its own).
            s.args([
                "-c",
                "echo \"$NEKO_A|${NEKO_GONE-unset}|${HOME-unset}\"; pwd",
            ]);
            s
        };
        spec.env("NEKO_GONE", "x")
            .env_clear()
            .env("NEKO_A", "a b")
            .env("NEKO_GONE", "y")
            .env_remove("NEKO_GONE")
            .cwd(dir.path())
            .stdin(Stdio::Null)
            .stderr(Stdio::Null);
        let mut t = ProcessTree::spawn(&spec).await.unwrap();
        assert!(t.take_stdin().is_none() && t.take_stderr().is_none());
        let mut out = String::new();
        t.take_stdout()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        assert!(t.wait().await.unwrap().success());
        t.kill();
        let mut lines = out.lines();
        let unset = if cfg!(windows) {
            "a b|%NEKO_GONE%"
        } else {
            "a b|unset|unset"
        };
        assert_eq!(lines.next(), Some(unset), "{out}");
        let cwd = std::path::PathBuf::from(lines.next().unwrap().trim());
        assert_eq!(
            cwd.canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
    }

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
