//! Process trees on Linux: our own spawn, at the cost of a `vfork`, for a
//! program that leads a process group of its own and dies with the sidecar.
//!
//! std's `Command` starts a child with `posix_spawn` (a `vfork`: the child
//! borrows the daemon's memory until it calls `exec`), but only while it
//! needs no `pre_exec`; the parent-death signal (`PR_SET_PDEATHSIG`), which
//! is what makes a handler die with a sidecar killed by `kill -9`, needs
//! one, and then std copies the whole daemon with `fork` on every call
//! (BENCHMARKS.md, "Exec spawn": twice the CPU per call, and page faults
//! in the daemon after each fork). webhook's Go runtime sets the signal on
//! its vfork path; std cannot, so this file does what glibc's
//! `posix_spawn` does, with the two steps std lacks:
//!
//! - every string the child needs (path, argv, envp, cwd) is built before
//!   the clone, so the child allocates nothing;
//! - the child is started with `clone(CLONE_VM | CLONE_VFORK)` on a stack
//!   of its own, all signals blocked around it; it makes only raw system
//!   calls: `setpgid(0, 0)` (its own group, so a stop reaches what it
//!   starts), `prctl(PR_SET_PDEATHSIG, SIGKILL)`, a check that its parent
//!   is still the sidecar (which may have died before the `prctl`), the
//!   pipes on 0, 1 and 2, signal handlers back to their defaults and the
//!   mask emptied (as std does), `chdir`, `execve`. A failure is written,
//!   with its errno, into memory the parent reads once the clone returns
//!   (the parent is suspended until the child has exec'd or exited);
//! - the exit is waited for on a pidfd registered with tokio (a SIGCHLD
//!   stream where the kernel has no `pidfd_open`, before 5.3).
//!
//! The parent-death signal follows the *thread* that started the child, not
//! the process: a child started on one of tokio's blocking threads (which
//! end after idling) would be killed with that thread. So a spawn happens
//! on the calling thread only when that is the process's main thread,
//! which lives as long as the process (the daemon's runtime runs there:
//! src/commands.rs), and no other tree is alive (one call at a time: no
//! hand-over to wait for, as with std's `posix_spawn` before); otherwise
//! it goes to one of up to `SPAWN_THREADS` threads of our own that never
//! end, so that the runtime serves the other calls while a child is
//! between clone and `execve` (the parent is suspended until then, and on
//! a busy machine the child may wait for a CPU: BENCHMARKS.md, "Exec
//! spawn").
//!
//! Each unsafe block says what it relies on; ARCHITECTURE.md lists this
//! file among the crate's unsafe code ("Invariants").

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use tokio::io::unix::AsyncFd;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

/// Threads that start children for callers off the main thread: enough
/// that a burst of calls does not queue behind one `execve`, few enough
/// that an idle process keeps only what a burst once needed (each is a
/// parked thread with a small stack).
const SPAWN_THREADS: usize = 4;
/// The child's stack, used from the clone until `execve`: a few frames of
/// system calls. glibc's `posix_spawn` uses about as much.
const CHILD_STACK: usize = 64 * 1024;

/// A started program, the leader of its process group.
#[derive(Debug)]
pub(super) struct Tree {
    pid: libc::pid_t,
    /// Counted among the trees alive while it lives.
    _alive: Alive,
    /// Readable once the root has exited; `None` once handed to the reaper
    /// of `Drop`.
    exit: Option<Exit>,
    status: Option<ExitStatus>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

/// How the root's exit is learnt.
#[derive(Debug)]
enum Exit {
    Pidfd(AsyncFd<OwnedFd>),
    /// Kernels before 5.3: every SIGCHLD, then a non-blocking wait.
    Sigchld(tokio::signal::unix::Signal),
}

/// What the spawning thread hands back: the pid, its pidfd if the kernel
/// has them, and the parent's ends of the pipes.
struct Started {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

/// Everything the child needs, made before the clone.
struct Prepared {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    /// The child's ends: its stdin, stdout and stderr.
    child_fds: [OwnedFd; 3],
    /// The parent's ends.
    parent_fds: [OwnedFd; 3],
}

impl Tree {
    /// Starts `command` (program, arguments, environment changes, working
    /// directory; stdin, stdout and stderr are always pipes).
    pub(super) async fn spawn(command: &std::process::Command) -> io::Result<Self> {
        let prepared = prepare(command)?;
        // Counted from here (a cancelled spawn uncounts itself), so two
        // spawns in a row each see the other.
        let alive = Alive::enter();
        let started = if on_main_thread() && alive.alone {
            start(prepared)?
        } else {
            on_spawn_thread(prepared).await?
        };
        let pid = started.pid;
        // From here `Drop` ends and reaps the child whatever fails.
        let mut tree = Tree {
            pid,
            _alive: alive,
            exit: None,
            status: None,
            stdin: None,
            stdout: None,
            stderr: None,
        };
        tree.exit = Some(match started.pidfd {
            // SAFETY: an `OwnedFd` is open and names the same pidfd for
            // as long as it is owned, here by the `AsyncFd`.
            Some(fd) => Exit::Pidfd(unsafe {
                AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)?
            }),
            None => Exit::Sigchld(tokio::signal::unix::signal(
                tokio::signal::unix::SignalKind::child(),
            )?),
        });
        tree.stdin = Some(ChildStdin::from_std(std::process::ChildStdin::from(
            started.stdin,
        ))?);
        tree.stdout = Some(ChildStdout::from_std(std::process::ChildStdout::from(
            started.stdout,
        ))?);
        tree.stderr = Some(ChildStderr::from_std(std::process::ChildStderr::from(
            started.stderr,
        ))?);
        Ok(tree)
    }

    pub(super) fn id(&self) -> Option<u32> {
        match self.status {
            None => u32::try_from(self.pid).ok(),
            Some(_) => None,
        }
    }

    pub(super) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    pub(super) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    pub(super) fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// The root's exit status, reaping it, without waiting.
    pub(super) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let s = waitpid_nohang(self.pid)?;
        self.status = s;
        Ok(s)
    }

    /// Waits for the root to exit (cancel safe: nothing is lost when the
    /// future is dropped).
    pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(s);
            }
            match &mut self.exit {
                Some(Exit::Pidfd(fd)) => {
                    let mut ready = fd.readable_mut().await?;
                    // Readable means exited; only a wake-up with nothing
                    // to reap clears the readiness (the pidfd stays
                    // readable, and a cleared edge would never come back).
                    if let Some(s) = waitpid_nohang(self.pid)? {
                        self.status = Some(s);
                        return Ok(s);
                    }
                    ready.clear_ready();
                }
                Some(Exit::Sigchld(sig)) => {
                    sig.recv().await;
                }
                None => return Err(io::Error::other("the process was handed to its reaper")),
            }
        }
    }

    /// SIGTERM to the group.
    pub(super) fn terminate(&self) -> bool {
        // ESRCH (the group is gone) is the only expected error.
        // SAFETY: a system call on plain integers.
        unsafe { libc::killpg(self.pid, libc::SIGTERM) };
        true
    }

    /// SIGKILL to the group, and to the root if it left it and is not
    /// reaped (its pid is still ours then).
    pub(super) fn kill(&mut self) {
        // SAFETY: system calls on plain integers.
        unsafe {
            libc::killpg(self.pid, libc::SIGKILL);
            if self.status.is_none() {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for Tree {
    /// The last resort: what a caller did not stop ends now, and the root
    /// is reaped in the background (at once outside a runtime).
    fn drop(&mut self) {
        self.kill();
        if self.status.is_some() {
            return;
        }
        let pid = self.pid;
        match (self.exit.take(), tokio::runtime::Handle::try_current()) {
            (Some(Exit::Pidfd(fd)), Ok(handle)) => {
                handle.spawn(async move {
                    let _ = fd.readable().await;
                    reap(pid, libc::WNOHANG);
                });
            }
            _ => reap(pid, 0),
        }
    }
}

/// Trees alive in this process, spawns under way included.
static ALIVE: AtomicUsize = AtomicUsize::new(0);

/// One of `ALIVE`, for as long as it is held.
#[derive(Debug)]
struct Alive {
    /// No other tree was alive when it was counted.
    alone: bool,
}

impl Alive {
    fn enter() -> Self {
        Alive {
            alone: ALIVE.fetch_add(1, Ordering::SeqCst) == 0,
        }
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The main thread's id is the process's (it ends only with the process).
fn on_main_thread() -> bool {
    // SAFETY: system calls without arguments.
    unsafe { libc::gettid() == libc::getpid() }
}

/// The exit status of our unreaped child `pid`, if it has exited.
fn waitpid_nohang(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    let mut raw = 0;
    // SAFETY: waitpid writes only `raw`.
    match unsafe { libc::waitpid(pid, &mut raw, libc::WNOHANG) } {
        0 => Ok(None),
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(Some(ExitStatus::from_raw(raw))),
    }
}

fn reap(pid: libc::pid_t, flags: libc::c_int) {
    let mut raw = 0;
    // SAFETY: waitpid writes only `raw`.
    unsafe { libc::waitpid(pid, &mut raw, flags) };
}

fn cstring(s: &OsStr, what: &str) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} contains a NUL byte"),
        )
    })
}

/// The child's strings, as std would give them: the process's environment
/// with the command's changes, argv[0] the program as given.
fn prepare(command: &std::process::Command) -> io::Result<Prepared> {
    let program = command.get_program();
    let path = cstring(program, "the program's path")?;
    let mut argv = Vec::with_capacity(command.get_args().len() + 1);
    argv.push(path.clone());
    for a in command.get_args() {
        argv.push(cstring(a, "an argument")?);
    }
    let mut env: Vec<(OsString, Option<OsString>)> =
        std::env::vars_os().map(|(k, v)| (k, Some(v))).collect();
    for (k, v) in command.get_envs() {
        match env.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = v.map(OsStr::to_os_string),
            None => env.push((k.to_os_string(), v.map(OsStr::to_os_string))),
        }
    }
    let mut envp = Vec::with_capacity(env.len());
    for (k, v) in env {
        if let Some(v) = v {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(CString::new(kv).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an environment variable contains a NUL byte",
                )
            })?);
        }
    }
    let cwd = command
        .get_current_dir()
        .map(|d| cstring(d.as_os_str(), "the working directory"))
        .transpose()?;
    let (stdin_r, stdin_w) = pipe()?;
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    Ok(Prepared {
        path,
        argv,
        envp,
        cwd,
        child_fds: [stdin_r, stdout_w, stderr_w],
        parent_fds: [stdin_w, stdout_r, stderr_r],
    })
}

/// A close-on-exec pipe, (read, write), neither end on 0, 1 or 2 (the
/// child's `dup2`s must not overwrite one with another).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by no one else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor, which we own.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// What the child reports when it cannot exec: the step and its errno.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(C)]
struct Failure {
    step: Step,
    errno: libc::c_int,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(C)]
enum Step {
    None,
    ProcessGroup,
    DeathSignal,
    ParentGone,
    Stdio,
    Chdir,
    Exec,
}

impl Step {
    fn what(self) -> &'static str {
        match self {
            Step::None | Step::Exec => "starting it",
            Step::ProcessGroup => "giving it a process group of its own",
            Step::DeathSignal => "setting its parent-death signal",
            Step::ParentGone => "the sidecar is exiting",
            Step::Stdio => "connecting its stdin, stdout and stderr",
            Step::Chdir => "entering its working directory",
        }
    }
}

/// The child's view of its arguments: pointers into `Prepared`, valid
/// until `execve`, since the parent is suspended until then.
#[repr(C)]
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// argv for `/bin/sh` running `path`, for a file without a `#!` line
    /// (ENOEXEC), as `execvp` and so std do.
    sh_argv: *const *const libc::c_char,
    fds: [RawFd; 3],
    parent: libc::pid_t,
    /// SIGRTMAX, read by the parent.
    last_signal: libc::c_int,
    failure: Failure,
}

thread_local! {
    /// The child's stack, one per spawning thread, reused: the child is
    /// done with it when the clone returns.
    static STACK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Starts the child on this thread, which it will follow (the parent-death
/// signal): this thread must live as long as the sidecar.
fn start(p: Prepared) -> io::Result<Started> {
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut sh_argv = Vec::with_capacity(argv.len() + 1);
    sh_argv.push(c"/bin/sh".as_ptr());
    sh_argv.push(p.path.as_ptr());
    sh_argv.extend_from_slice(&argv[1..]);
    let mut args = ChildArgs {
        path: p.path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: p.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        sh_argv: sh_argv.as_ptr(),
        fds: [
            p.child_fds[0].as_raw_fd(),
            p.child_fds[1].as_raw_fd(),
            p.child_fds[2].as_raw_fd(),
        ],
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        last_signal: libc::SIGRTMAX(),
        failure: Failure {
            step: Step::None,
            errno: 0,
        },
    };
    let pid = STACK.with_borrow_mut(|stack| {
        if stack.len() < CHILD_STACK {
            stack.resize(CHILD_STACK, 0);
        }
        // The stack grows down on every Linux target Rust builds for but
        // HP PA-RISC, which it does not; 16-byte aligned as every ABI wants.
        let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
        clone_vfork(top as *mut libc::c_void, &mut args)
    })?;
    // The child has exec'd or exited: what it reported is final.
    let failure = args.failure;
    drop(p.child_fds);
    if failure.step != Step::None {
        reap(pid, 0);
        return Err(match failure.step {
            Step::ParentGone => io::Error::other("the sidecar is exiting"),
            Step::Exec => io::Error::from_raw_os_error(failure.errno),
            step => {
                let e = io::Error::from_raw_os_error(failure.errno);
                io::Error::new(e.kind(), format!("{}: {e}", step.what()))
            }
        });
    }
    // SAFETY: pidfd_open takes a pid and flags; the pid is our unreaped
    // child, so it names that process and no other.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // Any failure (ENOSYS before Linux 5.3, or a seccomp filter) falls back
    // to SIGCHLD.
    let pidfd = (pidfd >= 0).then(|| {
        // SAFETY: a new descriptor, owned by no one else.
        unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) }
    });
    let [stdin, stdout, stderr] = p.parent_fds;
    Ok(Started {
        pid,
        pidfd,
        stdin,
        stdout,
        stderr,
    })
}

/// The clone itself, every signal blocked around it so that no handler of
/// the sidecar runs in the child, which shares its memory.
fn clone_vfork(stack_top: *mut libc::c_void, args: &mut ChildArgs) -> io::Result<libc::pid_t> {
    // SAFETY: sigset_t is plain data, filled by sigfillset; the masks are
    // this thread's and restored before returning. `clone` runs `child`
    // on `stack_top`, which belongs to this thread and is not otherwise
    // used until the clone returns; with CLONE_VFORK this thread is
    // suspended until the child execs or exits, so `args` and everything
    // it points to outlive the child's use of them.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child,
            stack_top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (args as *mut ChildArgs).cast(),
        );
        let e = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 { Err(e) } else { Ok(pid) }
    }
}

/// Records why the child cannot exec, for the parent, and ends it.
fn fail(a: &mut ChildArgs, step: Step) -> ! {
    // SAFETY: errno is read from the calling thread's own slot; `_exit`
    // ends the child without running any of the sidecar's exit code.
    unsafe {
        a.failure = Failure {
            step,
            errno: *libc::__errno_location(),
        };
        libc::_exit(127)
    }
}

/// The child, between the clone and `execve`. It shares the sidecar's
/// memory and runs on a borrowed stack: system calls only, no allocation,
/// no lock, no panic, nothing returned but through `_exit`.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` of `start`, alive and not otherwise
    // touched while the parent is suspended.
    let a = unsafe { &mut *arg.cast::<ChildArgs>() };
    // SAFETY: each call is a single async-signal-safe system call on the
    // child's own process state, with pointers from `ChildArgs`.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            fail(a, Step::ProcessGroup);
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            fail(a, Step::DeathSignal);
        }
        // A sidecar that died before the prctl never sends the signal: the
        // child has been handed to another parent by then.
        if libc::getppid() != a.parent {
            a.failure = Failure {
                step: Step::ParentGone,
                errno: 0,
            };
            libc::_exit(127);
        }
        for (target, &fd) in a.fds.iter().enumerate() {
            // The pipes are above 2 (see `pipe`), so dup2 always copies and
            // clears close-on-exec on the copy.
            if libc::dup2(fd, target as libc::c_int) < 0 {
                fail(a, Step::Stdio);
            }
        }
        // Handlers of the sidecar must not run in the child before the
        // exec replaces them; ignored signals stay ignored, as across any
        // exec, but SIGPIPE, which Rust's runtime ignores, is back to its
        // default, as std's spawn does.
        let mut act: libc::sigaction = std::mem::zeroed();
        for sig in 1..=a.last_signal {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            if libc::sigaction(sig, std::ptr::null(), &mut act) != 0 {
                continue;
            }
            if sig == libc::SIGPIPE
                || (act.sa_sigaction != libc::SIG_DFL && act.sa_sigaction != libc::SIG_IGN)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        if !a.cwd.is_null() && libc::chdir(a.cwd) != 0 {
            fail(a, Step::Chdir);
        }
        libc::execve(a.path, a.argv, a.envp);
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(c"/bin/sh".as_ptr(), a.sh_argv, a.envp);
        }
        fail(a, Step::Exec)
    }
}

/// A spawn waiting for a thread.
type Job = Box<dyn FnOnce() + Send>;

/// The spawning threads: started as bursts need them, up to
/// `SPAWN_THREADS`, never ended.
struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
}

struct PoolState {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

static POOL: Pool = Pool {
    state: Mutex::new(PoolState {
        jobs: VecDeque::new(),
        threads: 0,
        idle: 0,
    }),
    work: Condvar::new(),
};

/// Starts the child on a spawning thread; if the caller has gone by then,
/// the child is ended and reaped there.
async fn on_spawn_thread(p: Prepared) -> io::Result<Started> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        if let Err(Ok(orphan)) = tx.send(start(p)) {
            // SAFETY: system calls on plain integers; the pid is our
            // unreaped child.
            unsafe { libc::killpg(orphan.pid, libc::SIGKILL) };
            reap(orphan.pid, 0);
        }
    });
    submit(job)?;
    rx.await
        .unwrap_or_else(|_| Err(io::Error::other("the spawning thread ended")))
}

fn submit(job: Job) -> io::Result<()> {
    let mut s = POOL.state.lock().unwrap_or_else(|e| e.into_inner());
    s.jobs.push_back(job);
    if s.idle == 0 && s.threads < SPAWN_THREADS {
        std::thread::Builder::new()
            .name("neko-spawn".into())
            .spawn(spawn_thread)?;
        s.threads += 1;
    } else {
        POOL.work.notify_one();
    }
    Ok(())
}

fn spawn_thread() {
    loop {
        let job = {
            let mut s = POOL.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = s.jobs.pop_front() {
                    break job;
                }
                s.idle += 1;
                s = POOL.work.wait(s).unwrap_or_else(|e| e.into_inner());
                s.idle -= 1;
            }
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn sh(script: &str) -> std::process::Command {
        let mut c = std::process::Command::new("/bin/sh");
        c.arg("-c").arg(script);
        c
    }

    #[tokio::test]
    async fn the_child_gets_its_pipes_env_cwd_and_a_group_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sh(
            "read line; echo \"$line $NEKO_X $(pwd)\"; echo oops >&2; cut -d' ' -f5 /proc/$$/stat; exit 3",
        );
        c.env("NEKO_X", "x-value").current_dir(dir.path());
        let mut t = Tree::spawn(&c).await.unwrap();
        let pid = t.id().unwrap();
        let mut stdin = t.take_stdin().unwrap();
        stdin.write_all(b"hello\n").await.unwrap();
        drop(stdin);
        let mut out = String::new();
        t.take_stdout()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        let mut err = String::new();
        t.take_stderr()
            .unwrap()
            .read_to_string(&mut err)
            .await
            .unwrap();
        let status = t.wait().await.unwrap();
        assert_eq!(status.code(), Some(3));
        let dir = dir.path().canonicalize().unwrap();
        let mut lines = out.lines();
        assert_eq!(
            lines.next().unwrap(),
            format!("hello x-value {}", dir.display())
        );
        assert_eq!(lines.next(), Some(pid.to_string().as_str()), "{out}");
        assert_eq!(err, "oops\n");
        assert_eq!(t.id(), None);
    }

    #[tokio::test]
    async fn an_exec_failure_is_the_exec_errno() {
        let c = std::process::Command::new("/no/such/program");
        let e = Tree::spawn(&c).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let dir = tempfile::tempdir().unwrap();
        let c = std::process::Command::new(dir.path());
        let e = Tree::spawn(&c).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    }

    #[tokio::test]
    async fn a_missing_cwd_says_so() {
        let mut c = sh("true");
        c.current_dir("/no/such/dir");
        let e = Tree::spawn(&c).await.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("entering its working directory: "),
            "{e}"
        );
    }

    #[tokio::test]
    async fn kill_ends_the_whole_group() {
        let mut t = Tree::spawn(&sh("sleep 300 & echo $!; wait")).await.unwrap();
        let mut out = t.take_stdout().unwrap();
        let mut buf = [0u8; 32];
        let n = out.read(&mut buf).await.unwrap();
        let grandchild: i32 = std::str::from_utf8(&buf[..n])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        t.kill();
        let status = t.wait().await.unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        // The grandchild is not ours to reap; it is gone once the kernel
        // has delivered the signal (its parent, the shell, reaps it or it
        // is handed to init).
        let gone = (0..500).any(|_| {
            let alive = std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .is_ok_and(|s| !s.contains(") Z "));
            if alive {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            !alive
        });
        assert!(gone, "the grandchild {grandchild} is still running");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_spawns_go_through_the_spawning_threads() {
        let keep = Tree::spawn(&sh("sleep 300")).await.unwrap();
        let calls = (0..16).map(|i| async move {
            let mut t = Tree::spawn(&sh(&format!("echo {i}"))).await.unwrap();
            let mut out = String::new();
            t.take_stdout()
                .unwrap()
                .read_to_string(&mut out)
                .await
                .unwrap();
            assert!(t.wait().await.unwrap().success());
            out
        });
        let outs = futures_util::future::join_all(calls).await;
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(o.trim(), i.to_string());
        }
        drop(keep);
    }
}
