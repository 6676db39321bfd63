//! The child process of a stdio MCP server: how it is started, whose
//! environment it gets, where its stderr goes, and how it is stopped.
//!
//! The sidecar spawns it itself and hands only the pipes to rmcp
//! (`transport-async-rw`), rather than rmcp's `TokioChildProcess`, whose
//! stop waits a fixed 3 s before SIGTERM and 3 s more before SIGKILL and so
//! cannot keep `[shutdown] deadline`, and whose drop kills from a task of
//! its own. Here:
//! - the program is looked up on PATH as the platform's shell would
//!   (PATHEXT on Windows, so `npx` is `npx.cmd`, as Python's MCP SDK does),
//!   and runs without a shell;
//! - the server runs at the root of a process tree of its own
//!   (`os::ProcessTree`: a process group on Unix, a Job Object with
//!   kill-on-close on Windows), so a stop reaches the processes it started
//!   too (`npx` and its `node`);
//! - it gets the manifest's `env` and never systemd's notify or watchdog
//!   variables, which speak for the sidecar alone;
//! - what it is started with is a `SpawnSpec`, which every platform reads
//!   whole (nothing set there is ignored);
//! - no server outlives the sidecar, even one killed outright, within the
//!   limits `os/process.rs` states: on Linux the root gets SIGKILL when the
//!   sidecar dies (`PR_SET_PDEATHSIG`) and the guardian of `neko-sidecar
//!   run` kills the rest of its process group (not a process that left the
//!   group or runs as another user); on Windows the Job Object ends with
//!   the sidecar's last handle to it; on macOS and other Unix systems
//!   nothing ends it;
//! - its stderr goes to our log, one event per line, with the server's name,
//!   and its last lines are kept for the failure reason (`stderr.rs`);
//! - a stop closes stdin (the MCP way to ask a stdio server to exit), then
//!   sends SIGTERM (Unix), then ends the whole tree, all by a deadline.
//!
//! Nothing here speaks MCP.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::time::Instant;

use super::stderr::{StderrTail, TailWriter};
use crate::os::{ProcessTree, SpawnSpec};

/// A line of stderr longer than this is cut (and the rest read as further
/// lines), so a server that writes without newlines cannot grow our memory.
const MAX_LOG_LINE: usize = 8 * 1024;

/// A started server process; the pipes are handed out once by `spawn`.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    tree: ProcessTree,
}

/// What `spawn` gives back: the process, and its stdout and stdin for the
/// MCP transport.
pub(crate) type Spawned = (ServerProcess, ChildStdout, ChildStdin);

/// Starts `command` (argv) in `cwd` with `env` added, its stderr logged
/// under `server`'s name and its last lines kept in `tail`.
pub(crate) async fn spawn(
    server: &str,
    command: &[String],
    cwd: &Path,
    env: &std::collections::BTreeMap<String, String>,
    tail: &StderrTail,
) -> std::io::Result<Spawned> {
    let Some((program, args)) = command.split_first() else {
        return Err(std::io::Error::other("the command is empty"));
    };
    let path_var = env.get("PATH").map(OsStr::new);
    let resolved = crate::os::resolve_program(program, cwd, path_var)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::NotFound, e))?;
    let mut spec = SpawnSpec::new(&resolved);
    for var in crate::systemd::SERVICE_ONLY_ENV {
        spec.env_remove(var);
    }
    spec.args(args).cwd(cwd).envs(env);
    let mut tree = ProcessTree::spawn(&spec).await?;
    let (Some(stdout), Some(stdin)) = (tree.take_stdout(), tree.take_stdin()) else {
        return Err(std::io::Error::other("the child's pipes were not made"));
    };
    if let Some(stderr) = tree.take_stderr() {
        tokio::spawn(log_lines(server.to_string(), stderr, tail.restart()));
    }
    Ok((ServerProcess { tree }, stdout, stdin))
}

/// Logs each line of `stderr` until it closes, and keeps the last ones.
async fn log_lines(server: String, stderr: ChildStderr, tail: TailWriter) {
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
                tail.push(text);
            }
        }
    }
}

impl ServerProcess {
    pub(crate) fn id(&self) -> Option<u32> {
        self.tree.id()
    }

    /// Waits for the process to exit by itself (the server's pipe closed,
    /// or it crashed); its exit status in words.
    pub(crate) async fn exited(&mut self) -> String {
        match self.tree.wait().await {
            Ok(status) => crate::os::describe_exit(status),
            Err(e) => format!("cannot be waited for: {e}"),
        }
    }

    /// Stops the process by `deadline`: stdin must already be closed (the
    /// MCP transport was dropped); then SIGTERM to the tree at half the
    /// time left (where there is one), the whole tree ended at the
    /// deadline. Returns how it ended.
    pub(crate) async fn stop(mut self, deadline: Instant) -> String {
        let now = Instant::now();
        let term_at = now + deadline.saturating_duration_since(now) / 2;
        if let Ok(Ok(status)) = tokio::time::timeout_at(term_at, self.tree.wait()).await {
            // What it started goes with it.
            self.tree.kill();
            return crate::os::describe_exit(status);
        }
        // Where there is no SIGTERM (Windows), the closed stdin keeps the
        // rest of the time to work.
        let asked = self.tree.terminate();
        if let Ok(Ok(status)) = tokio::time::timeout_at(deadline, self.tree.wait()).await {
            self.tree.kill();
            let how = crate::os::describe_exit(status);
            return if asked {
                format!("{how} after SIGTERM")
            } else {
                how
            };
        }
        self.tree.kill();
        // A kill cannot be refused; the wait only reaps.
        match tokio::time::timeout(Duration::from_secs(1), self.tree.wait()).await {
            Ok(Ok(_)) => "killed at the deadline".to_string(),
            _ => "killed; not reaped yet".to_string(),
        }
    }
}
