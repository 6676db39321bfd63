//! Log output: readable text on a terminal, plain text for journald (no
//! colour codes when stderr is not a TTY), or JSON lines.
//!
//! The level comes from, in order: the `--log-level` flag, `RUST_LOG`, the
//! config's `[log] level`. This module only installs the subscriber, and
//! depends on no other module of the crate (the config reads its
//! [`LogFormat`] and checks a level with [`parse_filter`]).
//!
//! A log whose reader is gone (stderr a pipe of a parent that died, as
//! with N.E.K.O's plugin killed outright) loses its lines and nothing
//! else: [`Scrubbed`] swallows the write error, which tracing-subscriber
//! would otherwise report with an `eprintln!` that panics on the same
//! broken pipe, in whatever task was logging (the shutdown's, then).
//!
//! Every line passes through [`Scrubbed`] on its way to stderr: the
//! secrets given to [`keep_out`] (an MCP server's header values and URL
//! query values) are replaced by `…` there, whichever crate wrote the line
//! (rmcp logs a failed request with its whole URL).

use std::io::{IsTerminal, Write};
use std::sync::RwLock;

use tracing_subscriber::EnvFilter;

/// How log lines are written: `[log] format` and `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. Call once, from the binary. A second
/// call (as in tests that start several daemons in one process) is a no-op.
pub fn init(format: LogFormat, config_level: &str, flag_level: Option<&str>) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let chosen = [flag_level, rust_log.as_deref(), Some(config_level)]
        .into_iter()
        .flatten()
        .find(|d| parse_filter(d).is_some())
        .unwrap_or("info");
    // rmcp narrates every session at info ("Service initialized", each
    // notification); our own lines say what an operator needs. Its
    // warnings stay, and a filter that names rmcp decides for itself.
    let filter = if chosen.contains("rmcp") {
        parse_filter(chosen)
    } else {
        parse_filter(&format!("{chosen},rmcp=warn"))
    }
    .unwrap_or_else(|| EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| Scrubbed(Vec::new()))
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        // journald stamps every line itself; a second timestamp is noise.
        LogFormat::Text if std::env::var_os("JOURNAL_STREAM").is_some() => {
            builder.with_ansi(false).without_time().try_init()
        }
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Parses tracing filter directives (`info`, `neko_sidecar=debug,warn`)
/// without panicking. tracing-subscriber 0.3 slices each directive with
/// offsets taken from its trimmed form, so a directive with whitespace
/// before a non-ASCII character (`" éé=info"`) panics instead of parsing.
/// Each directive is trimmed first, as the parser trims it anyway, so the
/// meaning is the same. Every filter the sidecar builds goes through here.
pub fn parse_filter(directives: &str) -> Option<EnvFilter> {
    let trimmed: Vec<&str> = directives.split(',').map(str::trim).collect();
    EnvFilter::try_new(trimmed.join(",")).ok()
}

/// The texts no log line may hold.
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Keeps `secrets` out of every later log line. They stay kept out for the
/// process's life (a server's old key as well as its new one).
pub fn keep_out(secrets: &[String]) {
    let mut all = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    for s in secrets {
        if !s.is_empty() && !all.contains(s) {
            all.push(s.clone());
        }
    }
    // Longest first: a value is replaced whole before any part of it.
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// `text` with every secret of [`keep_out`] replaced by `…`.
pub fn scrub(text: &str) -> std::borrow::Cow<'_, str> {
    let all = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    if !all.iter().any(|s| text.contains(s.as_str())) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in all.iter() {
        out = out.replace(s.as_str(), "…");
    }
    std::borrow::Cow::Owned(out)
}

/// One event's line, written to stderr scrubbed when the formatter is
/// done with it (tracing-subscriber makes one writer per event).
struct Scrubbed(Vec<u8>);

impl Write for Scrubbed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Scrubbed {
    /// A write error (nobody reads the log any more) drops the line: a
    /// daemon must not stop working, or panic, for that.
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let _ = std::io::stderr().lock().write_all(scrub(&text).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_out_secret_is_scrubbed_whole_before_its_parts() {
        keep_out(&["k-123".to_string(), "Bearer k-123-long".to_string()]);
        assert_eq!(
            scrub("url (https://h/sse?key=k-123) auth Bearer k-123-long"),
            "url (https://h/sse?key=…) auth …"
        );
        assert!(matches!(
            scrub("nothing here"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
