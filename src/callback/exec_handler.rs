//! The exec handler: one process per call, the callback body on stdin, the
//! answer on stdout.
//!
//! The program is looked up on PATH as the platform's shell would (PATHEXT
//! on Windows, so `npx` is `npx.cmd`; remembered between calls while PATH
//! and the file stay the same) and runs without a shell, at the
//! root of a process tree of its own (`os::ProcessTree`: a process group on
//! Unix, a Job Object on Windows), so a timeout can stop it together with
//! everything it started, in the manifest's cwd
//! with the manifest's env plus `NEKO_TOOL_NAME` and `NEKO_CALL_ID`. stdout
//! is read up to `max_output_bytes`; stderr is logged line by line and its
//! tail kept for error messages. Whatever happens, the process tree is
//! stopped and the child reaped: a call never leaves a zombie or a
//! straggler behind. A handler stopped early (deadline, too much output)
//! gets SIGTERM, then SIGKILL after `kill_grace` (on Windows, which has no
//! SIGTERM, its Job Object is ended at once), in a background task the
//! drain waits for, so the answer is not delayed by the grace. The answer
//! is the handler's exit, not the end of its stdout: a background job it
//! started may hold stdout open, so once the handler has exited its output
//! gets `OUTPUT_SETTLE` to close and what was read by then is the answer
//! (the job is stopped like a handler stopped early). The answer's shape is
//! decided in `envelope`, not here.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdout;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::handler::{HandlerContext, HandlerError, Invocation};
use crate::manifest::{ExecHandler, InheritEnv};
use crate::os::{ProcessTree, SpawnSpec};

/// How much of stderr is kept for error messages.
const STDERR_TAIL_BYTES: usize = 2048;
/// A longer stderr line is cut when logged.
const LOG_LINE_BYTES: usize = 1024;
/// How much of stdout is quoted when a failing handler wrote no stderr.
const STDOUT_QUOTE_BYTES: usize = 300;
/// After the handler exits, how long its stdout and stderr may still take
/// to close; what was read by then is used. A handler's own output is in
/// the pipe when it exits, so only a process it started that still holds
/// the pipe (`sleep 300 &`) makes this wait its whole length: without it
/// such a handler would be answered only at its deadline, as a timeout.
const OUTPUT_SETTLE: Duration = Duration::from_millis(200);

/// Runs the handler for one call.
pub(crate) async fn call(
    ctx: &HandlerContext,
    h: &ExecHandler,
    call: &Invocation<'_>,
) -> Result<Vec<u8>, HandlerError> {
    let tool = call.spec.name.as_str();
    let Some((program, args)) = h.command.split_first() else {
        return Err(HandlerError::NotStarted {
            program: String::new(),
            reason: "the command is empty".into(),
        });
    };
    if !h.cwd.is_dir() {
        return Err(HandlerError::NotStarted {
            program: program.clone(),
            reason: format!("its working directory {} does not exist", h.cwd.display()),
        });
    }
    // The manifest's own PATH, if it sets one, is where the program is
    // looked for, as a shell would.
    let path_var = h.env.get("PATH").map(OsStr::new);
    let resolved =
        crate::os::resolve_program_cached(program, &h.cwd, path_var).map_err(|reason| {
            HandlerError::NotStarted {
                program: program.clone(),
                reason: for_the_model(tool, program, reason),
            }
        })?;
    let mut spec = SpawnSpec::new(&resolved);
    if let InheritEnv::Only(names) = &h.inherit_env {
        // Only the named variables of the sidecar's own environment, then
        // the manifest's `env` and the call's variables (set below): the
        // spec starts from an empty environment on every platform.
        spec.env_clear();
        for (name, value) in std::env::vars_os() {
            if names.iter().any(|n| OsStr::new(n) == name) {
                spec.env(name, value);
            }
        }
    }
    // systemd's notify variables belong to the service's main process: a
    // handler using an sd_notify library must not speak for the sidecar.
    for var in crate::systemd::SERVICE_ONLY_ENV {
        spec.env_remove(var);
    }
    spec.args(args)
        .cwd(&h.cwd)
        .envs(&h.env)
        .env("NEKO_TOOL_NAME", tool)
        .env("NEKO_CALL_ID", call.call_id);
    // Dropping the tree ends it: a last resort, as every path below stops
    // and reaps it itself.
    let mut child = ProcessTree::spawn(&spec)
        .await
        .map_err(|e| HandlerError::NotStarted {
            program: program.clone(),
            reason: spawn_reason(&e, &resolved),
        })?;

    if let Some(mut stdin) = child.take_stdin() {
        let body = call.body.clone();
        let tool = tool.to_string();
        tokio::spawn(async move {
            // A handler that does not read stdin closes it early; the
            // broken pipe that follows is expected, not a failure.
            let r = async {
                stdin.write_all(&body).await?;
                stdin.shutdown().await
            }
            .await;
            if let Some(e) = r
                .as_ref()
                .err()
                .filter(|e| e.kind() != ErrorKind::BrokenPipe)
            {
                tracing::debug!(tool, error = %e, "writing the call to the handler's stdin failed");
            }
        });
    }
    let tail = Arc::new(Mutex::new(Vec::new()));
    let stderr_task = child
        .take_stderr()
        .map(|s| tokio::spawn(log_stderr(s, tool.to_string(), tail.clone())));
    let Some(mut stdout) = child.take_stdout() else {
        stop(&mut child, Duration::ZERO, &ctx.hard_stop).await;
        return Err(HandlerError::Failed {
            detail: "the handler's stdout was not captured".into(),
        });
    };

    enum End {
        /// The handler exited at `at`. `held`: its stdout was still open
        /// `OUTPUT_SETTLE` later, so something it started holds it.
        Exited {
            status: ExitStatus,
            at: Instant,
            held: bool,
        },
        TooLarge,
        Broken(std::io::Error),
        TimedOut,
        Stopped,
    }
    // Outside the read so that a read cut short by the settle keeps what
    // it had.
    let mut out = Vec::new();
    let end = {
        let work = async {
            let read = read_bounded(&mut stdout, ctx.max_output_bytes, &mut out);
            tokio::pin!(read);
            let status = tokio::select! {
                // The end of stdout first: the usual handler closes it by
                // exiting, and then pays no settle at all.
                biased;
                r = &mut read => {
                    if r? {
                        // Do not wait for a process that may block on a
                        // full pipe.
                        return Ok(End::TooLarge);
                    }
                    let status = child.wait().await?;
                    return Ok(End::Exited { status, at: Instant::now(), held: false });
                }
                s = child.wait() => s?,
            };
            let at = Instant::now();
            // The handler has exited; what it wrote is in the pipe, and the
            // pipe ends as soon as nothing else holds it.
            match tokio::time::timeout_at(at + OUTPUT_SETTLE, &mut read).await {
                Ok(Ok(true)) => Ok(End::TooLarge),
                Ok(Ok(false)) => Ok(End::Exited {
                    status,
                    at,
                    held: false,
                }),
                Ok(Err(e)) => Err(e),
                Err(_) => Ok(End::Exited {
                    status,
                    at,
                    held: true,
                }),
            }
        };
        tokio::select! {
            r = work => r.unwrap_or_else(End::Broken),
            () = tokio::time::sleep_until(call.deadline) => End::TimedOut,
            () = ctx.hard_stop.cancelled() => End::Stopped,
        }
    };

    // A handler stopped early gets SIGTERM and `kill_grace` to exit; that
    // happens in a tracked background task so the answer does not wait for
    // it (it must reach main_server before its timeout). A drain waits for
    // that task too, and a forced stop cuts its grace short.
    let stop_later = |child: ProcessTree, stderr_task: Option<tokio::task::JoinHandle<()>>| {
        let grace = ctx.kill_grace;
        let hard_stop = ctx.hard_stop.clone();
        ctx.tasks.spawn(async move {
            let mut child = child;
            stop(&mut child, grace, &hard_stop).await;
            if let Some(t) = stderr_task {
                t.abort();
            }
        });
    };
    match end {
        End::Exited { status, at, held } => {
            if held {
                tracing::warn!(
                    tool,
                    "the handler exited but a process it started still holds its stdout; \
                     answering with what it wrote and stopping that process \
                     (redirect a background job's output, e.g. `job >/dev/null 2>&1 &`)"
                );
                // The root is reaped, so the tree's stragglers get the
                // grace a handler stopped early gets, in the background.
                let grace = ctx.kill_grace;
                let hard_stop = ctx.hard_stop.clone();
                ctx.tasks.spawn(async move {
                    stop_stragglers(child, grace, &hard_stop, stdout).await;
                });
            } else {
                // Stragglers of a finished handler (background jobs) go too.
                stop(&mut child, Duration::ZERO, &ctx.hard_stop).await;
            }
            if status.success() {
                if let Some(t) = stderr_task {
                    t.abort();
                }
                return Ok(out);
            }
            let stderr = take_tail(stderr_task, &tail, at + OUTPUT_SETTLE).await;
            let (tail_from, tail) = if stderr.is_empty() && !out.is_empty() {
                ("stdout began with", quote_start(&out))
            } else {
                ("stderr ended with", stderr)
            };
            Err(HandlerError::Exited {
                how: describe_exit(status),
                tail_from,
                tail,
            })
        }
        End::TooLarge => {
            stop_later(child, stderr_task);
            Err(HandlerError::OutputTooLarge {
                limit: ctx.max_output_bytes,
            })
        }
        End::Broken(e) => {
            stop_later(child, stderr_task);
            Err(HandlerError::Failed {
                detail: format!("reading the handler's output: {e}"),
            })
        }
        End::TimedOut => {
            stop_later(child, stderr_task);
            Err(HandlerError::Timeout {
                budget: call.budget,
                stopped: true,
            })
        }
        End::Stopped => {
            stop(&mut child, Duration::ZERO, &ctx.hard_stop).await;
            if let Some(t) = stderr_task {
                t.abort();
            }
            Err(HandlerError::ShuttingDown)
        }
    }
}

/// Stops the handler's process tree: SIGTERM, up to `grace` (or until
/// `hard_stop`) for the root to exit, then SIGKILL to the whole tree
/// (stragglers included), then reaps the root. With no grace, or where
/// there is no SIGTERM (Windows), the tree is killed at once.
async fn stop(child: &mut ProcessTree, grace: Duration, hard_stop: &CancellationToken) {
    if !grace.is_zero() && matches!(child.try_wait(), Ok(None)) && child.terminate() {
        tokio::select! {
            _ = tokio::time::timeout(grace, child.wait()) => {}
            () = hard_stop.cancelled() => {}
        }
    }
    child.kill();
    if let Err(e) = child.wait().await {
        tracing::warn!(error = %e, "reaping a handler process failed");
    }
}

/// Stops what is left of a handler whose root has exited (a zombie not
/// reaped yet, so its group's id is still ours) but whose `stdout`
/// something in its tree still holds: SIGTERM to the tree, up to `grace`
/// (or until `hard_stop`) for stdout to close, which says its holder is
/// gone, then SIGKILL to the whole tree, which reaps the root. The
/// stragglers are not our children: their parents, or init, reap them.
async fn stop_stragglers(
    mut tree: ProcessTree,
    grace: Duration,
    hard_stop: &CancellationToken,
    mut stdout: ChildStdout,
) {
    if tree.terminate() {
        let drained = async {
            let mut sink = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        };
        tokio::select! {
            _ = tokio::time::timeout(grace, drained) => {}
            () = hard_stop.cancelled() => {}
        }
    }
    tree.kill();
}

/// Where a program was looked for (every PATH directory) is for operators:
/// it is logged (and `check` prints it), and the model reads only "not
/// found on PATH" and what to do, since the directories tell a reader of
/// the conversation about the machine and its users.
fn for_the_model(tool: &str, program: &str, reason: String) -> String {
    let Some(cut) = reason.find(" (looked in ") else {
        return reason;
    };
    tracing::warn!(
        tool,
        program,
        reason,
        "an exec handler's program was not found"
    );
    format!(
        "{}; the sidecar's log says where it was looked for",
        &reason[..cut]
    )
}

fn spawn_reason(e: &std::io::Error, program: &Path) -> String {
    let batch = program
        .extension()
        .and_then(OsStr::to_str)
        .is_some_and(|x| x.eq_ignore_ascii_case("cmd") || x.eq_ignore_ascii_case("bat"));
    match e.kind() {
        ErrorKind::NotFound => format!("{} not found (was it removed?)", program.display()),
        ErrorKind::PermissionDenied => {
            format!(
                "{}: permission denied (is it executable?)",
                program.display()
            )
        }
        // Rust's std refuses a batch-file argument that cmd.exe would read
        // as something else (a quote, `%`, a line break...): a shell
        // injection, otherwise.
        ErrorKind::InvalidInput if batch => format!(
            "{} is a batch file, and one of the arguments cannot be passed to it safely ({e}): \
             run the program it wraps directly (e.g. `node` instead of `npx`)",
            program.display()
        ),
        _ => e.to_string(),
    }
}

fn describe_exit(status: ExitStatus) -> String {
    crate::os::describe_exit(status)
}

/// Appends at most `limit` bytes of `r` to `buf`; the flag says there was
/// more. Cancelling it loses nothing: `buf` holds all that was read.
async fn read_bounded(
    r: &mut (impl AsyncRead + Unpin),
    limit: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let cap = limit.saturating_add(1);
    loop {
        if buf.len() == buf.capacity() {
            // Room for a usual answer at once (a `Vec` grown from empty
            // reads 32 bytes first, so even a short answer took three
            // reads), then doubling, never much past the limit.
            buf.reserve(buf.len().max(8192).min(cap - buf.len()));
        }
        let room = u64::try_from(cap - buf.len()).unwrap_or(u64::MAX);
        // `read_buf` is cancel safe: a cancelled read has read nothing.
        if (&mut *r).take(room).read_buf(buf).await? == 0 {
            return Ok(false);
        }
        if buf.len() > limit {
            buf.truncate(limit);
            return Ok(true);
        }
    }
}

/// Logs stderr line by line and keeps its last `STDERR_TAIL_BYTES`.
async fn log_stderr(mut r: impl AsyncRead + Unpin, tool: String, tail: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = [0u8; 4096];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
            t.extend_from_slice(&chunk[..n]);
            let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
            t.drain(..excess);
        }
        for &b in &chunk[..n] {
            if b == b'\n' {
                emit(&tool, &line);
                line.clear();
            } else if line.len() < LOG_LINE_BYTES {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        emit(&tool, &line);
    }
}

fn emit(tool: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    tracing::info!(tool, "handler stderr: {}", text.trim_end_matches('\r'));
}

/// The stderr tail once the stream has closed (or `settled` has passed),
/// as text.
async fn take_tail(
    task: Option<tokio::task::JoinHandle<()>>,
    tail: &Arc<Mutex<Vec<u8>>>,
    settled: Instant,
) -> String {
    if let Some(mut t) = task {
        let _ = tokio::time::timeout_at(settled, &mut t).await;
        t.abort();
    }
    let bytes = tail.lock().unwrap_or_else(|e| e.into_inner()).clone();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

fn quote_start(out: &[u8]) -> String {
    let end = out.len().min(STDOUT_QUOTE_BYTES);
    String::from_utf8_lossy(&out[..end]).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_stop_past_the_limit() {
        let mut b = Vec::new();
        let over = read_bounded(&mut &b"hello"[..], 5, &mut b).await.unwrap();
        assert_eq!((b.as_slice(), over), (&b"hello"[..], false));
        let mut b = Vec::new();
        let over = read_bounded(&mut &b"hello!"[..], 5, &mut b).await.unwrap();
        assert_eq!((b.as_slice(), over), (&b"hello"[..], true));
    }

    #[tokio::test]
    async fn a_read_cut_short_keeps_what_it_read() {
        // The writer stays open, as a background job holding stdout does.
        let (mut w, mut r) = tokio::io::duplex(64);
        w.write_all(b"{\"output\":\"hi\"}").await.unwrap();
        let mut b = Vec::new();
        let cut = tokio::time::timeout(
            Duration::from_millis(50),
            read_bounded(&mut r, 1024, &mut b),
        )
        .await;
        assert!(cut.is_err(), "the read ended: {cut:?}");
        assert_eq!(b, b"{\"output\":\"hi\"}");
    }

    #[tokio::test]
    async fn the_stderr_tail_keeps_the_end() {
        let text = format!("{}\nlast line\n", "x".repeat(5000));
        let tail = Arc::new(Mutex::new(Vec::new()));
        log_stderr(text.as_bytes(), "t".into(), tail.clone()).await;
        let t = tail.lock().unwrap();
        assert_eq!(t.len(), STDERR_TAIL_BYTES);
        assert!(t.ends_with(b"x\nlast line\n"));
    }
}
