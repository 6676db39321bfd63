//! The `neko-sidecar status` command: reads a running sidecar's `/status`
//! and prints it for a person, or prints the raw JSON with `--json`.
//!
//! Exit codes (mapped by `commands`): 0 every desired tool is registered and
//! main_server is reachable (the `/readyz` verdict, so both always agree);
//! 1 not so; 2 the admin endpoint cannot be read or the config is bad.
//! Rendering is pure; only [`status`] does I/O.

use std::fmt::Write;
use std::path::Path;

use super::client::{AdminClient, ClientError, admin_url};
use super::history::{CallRecord, HistoryView};
use super::view::StatusView;
use crate::diag::plural;
use crate::mcp::Phase;

/// At most this much of a tool's last error goes into the table.
const ERROR_CHARS: usize = 80;

/// What the command prints, and whether the sidecar is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatusReport {
    pub text: String,
    pub ready: bool,
}

/// Reads `/status` from the sidecar of `config` (or at `admin`).
pub(crate) async fn status(
    config: &Path,
    admin: Option<&str>,
    json: bool,
    calls: bool,
) -> Result<StatusReport, ClientError> {
    let base = admin_url(config, admin)?;
    let client = AdminClient::new(base.clone())?;
    let (raw, view) = client.status().await?;
    let text = if calls {
        let raw = client.calls().await?;
        if json {
            format!("{}\n", raw.trim_end())
        } else {
            let history: HistoryView =
                serde_json::from_str(&raw).map_err(|e| ClientError::BadAnswer {
                    url: format!("{base}/ui/calls"),
                    what: format!("a document that is not a call history ({e})"),
                })?;
            render_calls(&history)
        }
    } else if json {
        let mut raw = raw;
        if !raw.ends_with('\n') {
            raw.push('\n');
        }
        raw
    } else {
        let mut text = render_status(&view);
        let _ = writeln!(text, "inspector page: {base}/ (open it in a browser)");
        text
    };
    Ok(StatusReport {
        text,
        ready: view.ready,
    })
}

/// The human-readable report.
pub(crate) fn render_status(v: &StatusView) -> String {
    let mut out = String::new();
    let ms = &v.main_server;
    let reach = match ms.reachable {
        Some(true) => format!(
            "reachable, last contact {}",
            ms.last_contact.as_deref().unwrap_or("-")
        ),
        Some(false) => format!(
            "UNREACHABLE ({}): {}",
            plural(ms.failed_attempts as usize, "failed attempt"),
            ms.last_error.as_deref().unwrap_or("unknown error")
        ),
        None => "not reached yet".to_owned(),
    };
    let _ = writeln!(out, "main_server {}: {reach}", ms.url);
    let registered = v
        .tools
        .iter()
        .filter(|t| t.state.name() == "registered")
        .count();
    // Without main_server, "registered" is what the last answer said.
    let as_of = if ms.reachable == Some(true) {
        ""
    } else {
        " (as of the last contact)"
    };
    let _ = writeln!(
        out,
        "sidecar {} (source {}), up {}: {registered} of {} tools registered{as_of}, {}",
        v.version,
        v.source,
        age(v.uptime_seconds),
        v.tools.len(),
        if v.ready { "ready" } else { "NOT READY" }
    );
    if !v.tools.is_empty() {
        out.push('\n');
        out.push_str(&tool_table(v));
    }
    if !v.mcp_servers.is_empty() {
        out.push_str("\nMCP servers:\n");
        for m in &v.mcp_servers {
            let phase = match m.phase {
                Phase::Ready => "ready".to_string(),
                Phase::Starting if m.attempt == 0 => "starting".to_string(),
                Phase::Starting | Phase::Restarting => format!(
                    "{} (attempt {})",
                    if m.phase == Phase::Starting {
                        "STARTING"
                    } else {
                        "RESTARTING"
                    },
                    m.attempt
                ),
                Phase::Stopped => "stopped".to_string(),
            };
            let protocol = m.protocol.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "  {}: {phase}, protocol {protocol}, {}, {} offered, {} rejected, {} restarts",
                m.name,
                m.transport,
                plural(m.tools.len(), "tool"),
                m.rejected.len(),
                m.restarts
            );
            if let Some(x) = &m.sign_in {
                let _ = writeln!(out, "    sign-in: {}", super::describe_sign_in(x));
            }
            if let Some(e) = &m.last_error {
                let _ = writeln!(out, "    last error: {}", shorten(e, 200));
            }
            for r in &m.rejected {
                let _ = writeln!(out, "    rejected {}: {}", r.name, r.reason);
            }
        }
    }
    let unbridged: Vec<_> = v
        .manifests
        .files
        .iter()
        .flat_map(|f| f.not_bridged.iter())
        .collect();
    if !unbridged.is_empty() {
        out.push_str("\nMCP servers not bridged (imported, never started):\n");
        for u in unbridged {
            let _ = writeln!(
                out,
                "  {} ({}, {}): {}",
                u.name, u.transport, u.at, u.reason
            );
        }
    }
    let problems: Vec<&str> = v
        .manifests
        .files
        .iter()
        .flat_map(|f| f.diagnostics.iter())
        .chain(v.manifests.directories.iter())
        .filter(|d| d.severity == "error")
        .map(|d| d.text.as_str())
        .collect();
    if !problems.is_empty() {
        let _ = writeln!(
            out,
            "\nmanifest errors ({} in error, out of {}; a file in error keeps serving its last good version, if it had one):",
            plural(v.manifests.files_in_error, "file"),
            v.manifests.files.len()
        );
        for p in problems {
            let _ = writeln!(out, "  {p}");
        }
    }
    if !v.not_ready.is_empty() {
        out.push_str("\nnot ready:\n");
        for r in &v.not_ready {
            let _ = writeln!(out, "  - {r}");
        }
    }
    out
}

/// `status --calls`: the calls the model made, newest first, one block
/// each: what was sent and what the model read (both cut, sizes shown).
pub(crate) fn render_calls(h: &HistoryView) -> String {
    let mut out = String::new();
    if h.capacity == 0 {
        out.push_str("the call history is off ([admin] call_history = 0)\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{} held of {} since the start (the last {} are kept, in memory only), newest first",
        plural(h.calls.len(), "call"),
        h.recorded,
        h.capacity
    );
    for c in &h.calls {
        out.push('\n');
        out.push_str(&render_call(c));
    }
    out
}

fn render_call(c: &CallRecord) -> String {
    let mut out = String::new();
    let role = c.role.as_deref().unwrap_or("(all)");
    let _ = writeln!(
        out,
        "#{} {} {} role {role} by {}: {} in {} ms",
        c.seq, c.at, c.tool, c.by, c.outcome, c.duration_ms
    );
    let sized = |cut: &super::history::Cut| {
        let text = shorten(&cut.text.replace('\n', " "), CALL_TEXT_CHARS);
        if cut.cut || text.ends_with('…') {
            format!("{text} ({} bytes)", cut.bytes)
        } else {
            text
        }
    };
    let _ = writeln!(out, "  arguments: {}", sized(&c.arguments));
    let _ = writeln!(out, "  the model read: {}", sized(&c.answer));
    for p in &c.pictures {
        let kept = if p.data_b64.is_some() {
            ""
        } else {
            ", not kept (the history's picture budget)"
        };
        let _ = writeln!(
            out,
            "  a picture: {}, {} bytes of base64{kept}",
            p.mime, p.bytes
        );
    }
    out
}

/// At most this much of a call's arguments or answer goes on its line.
const CALL_TEXT_CHARS: usize = 160;

fn tool_table(v: &StatusView) -> String {
    let header = [
        "TOOL",
        "ROLE",
        "STATE",
        "CALLS",
        "FAILURES",
        "SINCE",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 7]> = v
        .tools
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.role.clone().unwrap_or_else(|| "(all)".to_owned()),
                t.state.name().to_owned(),
                t.calls.to_string(),
                t.failures.to_string(),
                t.for_seconds.map_or_else(|| "-".to_owned(), age),
                t.last_error
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |e| shorten(e, ERROR_CHARS)),
            ]
        })
        .collect();
    let mut widths = header.map(width);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let mut out = String::new();
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - width(cell) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `42s`, `5m`, `3h12m`, `2d4h`: how long, to a glance.
fn age(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn shorten(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut cut: String = one_line.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

/// Terminal columns of `s`: East Asian wide characters (such as role names
/// like `小八`) take two, so the table stays aligned.
fn width(s: &str) -> usize {
    s.chars()
        .map(|c| {
            let c = c as u32;
            let wide = (0x1100..=0x115F).contains(&c)
                || (0x2E80..=0xA4CF).contains(&c)
                || (0xAC00..=0xD7A3).contains(&c)
                || (0xF900..=0xFAFF).contains(&c)
                || (0xFE30..=0xFE4F).contains(&c)
                || (0xFF00..=0xFF60).contains(&c)
                || (0xFFE0..=0xFFE6).contains(&c)
                || (0x1F300..=0x1FAFF).contains(&c)
                || (0x20000..=0x3FFFD).contains(&c);
            if wide { 2 } else { 1 }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::super::view::tests::sample_with;
    use super::super::view::{DiagnosticView, FileView, NotBridgedView, build};
    use super::*;
    use crate::registration::ToolState;

    #[test]
    fn the_report_has_a_server_line_a_table_and_the_problems() {
        let mut s = sample_with(&["get_weather", "roll_dice"]);
        s.registration.main_server.reachable = Some(false);
        s.registration.main_server.failed_attempts = 7;
        s.registration.main_server.last_error = Some("connection refused".into());
        s.registration.tools.get_mut("roll_dice").unwrap().state = ToolState::Conflict {
            owner: "plugin:other".into(),
            callback_url: None,
            same_source: false,
        };
        let mut v = build(&s);
        v.manifests.files_in_error = 1;
        v.manifests.files.push(FileView {
            path: "/m/bad.toml".into(),
            health: "error".into(),
            since: "2025-01-01T00:00:00Z".into(),
            serving_last_good: false,
            tools: vec![],
            not_bridged: vec![],
            diagnostics: vec![DiagnosticView {
                severity: "error".into(),
                path: "/m/bad.toml".into(),
                line: Some(3),
                col: Some(1),
                message: "boom".into(),
                text: "/m/bad.toml:3:1: error: boom".into(),
            }],
        });
        let text = render_status(&v);
        assert!(
            text.starts_with("main_server http://127.0.0.1:48911: UNREACHABLE (7 failed attempts): connection refused\n"),
            "{text}"
        );
        assert!(
            text.contains("0 of 2 tools registered (as of the last contact), NOT READY"),
            "{text}"
        );
        assert!(
            text.contains("\nmanifest errors (1 file in error, out of 1; "),
            "{text}"
        );
        let table: Vec<&str> = text.lines().skip(3).take(3).collect();
        assert_eq!(
            table[0],
            "TOOL         ROLE   STATE     CALLS  FAILURES  SINCE  LAST ERROR"
        );
        assert_eq!(
            table[2],
            "roll_dice    (all)  conflict  0      0         5s     the name is registered by source `plugin:other`"
        );
        assert!(
            text.contains("\n  /m/bad.toml:3:1: error: boom\n"),
            "{text}"
        );
        assert!(
            text.contains("\nnot ready:\n  - main_server is unreachable"),
            "{text}"
        );
    }

    #[test]
    fn wide_characters_count_twice_and_long_errors_are_cut() {
        assert_eq!(width("小八"), 4);
        assert_eq!(width("Lanlan"), 6);
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(age(59), "59s");
        assert_eq!(age(3725), "1h2m");
    }

    #[test]
    fn imported_servers_that_are_not_bridged_are_listed_with_their_reason() {
        let mut v = build(&sample_with(&["get_weather"]));
        v.manifests.files.push(FileView {
            path: "/m/import.toml".into(),
            health: "ok".into(),
            since: "2025-01-01T00:00:00Z".into(),
            serving_last_good: false,
            tools: vec![],
            not_bridged: vec![NotBridgedView {
                name: "search".into(),
                transport: "sse http://127.0.0.1:9000/sse".into(),
                reason: "no client for it".into(),
                at: "/n/plugin.toml:13:14".into(),
            }],
            diagnostics: vec![],
        });
        let text = render_status(&v);
        assert!(
            text.contains("\nMCP servers not bridged (imported, never started):\n  search (sse http://127.0.0.1:9000/sse, /n/plugin.toml:13:14): no client for it\n"),
            "{text}"
        );
    }
}
