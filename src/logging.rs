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
//! else: [`LossyStderr`] swallows the write error, which tracing-subscriber
//! would otherwise report with an `eprintln!` that panics on the same
//! broken pipe, in whatever task was logging (the shutdown's, then).

use std::io::IsTerminal;

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
        .with_writer(|| LossyStderr)
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

/// stderr, whose write errors are dropped with the line: a daemon must not
/// stop working, or panic, because nobody reads its log any more.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
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
