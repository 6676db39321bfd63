//! The last words of a stdio MCP server: the end of its stderr, kept
//! (bounded) so that a server that fails to start or dies says why in the
//! failure reason itself (status, `/status`, the inspector, `check
//! --probe`, the log's summary line), not only in log lines interleaved
//! with retries; with a hint for the common causes (a Python module or a
//! Node package not installed, a server that exits at once and says
//! nothing, a program not found).
//!
//! Nothing here reads a pipe: `process.rs` feeds the lines it logs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Lines kept: a Python traceback's end and its exception fit.
const KEEP_LINES: usize = 40;
/// Bytes kept, all lines together: the oldest go first.
const KEEP_BYTES: usize = 8 * 1024;
/// Lines quoted in a reason: the exception and what led to it.
const QUOTE_LINES: usize = 3;
/// A quoted line longer than this is cut.
const QUOTE_CHARS: usize = 200;
/// A process whose stderr closed sooner than this after its start
/// "exited at once".
const AT_ONCE: Duration = Duration::from_secs(2);
/// How long a reason waits for the stderr of an exited server to be read
/// to its end (the reader is a task of its own; the pipe closes with the
/// process unless something it started holds it).
const DRAIN_WAIT: Duration = Duration::from_millis(300);

/// The end of one server's stderr, shared by the task that reads it and
/// the session that explains a failure. A new process of the server
/// starts it afresh (`restart`).
#[derive(Clone, Debug, Default)]
pub(crate) struct StderrTail {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    closed: Notify,
}

#[derive(Debug, Default)]
struct State {
    lines: VecDeque<String>,
    bytes: usize,
    /// Which process the lines are of (0: none started yet); a reader of
    /// an older one writes nothing more.
    generation: u64,
    /// When the current process started.
    started: Option<Instant>,
    /// How long after its start the current process's stderr was read to
    /// its end (it exited, or at least writes there no more).
    closed: Option<Duration>,
}

/// The writing end, one per process: `push` each line, dropped at the end
/// of the pipe.
#[derive(Debug)]
pub(crate) struct TailWriter {
    tail: StderrTail,
    generation: u64,
}

impl StderrTail {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets what an earlier process wrote: the lines of the one about
    /// to start go to the returned writer.
    pub(crate) fn restart(&self) -> TailWriter {
        let mut s = self.state();
        s.lines.clear();
        s.bytes = 0;
        s.generation += 1;
        s.started = Some(Instant::now());
        s.closed = None;
        TailWriter {
            tail: self.clone(),
            generation: s.generation,
        }
    }

    /// What the current process's stderr says about a failure: `""`, or
    /// `"; its stderr ended with: …"` and a hint. Waits a little for the
    /// end of a pipe still being read.
    pub(crate) async fn explain(&self) -> String {
        let closed = self.inner.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        let pending = {
            let s = self.state();
            if s.generation == 0 {
                return String::new();
            }
            s.closed.is_none()
        };
        if pending {
            let _ = tokio::time::timeout(DRAIN_WAIT, closed).await;
        }
        let s = self.state();
        let lines: Vec<&str> = s.lines.iter().map(String::as_str).collect();
        explain_lines(&lines, s.closed)
    }
}

impl TailWriter {
    /// Keeps `line` (without its newline), dropping the oldest past the
    /// bounds.
    pub(crate) fn push(&self, line: &str) {
        let mut s = self.tail.state();
        if s.generation != self.generation {
            return;
        }
        s.bytes += line.len();
        s.lines.push_back(line.to_string());
        while s.lines.len() > KEEP_LINES || (s.bytes > KEEP_BYTES && s.lines.len() > 1) {
            if let Some(old) = s.lines.pop_front() {
                s.bytes -= old.len();
            }
        }
    }
}

impl Drop for TailWriter {
    fn drop(&mut self) {
        let mut s = self.tail.state();
        if s.generation == self.generation {
            s.closed = Some(s.started.map(|t| t.elapsed()).unwrap_or_default());
            drop(s);
            self.tail.inner.closed.notify_waiters();
        }
    }
}

/// The reason's stderr part: the last meaningful lines, quoted, and a hint
/// for what they show. `closed`: how long after the start the stderr was
/// read to its end (the process is gone, or at least no longer writes
/// there), if it was.
fn explain_lines(lines: &[&str], closed: Option<Duration>) -> String {
    let meaningful: Vec<&str> = lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    if meaningful.is_empty() {
        let when = match closed {
            None => return String::new(),
            Some(d) if d < AT_ONCE => "exited at once".to_string(),
            Some(d) => format!("ended after {} ms", d.as_millis()),
        };
        return format!(
            "; it {when} and wrote nothing on stderr (hint: run its `command` by hand, in its `cwd` and with its `env`, to see what it does)"
        );
    }
    let from = meaningful.len().saturating_sub(QUOTE_LINES);
    let quoted: Vec<String> = meaningful[from..].iter().map(|l| cut(l)).collect();
    let mut out = format!("; its stderr ended with: {}", quoted.join(" | "));
    if let Some(hint) = meaningful.iter().rev().find_map(|l| hint(l)) {
        out.push_str(&format!(" (hint: {hint})"));
    }
    out
}

fn cut(line: &str) -> String {
    match line.char_indices().nth(QUOTE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// What a line of stderr says to do, for the causes users meet first.
fn hint(line: &str) -> Option<String> {
    if let Some(module) = quoted_after(line, "ModuleNotFoundError: No module named ") {
        // `a.b` is installed as part of `a`.
        let top = module.split('.').next().unwrap_or(module);
        return Some(format!(
            "the Python module `{module}` is not installed for the interpreter the server runs with: install the package that provides it with that interpreter (`python3 -m pip install {top}`, or `py -m pip install {top}` on Windows), or point `command` at the virtual environment that has it"
        ));
    }
    if let Some(module) = quoted_after(line, "Cannot find module ") {
        return Some(format!(
            "the Node.js module `{module}` is not installed where the server looks for it: `npm install` in the server's folder, or run it through `npx`"
        ));
    }
    None
}

/// The quoted name after `marker` in `line` ('x' or "x").
fn quoted_after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &rest[1..];
    Some(&rest[..rest.find(quote)?])
}

/// A hint for a program that could not be started at all.
pub(crate) fn hint_not_started(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            " (hint: install it, or give its full path as the first word of `command`)"
        }
        std::io::ErrorKind::PermissionDenied => {
            " (hint: the file is not executable by the sidecar's user: `chmod +x` it, or run it through its interpreter)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACEBACK: &[&str] = &[
        "Traceback (most recent call last):",
        "  File \"/srv/weather.py\", line 3, in <module>",
        "    from mcp.server.fastmcp import FastMCP",
        "ModuleNotFoundError: No module named 'mcp'",
    ];

    #[test]
    fn a_python_traceback_gives_its_exception_and_the_module_to_install() {
        let e = explain_lines(TRACEBACK, Some(Duration::ZERO));
        assert!(
            e.starts_with("; its stderr ended with: ")
                && e.contains("from mcp.server.fastmcp import FastMCP | ModuleNotFoundError: No module named 'mcp'"),
            "{e}"
        );
        assert!(!e.contains("Traceback"), "only the last lines: {e}");
        assert!(e.contains("python3 -m pip install mcp"), "{e}");
    }

    #[test]
    fn a_dotted_module_is_installed_by_its_top_package() {
        let e = explain_lines(
            &["ModuleNotFoundError: No module named \"yaml.loader\""],
            Some(Duration::ZERO),
        );
        assert!(
            e.contains("`yaml.loader`") && e.contains("pip install yaml`"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_node_module_is_named() {
        let e = explain_lines(
            &["Error: Cannot find module '@modelcontextprotocol/sdk'"],
            Some(Duration::ZERO),
        );
        assert!(
            e.contains("`@modelcontextprotocol/sdk`") && e.contains("npm install"),
            "{e}"
        );
    }

    #[test]
    fn silence_is_reported_once_the_pipe_closed_and_not_before() {
        let quick = explain_lines(&[], Some(Duration::from_millis(30)));
        assert!(
            quick.starts_with("; it exited at once and wrote nothing on stderr (hint: "),
            "{quick}"
        );
        let late = explain_lines(&["", "  "], Some(Duration::from_secs(5)));
        assert!(
            late.starts_with("; it ended after 5000 ms and wrote nothing on stderr"),
            "{late}"
        );
        assert_eq!(explain_lines(&[], None), "");
    }

    #[test]
    fn other_lines_are_quoted_without_a_hint() {
        let e = explain_lines(&["listening", "fatal: no config"], None);
        assert_eq!(e, "; its stderr ended with: listening | fatal: no config");
    }

    #[tokio::test]
    async fn a_tail_never_started_explains_nothing_at_once() {
        assert_eq!(StderrTail::default().explain().await, "");
    }

    #[tokio::test]
    async fn the_tail_is_bounded_and_a_restart_forgets_the_old_process() {
        let tail = StderrTail::default();
        let w = tail.restart();
        for i in 0..100 {
            w.push(&format!("line {i}"));
        }
        w.push(&"x".repeat(10_000));
        {
            let s = tail.state();
            assert_eq!(s.lines.len(), 1, "one line past the byte bound stays alone");
        }
        w.push("last");
        {
            let s = tail.state();
            assert!(s.lines.len() <= KEEP_LINES && s.bytes <= KEEP_BYTES + 10_000);
            assert_eq!(s.lines.back().map(String::as_str), Some("last"));
        }
        let fresh = tail.restart();
        w.push("from the old process");
        drop(w);
        fresh.push("new");
        drop(fresh);
        assert_eq!(tail.explain().await, "; its stderr ended with: new");
    }
}
