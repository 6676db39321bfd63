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
//!
//! And every line keeps to a budget ([`LogBudget`]), since what it quotes
//! may come from outside (a tool name an MCP server chose, a reason it
//! gave): control characters are shown escaped (`\n`, `\u{1b}`), so no
//! text can forge a line or drive a terminal; a line longer than
//! [`MAX_LINE_BYTES`] is cut, saying its length; and each source (the
//! `mcp_server` or else the `tool` a line names) writes at most
//! [`LINES_PER_SECOND`] lines a second after a burst of [`BURST_LINES`],
//! the rest dropped and counted in a line of their own once its source
//! may write again.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Instant;

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
    let ansi = format == LogFormat::Text
        && std::env::var_os("JOURNAL_STREAM").is_none()
        && std::io::stderr().is_terminal();
    ANSI.store(ansi, Ordering::Relaxed);
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
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
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
        let text = scrub(&text);
        let out = BUDGET.lock().unwrap_or_else(|e| e.into_inner()).admit(
            &text,
            Instant::now(),
            ANSI.load(Ordering::Relaxed),
        );
        if !out.is_empty() {
            let _ = std::io::stderr().lock().write_all(out.as_bytes());
        }
    }
}

/// Whether lines carry colour codes (a text log on a terminal): those
/// escapes are the formatter's own and are kept.
static ANSI: AtomicBool = AtomicBool::new(false);
/// The budget every line of this process keeps to.
static BUDGET: Mutex<LogBudget> = Mutex::new(LogBudget::new());

/// A longer line is cut to this many bytes, its length said.
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// Lines a second one source may write once its burst is spent.
pub const LINES_PER_SECOND: f64 = 20.0;
/// Lines one source may write at once.
pub const BURST_LINES: f64 = 100.0;
/// Sources followed one by one; lines of further sources share one budget.
const MAX_SOURCES: usize = 256;

/// The budget of log lines: escaping, length and rate per source (see
/// the module's comment). Pure but for the clock it is given.
#[derive(Debug)]
pub struct LogBudget {
    sources: Option<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: u64,
}

impl Default for LogBudget {
    fn default() -> Self {
        Self::new()
    }
}

impl LogBudget {
    pub const fn new() -> Self {
        Self { sources: None }
    }

    /// What to write for the formatted `line` at `now`: the line escaped
    /// and cut, preceded by the count of its source's lines dropped before
    /// it, or nothing when its source is over its rate. `ansi`: the line's
    /// colour codes are the formatter's own.
    pub fn admit(&mut self, line: &str, now: Instant, ansi: bool) -> String {
        let plain;
        let source = if ansi {
            plain = without_colours(line);
            source_of(&plain)
        } else {
            source_of(line)
        };
        let mut note = String::new();
        if let Some(source) = source {
            let sources = self.sources.get_or_insert_with(HashMap::new);
            let key = if sources.len() >= MAX_SOURCES && !sources.contains_key(source) {
                "(other sources)"
            } else {
                source
            };
            let bucket = sources.entry(key.to_owned()).or_insert(Bucket {
                tokens: BURST_LINES,
                at: now,
                dropped: 0,
            });
            let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
            bucket.tokens = (bucket.tokens + elapsed * LINES_PER_SECOND).min(BURST_LINES);
            bucket.at = now;
            if bucket.tokens < 1.0 {
                bucket.dropped += 1;
                return String::new();
            }
            bucket.tokens -= 1.0;
            if bucket.dropped > 0 {
                let words = format!(
                    "{} log lines of {} were dropped: more than {LINES_PER_SECOND} a second after a burst of {BURST_LINES}",
                    bucket.dropped,
                    escaped(key, false)
                );
                note = if line.starts_with('{') {
                    serde_json::json!({"level": "WARN", "message": words, "dropped": bucket.dropped, "source": key})
                        .to_string()
                } else {
                    words
                };
                note.push('\n');
                bucket.dropped = 0;
            }
        }
        note.push_str(&cut(&escaped(
            line.strip_suffix('\n').unwrap_or(line),
            ansi,
        )));
        note.push('\n');
        note
    }
}

/// The source a formatted line names: its `mcp_server`, else its `tool`
/// (text `key=value` or JSON `"key":"value"`).
fn source_of(line: &str) -> Option<&str> {
    ["mcp_server", "tool"].into_iter().find_map(|key| {
        for (prefix, end) in [(format!("{key}="), ' '), (format!("\"{key}\":\""), '"')] {
            let mut from = 0;
            while let Some(at) = line[from..].find(&prefix) {
                let start = from + at;
                // A whole key: at the start or after a separator.
                let whole = start == 0 || line[..start].ends_with([' ', ',', '{']);
                let value_at = start + prefix.len();
                if whole {
                    let rest = &line[value_at..];
                    let value = &rest[..rest.find([end, '\n']).unwrap_or(rest.len())];
                    return Some(value.get(..256).unwrap_or(value));
                }
                from = value_at;
            }
        }
        None
    })
}

/// `text` with every control character shown as an escape (`\n`, `\t`,
/// `\u{1b}`); with `ansi`, the colour codes (`ESC [ digits ; m`) kept.
fn escaped(text: &str, ansi: bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if ansi && c == '\u{1b}' {
            if let Some(len) = colour_code(rest) {
                out.push_str(&rest[..len]);
                rest = &rest[len..];
                continue;
            }
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

/// Every string of `value` longer than a quarter of [`MAX_LINE_BYTES`]
/// cut to that, saying its length.
fn cut_strings(value: &mut serde_json::Value) {
    const MAX: usize = MAX_LINE_BYTES / 4;
    match value {
        serde_json::Value::String(s) if s.len() > MAX => {
            let mut end = MAX;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            *s = format!("{}… (cut: {} bytes)", &s[..end], s.len());
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(cut_strings),
        serde_json::Value::Object(map) => map.values_mut().for_each(cut_strings),
        _ => {}
    }
}

/// `line` without its colour codes.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find('\u{1b}') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        match colour_code(rest) {
            Some(len) => rest = &rest[len..],
            None => {
                out.push('\u{1b}');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of the SGR colour code `text` starts with, if it does.
fn colour_code(text: &str) -> Option<usize> {
    let body = text.strip_prefix("\u{1b}[")?;
    let digits = body
        .find(|c: char| !(c.is_ascii_digit() || c == ';'))
        .unwrap_or(body.len());
    (body[digits..].starts_with('m')).then_some(2 + digits + 1)
}

/// `line` cut to [`MAX_LINE_BYTES`], saying its length when it was. A
/// JSON line stays JSON: its long strings are cut instead.
fn cut(line: &str) -> std::borrow::Cow<'_, str> {
    if line.len() <= MAX_LINE_BYTES {
        return std::borrow::Cow::Borrowed(line);
    }
    if let Ok(mut value) = serde_json::from_str::<serde_json::Value>(line) {
        cut_strings(&mut value);
        let text = value.to_string();
        if text.len() <= MAX_LINE_BYTES * 2 {
            return std::borrow::Cow::Owned(text);
        }
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}… (cut: the line was {} bytes)",
        &line[..end],
        line.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_text_cannot_forge_a_line_or_drive_a_terminal() {
        let mut b = LogBudget::new();
        let now = Instant::now();
        let line = "WARN not offered tool=a\nERROR forged\u{0}\u{1b}]0;title\u{7}\n";
        assert_eq!(
            b.admit(line, now, false),
            "WARN not offered tool=a\\nERROR forged\\u{0}\\u{1b}]0;title\\u{7}\n"
        );
        // On a terminal the formatter's colours stay, nothing else does.
        let coloured = "\u{1b}[33mWARN\u{1b}[0m tool=x \u{1b}[2J\n";
        assert_eq!(
            b.admit(coloured, now, true),
            "\u{1b}[33mWARN\u{1b}[0m tool=x \\u{1b}[2J\n"
        );
    }

    #[test]
    fn a_long_line_is_cut_saying_its_length() {
        let mut b = LogBudget::new();
        let line = format!("INFO name={}\n", "é".repeat(3 * MAX_LINE_BYTES));
        let out = b.admit(&line, Instant::now(), false);
        assert!(out.len() < MAX_LINE_BYTES + 64, "{}", out.len());
        assert!(
            out.ends_with(&format!("… (cut: the line was {} bytes)\n", line.len() - 1)),
            "{}",
            &out[out.len() - 60..]
        );
        let json = serde_json::json!({"level": "WARN", "tool": "x".repeat(5_000_000)}).to_string();
        let out = b.admit(&format!("{json}\n"), Instant::now(), false);
        let back: serde_json::Value = serde_json::from_str(&out).expect("still JSON");
        assert!(
            back["tool"]
                .as_str()
                .unwrap()
                .ends_with("… (cut: 5000000 bytes)")
        );
    }

    #[test]
    fn each_source_has_its_rate_and_what_was_dropped_is_counted() {
        let mut b = LogBudget::new();
        let t0 = Instant::now();
        let noisy = "WARN x mcp_server=flood tool=t1 changed\n";
        let written = (0..1000)
            .filter(|_| !b.admit(noisy, t0, false).is_empty())
            .count();
        assert_eq!(written, BURST_LINES as usize);
        // Another source is not held back by it; JSON lines are read too.
        let other = "{\"level\":\"INFO\",\"mcp_server\":\"calm\"}\n";
        assert_eq!(b.admit(other, t0, false), other);
        // A second later the source may write again, the count first.
        let out = b.admit(noisy, t0 + std::time::Duration::from_secs(1), false);
        assert_eq!(
            out,
            format!(
                "900 log lines of flood were dropped: more than 20 a second after a burst of 100\n{noisy}"
            )
        );
        // Coloured field names (a terminal's) are read too.
        let coloured = "\u{1b}[3mmcp_server\u{1b}[0m\u{1b}[2m=\u{1b}[0mflood x\n";
        assert_eq!(source_of(&without_colours(coloured)), Some("flood"));
        // Lines that name no source are our own: never dropped.
        for _ in 0..1000 {
            assert!(!b.admit("INFO reload done\n", t0, false).is_empty());
        }
    }

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
