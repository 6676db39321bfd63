//! The child process of a stdio MCP server: how it is started, whose
//! environment it gets, where its stderr goes, and how it is stopped.
//!
//! The sidecar spawns it itself and hands only the pipes to rmcp
//! (`transport-async-rw`), rather than rmcp's `TokioChildProcess`, whose
//! stop waits a fixed 3 s before SIGTERM and 3 s more before SIGKILL and so
//! cannot keep `[shutdown] deadline`, and whose drop kills from a task of
//! its own. Here:
//! - the server runs in its own process group, so a stop reaches the
//!   processes it started too (`npx` and its `node`);
//! - it gets the manifest's `env` and never systemd's notify or watchdog
//!   variables, which speak for the sidecar alone;
//! - it gets SIGKILL when the sidecar dies, even by `kill -9`
//!   (`PR_SET_PDEATHSIG`), so no server outlives the sidecar;
//! - its stderr goes to our log, one event per line, with the server's name;
//! - a stop closes stdin (the MCP way to ask a stdio server to exit), then
//!   sends SIGTERM, then SIGKILL, to the group, all by a deadline.
//!
//! Nothing here speaks MCP.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

/// A line of stderr longer than this is cut (and the rest read as further
/// lines), so a server that writes without newlines cannot grow our memory.
const MAX_LOG_LINE: usize = 8 * 1024;

/// A started server process; the pipes are handed out once by `spawn`.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    group: Option<Pid>,
}

/// What `spawn` gives back: the process, and its stdout and stdin for the
/// MCP transport.
pub(crate) type Spawned = (ServerProcess, ChildStdout, ChildStdin);

/// Starts `command` (argv) in `cwd` with `env` added, its stderr logged
/// under `server`'s name.
pub(crate) fn spawn(
    server: &str,
    command: &[String],
    cwd: &Path,
    env: &std::collections::BTreeMap<String, String>,
) -> std::io::Result<Spawned> {
    let Some((program, args)) = command.split_first() else {
        return Err(std::io::Error::other("the command is empty"));
    };
    let mut cmd = Command::new(program);
    for var in crate::systemd::SERVICE_ONLY_ENV {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .current_dir(cwd)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // A last resort should this value be dropped without `stop`.
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn()?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(std::io::Error::other("the child's pipes were not made"));
    };
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(log_lines(server.to_string(), stderr));
    }
    Ok((ServerProcess { child, group }, stdout, stdin))
}

/// Logs each line of `stderr` until it closes.
async fn log_lines(server: String, stderr: ChildStderr) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LOG_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\r', '\n']);
                if !text.is_empty() {
                    tracing::info!(mcp_server = %server, "stderr: {text}");
                }
            }
        }
    }
}

/// Asks the kernel to SIGKILL the child when the sidecar dies.
///
/// The one `unsafe` of the crate: `pre_exec` runs between fork and exec,
/// where only async-signal-safe calls are allowed; `prctl` and `getppid`
/// are single system calls. The parent check closes the race of a sidecar
/// that died before the `prctl` (the child would then never get the
/// signal). The signal follows the *thread* that forked: the daemon runs on
/// one thread (src/commands.rs), so that is the sidecar's life.
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the closure makes only async-signal-safe system calls and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("the sidecar is gone"));
            }
            Ok(())
        });
    }
}

impl ServerProcess {
    pub(crate) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the process to exit by itself (the server's pipe closed,
    /// or it crashed); its exit status in words.
    pub(crate) async fn exited(&mut self) -> String {
        match self.child.wait().await {
            Ok(status) => describe(status),
            Err(e) => format!("cannot be waited for: {e}"),
        }
    }

    /// Stops the process by `deadline`: stdin must already be closed (the
    /// MCP transport was dropped); then SIGTERM to the group at half the
    /// time left, SIGKILL at the deadline. Returns how it ended.
    pub(crate) async fn stop(mut self, deadline: Instant) -> String {
        let now = Instant::now();
        let term_at = now + deadline.saturating_duration_since(now) / 2;
        if let Ok(Ok(status)) = tokio::time::timeout_at(term_at, self.child.wait()).await {
            return describe(status);
        }
        if let Some(group) = self.group {
            let _ = kill_process_group(group, Signal::TERM);
        }
        if let Ok(Ok(status)) = tokio::time::timeout_at(deadline, self.child.wait()).await {
            return format!("{} after SIGTERM", describe(status));
        }
        if let Some(group) = self.group {
            let _ = kill_process_group(group, Signal::KILL);
        }
        let _ = self.child.start_kill();
        // SIGKILL cannot be caught; the wait only reaps.
        match tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await {
            Ok(Ok(_)) => "killed (SIGKILL) at the deadline".to_string(),
            _ => "killed (SIGKILL); not reaped yet".to_string(),
        }
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "exited".to_string(),
    }
}
