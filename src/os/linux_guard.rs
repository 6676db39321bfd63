//! The guardian: a small process that `neko-sidecar run` forks at start
//! and that outlives the sidecar by a moment, to end the process groups of
//! its handlers when the sidecar is killed outright.
//!
//! The kernel's parent-death signal (`linux_spawn.rs`) reaches a handler's
//! root only: a `sleep 300 &` it started would survive a `kill -9` of the
//! sidecar (outside systemd, whose cgroup ends the unit's processes). The
//! guardian shares a table with the sidecar (an anonymous `MAP_SHARED`
//! mapping made before the fork): one slot per live tree, holding its
//! group's id, written by the child itself before `execve` and emptied by
//! the sidecar just before it reaps the root (after which the id may be
//! another's). The guardian reads a pipe whose write end only the sidecar
//! holds; the end of that pipe is the sidecar's death (or exit). Then it
//! sends SIGKILL to every group still in the table and exits.
//!
//! The price: one process, forked while the daemon is small, that sleeps
//! in `read` (no CPU), and no system call per spawn (a store into the
//! table). The limits, stated in README.md and `process.rs`: a process
//! that left its group (`setsid`, `setpgid`) or runs as another user is
//! not reached, nor is anything if the guardian was killed first; and a
//! group whose every process had already died when the sidecar did could,
//! in principle, have had its id given to a new group in the moment
//! before the guardian's signal (the pid space would have to wrap around
//! in that moment).
//!
//! The guardian is forked from a process that may have threads, so it
//! makes raw system calls only, on memory prepared before the fork.

#![allow(unsafe_code)]

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// Trees the guardian can watch at once; a tree started while all are
/// taken runs without its guard (logged once).
const SLOTS: usize = 4096;

/// The shared table: 0 free, -1 claimed by a spawn under way, > 0 a
/// group's id.
static TABLE: OnceLock<&'static [AtomicI32]> = OnceLock::new();
/// Where the next claim starts looking.
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A claimed slot of the table; dropping it frees it (the group is no
/// longer guarded).
#[derive(Debug)]
pub(super) struct Slot(&'static AtomicI32);

impl Slot {
    /// Where the child writes its pid.
    pub(super) fn as_ptr(&self) -> *const AtomicI32 {
        self.0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

/// A free slot, if the guardian runs and one is free.
pub(super) fn claim() -> Option<Slot> {
    let table = *TABLE.get()?;
    let start = NEXT.fetch_add(1, Ordering::Relaxed);
    for i in 0..SLOTS {
        let slot = &table[(start + i) % SLOTS];
        if slot
            .compare_exchange(0, -1, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            return Some(Slot(slot));
        }
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "{SLOTS} process trees are alive: the ones started from now on are not \
             ended by the guardian if the sidecar is killed outright"
        );
    });
    None
}

/// Forks the guardian (once per process).
pub(super) fn start() -> io::Result<()> {
    if TABLE.get().is_some() {
        return Ok(());
    }
    let bytes = SLOTS * std::mem::size_of::<AtomicI32>();
    // SAFETY: an anonymous shared mapping of `bytes`, zero-filled by the
    // kernel; it is never unmapped, so the `'static` slice below stays
    // valid for the life of the process (and of the guardian's copy).
    let table = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        std::slice::from_raw_parts(p.cast::<AtomicI32>(), SLOTS)
    };
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read_end, write_end] = fds;
    // SAFETY: fork has no preconditions; the child runs `guard` only,
    // which makes raw system calls on what was made above and never
    // returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: our own descriptors, closed once.
        unsafe {
            libc::close(read_end);
            libc::close(write_end);
        }
        return Err(e);
    }
    if pid == 0 {
        // SAFETY: see `guard`.
        unsafe { guard(read_end, write_end, table) }
    }
    // The write end stays open, unowned, for the life of the process: its
    // closing (the process's end) is what the guardian waits for. It is
    // close-on-exec, and our spawn only hands on 0, 1 and 2.
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(read_end) };
    let _ = TABLE.set(table);
    tracing::debug!(pid, "the guardian runs");
    Ok(())
}

/// The guardian's whole life: detach from what it inherited, wait for the
/// end of the pipe, kill what the table holds, exit.
///
/// # Safety
/// Runs in a child just forked from a process that may have other
/// threads: only async-signal-safe system calls, no allocation, no lock.
unsafe fn guard(read_end: libc::c_int, write_end: libc::c_int, table: &[AtomicI32]) -> ! {
    // SAFETY: each is one system call on this process's own state.
    unsafe {
        libc::close(write_end);
        // What stops the sidecar (a terminal's Ctrl+C, a SIGTERM to the
        // group) must not end the guardian before the sidecar's own stop:
        // it leaves when the pipe ends.
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::prctl(libc::PR_SET_NAME, c"neko-guardian".as_ptr());
        // Hold none of the sidecar's descriptors (a pipe a test or a
        // parent reads to its end, a socket): its own pipe on 3, the null
        // device on 0, 1 and 2, every other one closed.
        libc::dup2(read_end, 3);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) != 0 {
            for fd in 4..4096 {
                libc::close(fd);
            }
        }
        libc::chdir(c"/".as_ptr());
        let mut buf = [0u8; 64];
        loop {
            let n = libc::read(3, buf.as_mut_ptr().cast(), buf.len());
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
        for slot in table {
            let group = slot.load(Ordering::SeqCst);
            if group > 0 {
                libc::killpg(group, libc::SIGKILL);
            }
        }
        libc::_exit(0)
    }
}
