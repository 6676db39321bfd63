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
//! - what to start is a `SpawnSpec`, read whole: every string the child
//!   needs (path, argv, envp, cwd) is built from it before the clone, byte
//!   for byte (a NUL byte is refused, never replaced), so the child
//!   allocates nothing;
//! - the child is started with `clone(CLONE_VM | CLONE_VFORK)` on a stack
//!   of its own, all signals blocked around it; it makes only raw system
//!   calls: `setpgid(0, 0)` (its own group, so a stop reaches what it
//!   starts), `prctl(PR_SET_PDEATHSIG, SIGKILL)`, a check that its parent
//!   is still the sidecar (which may have died before the `prctl`), the
//!   pipes on 0, 1 and 2, signal handlers back to their defaults and the
//!   mask emptied (as std does; with the raw `rt_sigaction` and
//!   `rt_sigprocmask` system calls, since musl's `sigaction` takes a lock
//!   in memory the child shares with the sidecar), its pid in the
//!   guardian's table (`linux_guard.rs`), a last look at whether the
//!   caller still wants it, `chdir`, `execve`. A failure is written,
//!   with its errno, into memory the parent reads once the clone returns
//!   (the parent is suspended until the child has exec'd or exited);
//! - the exit is waited for on a pidfd registered with tokio (a SIGCHLD
//!   stream where the kernel has no `pidfd_open`, before 5.3), and learnt
//!   with `waitid(WNOWAIT)`, which leaves the root a zombie: its pid, which
//!   is its group's id, stays ours until the group has been killed and the
//!   root is reaped, so a signal to the group never reaches a process that
//!   was given the same pid since;
//! - a spawn whose caller has gone (its future dropped) starts nothing if
//!   its job had not begun, stops its child before `execve` if it had, and
//!   otherwise kills and reaps the child it made.
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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tokio::io::unix::AsyncFd;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use super::linux_guard::Slot;
use super::process::{SpawnSpec, Stdio};

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
    /// The root's exit, once learnt (it is a zombie until `reaped`).
    status: Option<ExitStatus>,
    /// The root has been reaped: its pid (and so its group's id) may name
    /// another process now, and is never signalled again.
    reaped: bool,
    /// SIGKILL went to the group: once the root has exited, nothing of
    /// the group is left to signal and it may be reaped.
    killed: bool,
    /// The group's entry in the guardian's table, emptied before the
    /// root is reaped.
    slot: Option<Slot>,
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
/// has them, the parent's ends of the pipes, the guardian's slot. It owns
/// the child: dropped before it becomes a `Tree` (its caller gone), it
/// kills the group and reaps the child.
struct Started {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    fds: [Option<OwnedFd>; 3],
    slot: Option<Slot>,
    /// Handed over to a `Tree`: nothing left to end.
    handed_over: bool,
}

impl Started {
    /// The parts, for a `Tree` that from then on owns the child.
    fn hand_over(
        mut self,
    ) -> (
        libc::pid_t,
        Option<OwnedFd>,
        [Option<OwnedFd>; 3],
        Option<Slot>,
    ) {
        self.handed_over = true;
        (
            self.pid,
            self.pidfd.take(),
            std::mem::take(&mut self.fds),
            self.slot.take(),
        )
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.handed_over {
            return;
        }
        // SAFETY: system calls on plain integers; the pid is our unreaped
        // child, so it and its group are the ones we started.
        unsafe {
            libc::killpg(self.pid, libc::SIGKILL);
            libc::kill(self.pid, libc::SIGKILL);
        }
        drop(self.slot.take());
        // A spawning thread (the caller had gone when the send failed) has
        // no runtime to register the pidfd with: it reaps at once.
        let exit = match (self.pidfd.take(), tokio::runtime::Handle::try_current()) {
            (Some(fd), Ok(_)) => Exit::from_pidfd(fd).ok(),
            _ => None,
        };
        reap_later(self.pid, exit);
    }
}

impl Exit {
    fn from_pidfd(fd: OwnedFd) -> io::Result<Exit> {
        // SAFETY: an `OwnedFd` is open and names the same pidfd for as
        // long as it is owned, here by the `AsyncFd`.
        Ok(Exit::Pidfd(unsafe {
            AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)?
        }))
    }
}

/// Everything the child needs, made before the clone.
struct Prepared {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    /// The child's ends: its stdin, stdout and stderr.
    child_fds: [OwnedFd; 3],
    /// The parent's ends (none for the null device).
    parent_fds: [Option<OwnedFd>; 3],
}

impl Tree {
    /// Starts `spec` (already validated by `ProcessTree::spawn`).
    pub(super) async fn spawn(spec: &SpawnSpec) -> io::Result<Self> {
        super::restore_sigchld();
        let prepared = prepare(spec)?;
        // Counted from here (a cancelled spawn uncounts itself), so two
        // spawns in a row each see the other.
        let alive = Alive::enter();
        let started = if on_main_thread() && alive.alone {
            start(prepared, None)?
        } else {
            on_spawn_thread(prepared).await?
        };
        let (pid, pidfd, [stdin, stdout, stderr], slot) = started.hand_over();
        // From here `Drop` ends and reaps the child whatever fails.
        let mut tree = Tree {
            pid,
            _alive: alive,
            exit: None,
            status: None,
            reaped: false,
            killed: false,
            slot,
            stdin: None,
            stdout: None,
            stderr: None,
        };
        tree.exit = Some(match pidfd {
            Some(fd) => Exit::from_pidfd(fd)?,
            None => Exit::Sigchld(tokio::signal::unix::signal(
                tokio::signal::unix::SignalKind::child(),
            )?),
        });
        if let Some(fd) = stdin {
            tree.stdin = Some(ChildStdin::from_std(std::process::ChildStdin::from(fd))?);
        }
        if let Some(fd) = stdout {
            tree.stdout = Some(ChildStdout::from_std(std::process::ChildStdout::from(fd))?);
        }
        if let Some(fd) = stderr {
            tree.stderr = Some(ChildStderr::from_std(std::process::ChildStderr::from(fd))?);
        }
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

    /// The root's exit status, without waiting and without reaping it
    /// (unless the group was killed already: then nothing of it is left
    /// to signal).
    pub(super) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let s = exited(self.pid)?;
        self.status = s;
        if s.is_some() && self.killed {
            self.reap_now();
        }
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
                    // Readable means exited, and stays so (the root is not
                    // reaped here); only a wake-up with nothing to learn
                    // clears the readiness.
                    if exited(self.pid)?.is_none() {
                        ready.clear_ready();
                    }
                }
                Some(Exit::Sigchld(sig)) => {
                    sig.recv().await;
                }
                None => return Err(io::Error::other("the process was handed to its reaper")),
            }
        }
    }

    /// SIGTERM to the group, while its leader's pid is still ours (not
    /// reaped); false once it is not.
    pub(super) fn terminate(&self) -> bool {
        if self.reaped {
            return false;
        }
        // ESRCH (the group is gone) is the only expected error.
        // SAFETY: a system call on plain integers; the group's id is our
        // unreaped child's pid, so it names our group.
        unsafe { libc::killpg(self.pid, libc::SIGTERM) };
        true
    }

    /// SIGKILL to the group, and to the root if it left it; then, if the
    /// root has exited, it is reaped. Nothing is signalled once the root
    /// is reaped: its pid may be another process's by then.
    pub(super) fn kill(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: system calls on plain integers; the pid is our unreaped
        // child (running or a zombie), so it and its group are ours.
        unsafe {
            libc::killpg(self.pid, libc::SIGKILL);
            if self.status.is_none() {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
        self.killed = true;
        if self.status.is_some() {
            self.reap_now();
        }
    }

    /// Reaps the root, which has exited: first its entry in the guardian's
    /// table goes, since the pid is free once reaped.
    fn reap_now(&mut self) {
        drop(self.slot.take());
        reap(self.pid, 0);
        self.reaped = true;
    }
}

impl Drop for Tree {
    /// The last resort: what a caller did not stop ends now, and the root
    /// is reaped (in the background while it has not exited, at once
    /// outside a runtime).
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        self.kill();
        if self.reaped {
            return;
        }
        drop(self.slot.take());
        reap_later(self.pid, self.exit.take());
    }
}

/// Reaps `pid`, our child, which has been sent SIGKILL: on the runtime
/// when there is one and a pidfd to wait on, otherwise at once.
fn reap_later(pid: libc::pid_t, exit: Option<Exit>) {
    match (exit, tokio::runtime::Handle::try_current()) {
        (Some(Exit::Pidfd(fd)), Ok(handle)) => {
            handle.spawn(async move {
                let _ = fd.readable().await;
                reap(pid, 0);
            });
        }
        _ => reap(pid, 0),
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

/// The exit status of our unreaped child `pid`, if it has exited, leaving
/// it unreaped (`WNOWAIT`): a zombie still holds its pid.
fn exited(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    // SAFETY: siginfo_t is plain data; waitid writes only `info`.
    let info = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) != 0 {
            return Err(io::Error::last_os_error());
        }
        info
    };
    // SAFETY: waitid filled `info` for a child's state change (or left it
    // zeroed: no child has changed state), so these fields are the ones
    // set.
    let (who, status) = unsafe { (info.si_pid(), info.si_status()) };
    if who == 0 {
        return Ok(None);
    }
    // The raw wait status that `waitpid` would have given.
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_KILLED => status & 0x7f,
        libc::CLD_DUMPED => (status & 0x7f) | 0x80,
        // Only exits are asked for (no WSTOPPED or WCONTINUED).
        _ => return Ok(None),
    };
    Ok(Some(ExitStatus::from_raw(raw)))
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
            format!("{what} contains a NUL byte, which no program can be given"),
        )
    })
}

/// The child's environment: the process's own (unless the spec clears it)
/// with the spec's changes, in order.
fn environment(spec: &SpawnSpec) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, Option<OsString>)> = if spec.get_env_clear() {
        Vec::new()
    } else {
        std::env::vars_os().map(|(k, v)| (k, Some(v))).collect()
    };
    for (k, v) in spec.get_env_changes() {
        match env.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1.clone_from(v),
            None => env.push((k.clone(), v.clone())),
        }
    }
    env.into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
}

/// The child's strings, from the spec alone: argv[0] the program as given.
fn prepare(spec: &SpawnSpec) -> io::Result<Prepared> {
    let path = cstring(spec.get_program(), "the program's name")?;
    let mut argv = Vec::with_capacity(spec.get_args().len() + 1);
    argv.push(path.clone());
    for (i, a) in spec.get_args().iter().enumerate() {
        argv.push(cstring(a, &format!("argument {}", i + 1))?);
    }
    let env = environment(spec);
    let mut envp = Vec::with_capacity(env.len());
    for (k, v) in env {
        let mut kv = k.into_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(CString::new(kv).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "an environment variable contains a NUL byte, which no program can be given",
            )
        })?);
    }
    let cwd = spec
        .get_cwd()
        .map(|d| cstring(d.as_os_str(), "the working directory"))
        .transpose()?;
    let [i, o, e] = spec.get_stdio();
    let (stdin_child, stdin_parent) = stream(i, true)?;
    let (stdout_child, stdout_parent) = stream(o, false)?;
    let (stderr_child, stderr_parent) = stream(e, false)?;
    Ok(Prepared {
        path,
        argv,
        envp,
        cwd,
        child_fds: [stdin_child, stdout_child, stderr_child],
        parent_fds: [stdin_parent, stdout_parent, stderr_parent],
    })
}

/// One standard stream: the child's end, and the parent's if a pipe.
fn stream(s: Stdio, child_reads: bool) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
    match s {
        Stdio::Pipe => {
            let (r, w) = pipe()?;
            Ok(if child_reads {
                (r, Some(w))
            } else {
                (w, Some(r))
            })
        }
        Stdio::Null => {
            // SAFETY: open takes a C string and flags; a new descriptor,
            // owned by no one else.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: as above.
            Ok((above_stdio(unsafe { OwnedFd::from_raw_fd(fd) })?, None))
        }
    }
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
    Cancelled,
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
            Step::Cancelled => "the spawn was cancelled",
            Step::Chdir => "entering its working directory",
        }
    }
}

/// The kernel's `struct sigaction`, for the raw `rt_sigaction` call (not
/// libc's, whose layout differs): the handler first, then the flags, the
/// restorer and the mask on every architecture but MIPS.
#[cfg(not(any(target_arch = "mips", target_arch = "mips64")))]
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

#[cfg(any(target_arch = "mips", target_arch = "mips64"))]
#[repr(C)]
struct KernelSigaction {
    flags: libc::c_uint,
    handler: usize,
    mask: [u64; 2],
}

/// The kernel's signal set size in bytes, and its last signal.
#[cfg(not(any(target_arch = "mips", target_arch = "mips64")))]
const KERNEL_SIGSET: usize = 8;
#[cfg(any(target_arch = "mips", target_arch = "mips64"))]
const KERNEL_SIGSET: usize = 16;
const LAST_SIGNAL: libc::c_int = (KERNEL_SIGSET * 8) as libc::c_int;

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
    /// The guardian's slot for this group (null: none).
    slot: *const std::sync::atomic::AtomicI32,
    /// Set when the caller has gone (null: it cannot go).
    cancelled: *const AtomicBool,
    failure: Failure,
}

thread_local! {
    /// The child's stack, one per spawning thread, reused: the child is
    /// done with it when the clone returns.
    static STACK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Starts the child on this thread, which it will follow (the parent-death
/// signal): this thread must live as long as the sidecar. `cancelled`,
/// once set, keeps a child that has not reached `execve` from it.
fn start(p: Prepared, cancelled: Option<&AtomicBool>) -> io::Result<Started> {
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut sh_argv = Vec::with_capacity(argv.len() + 1);
    sh_argv.push(c"/bin/sh".as_ptr());
    sh_argv.push(p.path.as_ptr());
    sh_argv.extend_from_slice(&argv[1..]);
    let slot = super::linux_guard::claim();
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
        slot: slot.as_ref().map_or(std::ptr::null(), Slot::as_ptr),
        cancelled: cancelled.map_or(std::ptr::null(), |c| c as *const AtomicBool),
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
        drop(slot);
        reap(pid, 0);
        return Err(match failure.step {
            Step::ParentGone => io::Error::other("the sidecar is exiting"),
            Step::Cancelled => {
                io::Error::new(io::ErrorKind::Interrupted, "the spawn was cancelled")
            }
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
    Ok(Started {
        pid,
        pidfd,
        fds: p.parent_fds,
        slot,
        handed_over: false,
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
/// memory and runs on a borrowed stack: system calls only (raw ones where
/// a libc wrapper might take a lock), no allocation, no lock, no panic,
/// nothing returned but through `_exit`.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` of `start`, alive and not otherwise
    // touched while the parent is suspended.
    let a = unsafe { &mut *arg.cast::<ChildArgs>() };
    // SAFETY: each call is a single async-signal-safe system call on the
    // child's own process state, with pointers from `ChildArgs`; `slot`
    // and `cancelled`, when not null, point to atomics that outlive the
    // spawn (the guardian's table is never unmapped; the flag is held by
    // the job that runs `start`).
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
        // The group is ours from here until it is reaped: the guardian
        // kills it if the sidecar dies (a plain store, no lock).
        if !a.slot.is_null() {
            (*a.slot).store(libc::getpid(), Ordering::SeqCst);
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
        // default, as std's spawn does. The raw system call: musl's
        // `sigaction` takes a lock for SIGABRT in memory shared with the
        // sidecar, which a child killed there would leave held.
        let mut old: KernelSigaction = std::mem::zeroed();
        let dfl: KernelSigaction = std::mem::zeroed(); // SIG_DFL is 0
        for sig in 1..=LAST_SIGNAL {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let got = libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<KernelSigaction>(),
                &mut old as *mut KernelSigaction,
                KERNEL_SIGSET,
            );
            if got != 0 {
                continue;
            }
            if sig == libc::SIGPIPE
                || (old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN)
            {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &dfl as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    KERNEL_SIGSET,
                );
            }
        }
        let empty = [0u64; KERNEL_SIGSET / 8];
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            empty.as_ptr(),
            std::ptr::null_mut::<u64>(),
            KERNEL_SIGSET,
        );
        if !a.cwd.is_null() && libc::chdir(a.cwd) != 0 {
            fail(a, Step::Chdir);
        }
        // The last moment a caller that has gone can keep the program
        // from running at all.
        if !a.cancelled.is_null() && (*a.cancelled).load(Ordering::SeqCst) {
            a.failure = Failure {
                step: Step::Cancelled,
                errno: 0,
            };
            libc::_exit(127);
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
    /// Tests wait on it for the pool to be idle.
    #[cfg(test)]
    drained: Condvar,
}

struct PoolState {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    /// Jobs being run.
    running: usize,
}

impl Pool {
    const fn new() -> Self {
        Pool {
            state: Mutex::new(PoolState {
                jobs: VecDeque::new(),
                threads: 0,
                idle: 0,
                running: 0,
            }),
            work: Condvar::new(),
            #[cfg(test)]
            drained: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

static POOL: Pool = Pool::new();

/// Sets the flag it holds when dropped armed: the caller of a spawn has
/// gone.
struct CancelOnDrop(Arc<AtomicBool>, bool);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// Starts the child on a spawning thread. If the caller goes (the future
/// is dropped): a job not begun starts nothing; a child not yet at
/// `execve` exits there; a child started is killed and reaped when its
/// `Started` is dropped, by the job (the send failed) or with the channel.
async fn on_spawn_thread(p: Prepared) -> io::Result<Started> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&cancelled);
    let job: Job = Box::new(move || {
        #[cfg(test)]
        drop(tests::GATE.lock().unwrap_or_else(|e| e.into_inner()));
        if tx.is_closed() {
            return;
        }
        let _ = tx.send(start(p, Some(&flag)));
    });
    let mut guard = CancelOnDrop(cancelled, true);
    submit(&POOL, job, |pool| {
        std::thread::Builder::new()
            .name("neko-spawn".into())
            .spawn(move || spawn_thread(pool))
            .map(drop)
    })?;
    let r = rx
        .await
        .unwrap_or_else(|_| Err(io::Error::other("the spawning thread ended")));
    guard.1 = false;
    r
}

/// Queues `job` on `pool`, starting a thread (with `start_thread`) when
/// none is idle and there is room for one. A job is queued only where a
/// thread will run it: when no thread exists and none can be started, it
/// is dropped (its caller learns so from the error) and never runs later.
fn submit(
    pool: &'static Pool,
    job: Job,
    start_thread: impl FnOnce(&'static Pool) -> io::Result<()>,
) -> io::Result<()> {
    let mut s = pool.lock();
    if s.idle == 0 && s.threads < SPAWN_THREADS {
        match start_thread(pool) {
            Ok(()) => s.threads += 1,
            Err(e) if s.threads == 0 => return Err(e),
            // The threads there are will take it.
            Err(_) => {}
        }
    }
    s.jobs.push_back(job);
    pool.work.notify_one();
    Ok(())
}

fn spawn_thread(pool: &'static Pool) {
    loop {
        let job = {
            let mut s = pool.lock();
            loop {
                if let Some(job) = s.jobs.pop_front() {
                    s.running += 1;
                    break job;
                }
                s.idle += 1;
                s = pool.work.wait(s).unwrap_or_else(|e| e.into_inner());
                s.idle -= 1;
            }
        };
        // A job that panicked must not take the thread (and its count)
        // with it; its caller learns of it from the dropped sender.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        let mut s = pool.lock();
        s.running -= 1;
        #[cfg(test)]
        if s.running == 0 && s.jobs.is_empty() {
            pool.drained.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Held by a test to keep the spawning threads from starting a job.
    pub(super) static GATE: Mutex<()> = Mutex::new(());

    /// Waits until the spawning threads have run every job queued.
    fn wait_pool_drained() {
        let mut s = POOL.lock();
        while !s.jobs.is_empty() || s.running > 0 {
            s = POOL.drained.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits (up to 10 s) for `done`, checking every 10 ms.
    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("after 10 s: {what}");
    }

    /// Runs the test `name` of this binary alone in a process of its own,
    /// with `ENV` set (the test then does its work), under `wrapper` (e.g.
    /// `unshare`); returns its output, or `None` with the reason printed
    /// when it cannot run here (exit 77, or the wrapper refused).
    fn in_own_process(name: &str, wrapper: &[&str]) -> Option<String> {
        let exe = std::env::current_exe().unwrap();
        let full = format!(
            "{}::{name}",
            module_path!().split_once("::").map_or("", |(_, m)| m)
        );
        let mut argv: Vec<std::ffi::OsString> = wrapper.iter().map(Into::into).collect();
        argv.extend([
            exe.into_os_string(),
            full.into(),
            "--exact".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
        ]);
        let out = match std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env(OWN_PROCESS, "1")
            .output()
        {
            Ok(out) => out,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                println!(
                    "skipped: {} is not installed: {e}",
                    argv[0].to_string_lossy()
                );
                return None;
            }
            Err(e) => panic!("{e}"),
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.code() == Some(77)
            || (!wrapper.is_empty() && text.contains("Operation not permitted"))
        {
            println!("skipped: cannot run here (unprivileged?): {text}");
            return None;
        }
        assert!(out.status.success(), "{name} in its own process: {text}");
        assert!(text.contains("1 passed"), "{text}");
        Some(text)
    }

    const OWN_PROCESS: &str = "NEKO_SPAWN_TEST_OWN_PROCESS";

    fn own_process() -> bool {
        std::env::var_os(OWN_PROCESS).is_some()
    }

    fn sh(script: &str) -> SpawnSpec {
        let mut c = SpawnSpec::new("/bin/sh");
        c.arg("-c").arg(script);
        c
    }

    #[tokio::test]
    async fn the_child_gets_its_pipes_env_cwd_and_a_group_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sh(
            "read line; echo \"$line $NEKO_X $(pwd)\"; echo oops >&2; cut -d' ' -f5 /proc/$$/stat; exit 3",
        );
        c.env("NEKO_X", "x-value").cwd(dir.path());
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
        let c = SpawnSpec::new("/no/such/program");
        let e = Tree::spawn(&c).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let dir = tempfile::tempdir().unwrap();
        let c = SpawnSpec::new(dir.path());
        let e = Tree::spawn(&c).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    }

    #[tokio::test]
    async fn a_missing_cwd_says_so() {
        let mut c = sh("true");
        c.cwd("/no/such/dir");
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
        let calls = (0..16).map(|i| async move { output_of(&sh(&format!("echo {i}"))).await });
        let outs = futures_util::future::join_all(calls).await;
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(o.trim(), i.to_string());
        }
        drop(keep);
    }

    #[tokio::test]
    async fn a_nul_byte_is_refused_never_replaced() {
        let mut c = SpawnSpec::new("/bin/echo");
        c.arg("a\u{0}b");
        let e = Tree::spawn(&c).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(
            e.to_string().starts_with("argument 1 contains a NUL byte"),
            "{e}"
        );
        let e = Tree::spawn(&SpawnSpec::new("/bin/echo\u{0}x"))
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the program's name contains a NUL"),
            "{e}"
        );
        let mut c = sh("true");
        c.cwd("/tmp\u{0}x");
        let e = Tree::spawn(&c).await.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the working directory contains a NUL"),
            "{e}"
        );
    }

    async fn output_of(spec: &SpawnSpec) -> String {
        let mut t = Tree::spawn(spec).await.unwrap();
        let mut out = String::new();
        t.take_stdout()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        assert!(t.wait().await.unwrap().success());
        out
    }

    #[tokio::test]
    async fn a_cleared_environment_holds_only_what_is_set() {
        let mut c = SpawnSpec::new("/usr/bin/env");
        c.env("NEKO_BEFORE", "1").env_clear().env("NEKO_AFTER", "2");
        assert_eq!(output_of(&c).await, "NEKO_BEFORE=1\nNEKO_AFTER=2\n");
        // Without the clear, the sidecar's own variables are there, but
        // not one removed.
        let mut c = SpawnSpec::new("/usr/bin/env");
        c.env("NEKO_GONE", "x")
            .env_remove("NEKO_GONE")
            .env_remove("PATH");
        let out = output_of(&c).await;
        assert!(
            !out.contains("NEKO_GONE=") && !out.contains("\nPATH="),
            "{out}"
        );
        assert!(
            std::env::vars_os().count() <= out.lines().count() + 1,
            "{out}"
        );
    }

    #[tokio::test]
    async fn a_null_stream_is_the_null_device() {
        let mut c = sh("read x || echo eof; ls -l /proc/$$/fd/2");
        c.stdin(Stdio::Null).stderr(Stdio::Null);
        let mut t = Tree::spawn(&c).await.unwrap();
        assert!(t.take_stdin().is_none() && t.take_stderr().is_none());
        let mut out = String::new();
        t.take_stdout()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        assert!(t.wait().await.unwrap().success());
        assert!(
            out.starts_with("eof\n") && out.trim_end().ends_with("/dev/null"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn the_root_stays_a_zombie_until_its_group_is_killed() {
        let mut t = Tree::spawn(&sh("exit 4")).await.unwrap();
        let pid = t.pid;
        assert_eq!(t.wait().await.unwrap().code(), Some(4));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        assert!(stat.contains(") Z "), "{stat}");
        assert!(t.terminate());
        t.kill();
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "not reaped");
        assert!(!t.terminate(), "a reaped group is asked again");
        assert_eq!(t.wait().await.unwrap().code(), Some(4));
    }

    /// Issue 47's first point, shown as it was found: in a pid namespace
    /// (`unshare`, root only), the pid of a tree whose exit was learnt is
    /// handed to an unrelated `sleep` leading a group of its own
    /// (`ns_last_pid`); the old tree's `terminate`, `kill` and drop must
    /// not reach it.
    #[test]
    fn a_group_is_never_signalled_once_its_pid_may_be_another_s() {
        if !own_process() {
            in_own_process(
                "a_group_is_never_signalled_once_its_pid_may_be_another_s",
                &["unshare", "--pid", "--fork", "--kill-child"],
            );
            return;
        }
        /// Starts `sleep 60` leading its own group, as pid `pid` if free.
        fn sleep_at(pid: i32) -> Result<std::process::Child, ()> {
            use std::os::unix::process::CommandExt as _;
            if std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).is_err() {
                println!("ns_last_pid cannot be written here");
                std::process::exit(77);
            }
            Ok(std::process::Command::new("sleep")
                .arg("60")
                .process_group(0)
                .spawn()
                .unwrap())
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut t = Tree::spawn(&sh("exit 0")).await.unwrap();
            let pid = t.pid;
            assert!(t.wait().await.unwrap().success());
            // Its exit is known, the zombie holds the pid: the next
            // process cannot be given it.
            let mut first = sleep_at(pid).unwrap();
            assert_ne!(first.id() as i32, pid);
            // As the exec handler does after its wait: ask, then kill
            // (which reaps).
            assert!(t.terminate());
            t.kill();
            // Now the pid is free, and given to another group leader.
            let mut second = sleep_at(pid).unwrap();
            assert_eq!(second.id() as i32, pid, "ns_last_pid did not steer");
            assert!(!t.terminate());
            t.kill();
            drop(t);
            for c in [&mut first, &mut second] {
                assert_eq!(
                    c.try_wait().unwrap(),
                    None,
                    "an unrelated process was signalled"
                );
                c.kill().unwrap();
                c.wait().unwrap();
            }
        });
    }

    #[tokio::test]
    async fn a_spawn_dropped_after_its_child_started_kills_and_reaps_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pid");
        let spec = sh(&format!("echo $$ > {}; exec sleep 30", file.display()));
        // The spawning thread may finish between the job being sent and the
        // first poll's look for its answer (2 cores, an idle thread): then
        // the spawn is whole at once and this path is not reached; that
        // child is ended and the spawn made again, a bounded number of times.
        let mut fut = None;
        for _ in 0..50 {
            let mut f = Box::pin(Tree::spawn(&spec));
            match std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx))).await {
                std::task::Poll::Pending => {
                    fut = Some(f);
                    break;
                }
                std::task::Poll::Ready(done) => {
                    let mut t = done.unwrap();
                    t.kill();
                    t.wait().await.unwrap();
                    let _ = std::fs::remove_file(&file);
                }
            }
        }
        let fut = fut.expect("in 50 spawns, one still pending after its first poll");
        // The spawning thread has started the child and sent it; nobody
        // has received it.
        tokio::task::spawn_blocking(wait_pool_drained)
            .await
            .unwrap();
        let mut pid = None;
        eventually("the child wrote its pid", || {
            pid = std::fs::read_to_string(&file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            pid.is_some()
        })
        .await;
        let pid = pid.unwrap();
        drop(fut);
        eventually("the child is killed and reaped", || {
            !Path::new(&format!("/proc/{pid}")).exists()
        })
        .await;
    }

    /// The path of a job whose caller went while its child was being
    /// made: the child is ended on the spawning thread, with no runtime.
    #[test]
    fn a_started_child_dropped_outside_a_runtime_is_killed_and_reaped() {
        let started = start(prepare(&sh("exec sleep 30")).unwrap(), None).unwrap();
        let pid = started.pid;
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        drop(started);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "not reaped");
    }

    #[tokio::test]
    async fn a_spawn_cancelled_before_its_job_ran_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let specs: Vec<SpawnSpec> = (0..20)
            .map(|i| {
                let mut c = SpawnSpec::new("/usr/bin/touch");
                c.arg(dir.path().join(i.to_string()));
                c
            })
            .collect();
        {
            let _held = GATE.lock().unwrap_or_else(|e| e.into_inner());
            for spec in &specs {
                // Polled once (the job is queued), then dropped.
                let mut fut = Box::pin(Tree::spawn(spec));
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                assert!(fut.as_mut().poll(&mut cx).is_pending());
            }
        }
        tokio::task::spawn_blocking(wait_pool_drained)
            .await
            .unwrap();
        let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(made.is_empty(), "cancelled spawns ran: {made:?}");
    }

    #[test]
    fn a_job_is_not_queued_when_no_thread_can_take_it() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new()));
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        let e = submit(
            pool,
            Box::new(move || r.store(true, Ordering::SeqCst)),
            |_| Err(io::Error::other("no thread for you")),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "no thread for you");
        assert!(pool.lock().jobs.is_empty());
        // With a thread there, a failed start of another leaves the job to
        // it.
        pool.lock().threads = 1;
        submit(pool, Box::new(|| {}), |_| Err(io::Error::other("no"))).unwrap();
        assert_eq!(pool.lock().jobs.len(), 1);
        assert!(!ran.load(Ordering::SeqCst));
    }

    /// Our children (any thread's), from /proc.
    fn children() -> Vec<i32> {
        let me = std::process::id().to_string();
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                let ppid = stat
                    .rsplit_once(") ")
                    .and_then(|(_, r)| r.split(' ').nth(1));
                if ppid == Some(me.as_str()) {
                    out.push(pid);
                }
            }
        }
        out
    }

    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    /// Hundreds of concurrent spawns mixing successes, exec failures,
    /// timeouts, drops and cancellations (in a process of their own, so
    /// that "no child, zombie or descriptor of ours" is exact): afterwards
    /// nothing of theirs is left.
    #[test]
    fn hundreds_of_mixed_spawns_leave_nothing_behind() {
        if !own_process() {
            in_own_process("hundreds_of_mixed_spawns_leave_nothing_behind", &[]);
            return;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Warm: the spawning threads and the runtime's drivers exist.
            assert_eq!(output_of(&sh("echo warm")).await, "warm\n");
            let fds = open_fds();
            let calls = (0..400u32).map(|i| async move {
                let nap = Duration::from_micros(u64::from(i % 7) * 150);
                match i % 6 {
                    0 => {
                        let mut t = Tree::spawn(&sh("read x; echo \"$x\"")).await.unwrap();
                        let mut stdin = t.take_stdin().unwrap();
                        stdin.write_all(format!("{i}\n").as_bytes()).await.unwrap();
                        drop(stdin);
                        let mut out = String::new();
                        t.take_stdout()
                            .unwrap()
                            .read_to_string(&mut out)
                            .await
                            .unwrap();
                        assert!(t.wait().await.unwrap().success());
                        t.kill();
                        assert_eq!(out, format!("{i}\n"));
                    }
                    1 => {
                        let e = Tree::spawn(&SpawnSpec::new("/no/such/program")).await;
                        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::NotFound);
                    }
                    2 => {
                        let mut t = Tree::spawn(&sh("sleep 30 & sleep 30")).await.unwrap();
                        assert!(tokio::time::timeout(nap, t.wait()).await.is_err());
                        assert!(t.terminate());
                        t.kill();
                        assert!(t.wait().await.unwrap().signal().is_some());
                    }
                    3 => drop(Tree::spawn(&sh("sleep 30")).await.unwrap()),
                    4 => {
                        // Cancelled at some point of its spawn, or not.
                        let _ = tokio::time::timeout(nap, Tree::spawn(&sh("sleep 30"))).await;
                    }
                    _ => {
                        // Exited with a background job still in its group.
                        let mut t = Tree::spawn(&sh("sleep 30 & exit 0")).await.unwrap();
                        assert!(t.wait().await.unwrap().success());
                        t.kill();
                    }
                }
            });
            futures_util::future::join_all(calls.map(tokio::spawn))
                .await
                .into_iter()
                .for_each(|r| r.unwrap());
            eventually("every tree is gone", || ALIVE.load(Ordering::SeqCst) == 0).await;
            eventually("no child or zombie of ours is left", || {
                children().is_empty()
            })
            .await;
            assert_eq!(open_fds(), fds, "descriptors left open");
        });
    }
}
