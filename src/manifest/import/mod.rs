//! `[[mcp_import]]`: the MCP servers a user already keeps in another
//! program's file, made `[[mcp_server]]`s without copying them.
//!
//! The file is recognised from its content: JSON (comments allowed) with
//! `mcpServers` (Claude Desktop, Cursor, Claude Code, N.E.K.O's import
//! dialog), `servers` (VS Code's `.vscode/mcp.json`) or `mcp.servers` (VS
//! Code's settings); or TOML with `[mcp_servers.NAME]` tables (N.E.K.O's
//! `mcp_adapter` `plugin.toml`). Each enabled server becomes a
//! `McpServerSpec` with the usual defaults, changed by the overrides of the
//! `[[mcp_import]]` (per server, under `servers.NAME`), so the user's file
//! stays the one they edit. A server the sidecar cannot reach (the legacy
//! SSE transport, https, a remote host) is an [`UnbridgedServer`]: a
//! warning and a line of `status`, never an error, since the file is
//! another program's and the other servers in it still work.
//!
//! Problems of the imported file are located in it (line and column) and
//! sorted at the `[[mcp_import]]` that named it. The file is an input of
//! the manifest (`reload::content`), so an edit of it reloads the manifest,
//! keep-last-good included. This module reads files; it never starts a
//! server.

mod entry;
pub(crate) mod node;

use std::num::NonZeroUsize;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use self::entry::{EntryKind, Vars, read_entry};
use self::node::{Node, Value};
use super::fields::{
    LoadContext, MAX_TIMEOUT_SECONDS, read_filters, read_max_concurrency, read_prefix, read_role,
    read_startup_timeout, read_timeout,
};
use super::{
    DEFAULT_STARTUP_TIMEOUT_SECONDS, HttpOptions, McpServerSpec, McpTransport, Origin,
    UnbridgedServer,
};
use crate::config::absolutize;
use crate::diag::{Diagnostic, SourceText};
use crate::tomldoc::{self, TableReader};

/// Besides `path` and `servers`, settings for every server of the file
/// (a server's own overrides win).
const KEYS: &[&str] = &[
    "path",
    "servers",
    "include",
    "exclude",
    "role",
    "timeout_seconds",
    "startup_timeout_seconds",
    "max_concurrency",
    "ca_file",
    "proxy",
    "connect_timeout_seconds",
    "read_timeout_seconds",
    "oauth",
];
const OVERRIDE_KEYS: &[&str] = &[
    "enabled",
    "prefix",
    "include",
    "exclude",
    "role",
    "timeout_seconds",
    "startup_timeout_seconds",
    "max_concurrency",
    "ca_file",
    "proxy",
    "connect_timeout_seconds",
    "read_timeout_seconds",
    "oauth",
];

/// The client settings of a `url` server, each set on its own.
const HTTP_KEYS: [&str; 5] = [
    "ca_file",
    "proxy",
    "connect_timeout_seconds",
    "read_timeout_seconds",
    "oauth",
];

/// An imported file larger than this is not an MCP config.
const MAX_IMPORT_BYTES: u64 = 4 << 20;

/// What one `[[mcp_import]]` yields.
#[derive(Debug, Default)]
pub(crate) struct Imported {
    pub servers: Vec<McpServerSpec>,
    pub unbridged: Vec<UnbridgedServer>,
}

/// The imported file a `path` value names: `${VAR}`s from the
/// environment (`${APPDATA}` on Windows), `~/` is the user's home, a
/// relative path is relative to the manifest's folder. Used by the loader
/// and by `reload::content`, which must agree; `Err` says why a variable
/// cannot be expanded.
pub(crate) fn import_path(base: &Path, raw: &str) -> Result<PathBuf, String> {
    let raw = super::fields::expand(raw, |v| std::env::var(v).ok())?;
    Ok(match raw.strip_prefix("~/").zip(std::env::home_dir()) {
        Some((rest, home)) => absolutize(&home, rest),
        None => absolutize(base, &raw),
    })
}

/// Our settings for one server of the file (`[mcp_import.servers.NAME]`),
/// or for all of them (the `[[mcp_import]]` itself); `None`: not set.
#[derive(Debug, Default, Clone)]
struct Overrides {
    enabled: Option<bool>,
    prefix: Option<String>,
    include: Option<Option<Vec<String>>>,
    exclude: Option<Vec<String>>,
    role: Option<Option<String>>,
    timeout_seconds: Option<f64>,
    startup_timeout_seconds: Option<f64>,
    max_concurrency: Option<NonZeroUsize>,
    /// The client settings of a `url` server, and which of [`HTTP_KEYS`]
    /// were written (only those override).
    http: Option<(HttpOptions, [bool; 5])>,
}

impl Overrides {
    /// `into` with the client settings written here put over it.
    fn http_over(&self, mut into: HttpOptions) -> HttpOptions {
        if let Some((o, set)) = &self.http {
            if set[0] {
                into.ca_file = o.ca_file.clone();
            }
            if set[1] {
                into.proxy = o.proxy.clone();
            }
            if set[2] {
                into.connect_timeout = o.connect_timeout;
            }
            if set[3] {
                into.read_timeout = o.read_timeout;
            }
            if set[4] {
                into.oauth = o.oauth.clone();
            }
        }
        into
    }
}

/// Reads the settings of `r` (already denied unknown keys); `None` after
/// an error.
fn read_overrides(r: &mut TableReader<'_, '_>, base: &Path) -> Option<Overrides> {
    let before = r.diags.iter().filter(|d| d.is_error()).count();
    let enabled = r.boolean("enabled").map(|(b, _)| b);
    let prefix = if r.get("prefix").is_some() {
        read_prefix(r)
    } else {
        None
    };
    let (include, exclude) = read_filters(r);
    let set = |key: &str, r: &TableReader<'_, '_>| r.get(key).is_some();
    let role = if set("role", r) { read_role(r) } else { None };
    let timeout_seconds = if set("timeout_seconds", r) {
        read_timeout(r)
    } else {
        None
    };
    let startup_timeout_seconds = if set("startup_timeout_seconds", r) {
        read_startup_timeout(r)
    } else {
        None
    };
    let max_concurrency = read_max_concurrency(r);
    let written = HTTP_KEYS.map(|k| r.get(k).is_some());
    let http = if written.contains(&true) {
        super::remote::read_http_settings(r, base).map(|o| (o, written))
    } else {
        None
    };
    let o = Overrides {
        http,
        enabled,
        prefix,
        include: if set("include", r) { include } else { None },
        exclude: if set("exclude", r) { exclude } else { None },
        role,
        timeout_seconds,
        startup_timeout_seconds,
        max_concurrency,
    };
    (r.diags.iter().filter(|d| d.is_error()).count() == before).then_some(o)
}

/// Reads one `[[mcp_import]]` table at `span` of the manifest `src`.
pub(crate) fn read_import(
    src: &SourceText<'_>,
    table: &DeTable<'_>,
    span: Range<usize>,
    base: &Path,
    ctx: &LoadContext,
    diags: &mut Vec<Diagnostic>,
) -> Option<Imported> {
    let errors_before = diags.iter().filter(|d| d.is_error()).count();
    let anchor = src.position(&span);
    let mut r = TableReader::new(src, table, span, "this [[mcp_import]]", diags);
    r.deny_unknown(KEYS);
    let path = match r.string("path") {
        Some((p, sp)) if p.is_empty() => {
            r.error(
                &sp,
                "`path` of this [[mcp_import]] is empty: name the file that lists the MCP servers",
            );
            None
        }
        Some((p, sp)) => Some((p, sp)),
        None => {
            if r.get("path").is_none() {
                r.missing(
                    "path",
                    "the file that lists the MCP servers, e.g. path = \"~/.config/Claude/claude_desktop_config.json\" (absolute, ~/, or relative to this manifest)",
                );
            }
            None
        }
    };
    let defaults = read_overrides(&mut r, base);
    let mut per_server: Vec<(String, Range<usize>, Option<Overrides>)> = Vec::new();
    if let Some((t, _)) = r.table("servers") {
        for (k, v) in t.iter() {
            let name = k.get_ref().to_string();
            match v.get_ref() {
                DeValue::Table(ot) => {
                    let what = format!("the overrides of `{name}`");
                    let mut or = TableReader::new(r.src, ot, v.span(), what, r.diags);
                    or.deny_unknown(OVERRIDE_KEYS);
                    let o = read_overrides(&mut or, base);
                    per_server.push((name, k.span(), o));
                }
                other => {
                    let msg = format!(
                        "`servers.{name}` of this [[mcp_import]] must be a table of overrides (prefix, include, exclude, role, timeout_seconds, max_concurrency, enabled), found {}",
                        tomldoc::type_name(other)
                    );
                    r.error(&v.span(), msg);
                }
            }
        }
    }
    let (raw, path_span) = path?;
    let file = match import_path(base, &raw) {
        Ok(f) => f,
        Err(why) => {
            r.error(&path_span, format!("`path` of this [[mcp_import]]: {why}"));
            return None;
        }
    };
    let (text, list_kind) = read_list(&file, &raw, &path_span, &mut r)?;
    // Bad overrides fail the import, but the file is read all the same,
    // so that its own problems are reported in the same run.
    let mut ok = diags.iter().filter(|d| d.is_error()).count() == errors_before;
    let defaults = defaults.unwrap_or_default();

    // The imported file's own problems are located in it and sorted at
    // this [[mcp_import]].
    let mut theirs = Vec::new();
    let isrc = SourceText::new(&file, &text);
    let (entries, their_timeout) = match parse_list(&isrc, list_kind, &mut theirs) {
        Some(e) => e,
        None => {
            diags.extend(theirs.into_iter().map(|d| d.anchored(anchor)));
            return None;
        }
    };
    let env = |v: &str| std::env::var(v).ok();
    let vars = Vars {
        env: &env,
        home: std::env::home_dir(),
        workspace: Vars::workspace_of(&file),
    };
    let mut out = Imported::default();
    for (name, key_span, node) in &entries {
        let o = per_server
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, o)| o.clone());
        // Overrides in error were reported (and failed the import).
        let o = o.flatten().unwrap_or_default();
        if o.enabled == Some(false) {
            continue;
        }
        let at = isrc.position(key_span);
        let Some(kind) = read_entry(&isrc, name, node, &vars, ctx, &mut theirs) else {
            ok = false;
            continue;
        };
        let server_origin = Origin {
            file: file.clone(),
            line: at.line,
            col: at.col,
        };
        let local = our_name(name, &isrc, key_span, &mut theirs);
        match kind {
            EntryKind::Disabled => {}
            EntryKind::NotBridged { transport, reason } => {
                theirs.push(isrc.warning(
                    key_span,
                    format!("MCP server `{name}` ({transport}) is not bridged: {reason}"),
                ));
                out.unbridged.push(UnbridgedServer {
                    name: local,
                    transport,
                    reason,
                    origin: server_origin,
                });
            }
            EntryKind::Bridged(mut transport) => {
                if let McpTransport::Http { options, .. } = &mut transport {
                    *options = o.http_over(defaults.http_over(options.clone()));
                }
                let pick = |f: fn(&Overrides) -> bool| if f(&o) { &o } else { &defaults };
                out.servers.push(McpServerSpec {
                    prefix: o.prefix.clone().unwrap_or_else(|| format!("{local}_")),
                    name: local,
                    transport,
                    include: pick(|x| x.include.is_some()).include.clone().flatten(),
                    exclude: pick(|x| x.exclude.is_some())
                        .exclude
                        .clone()
                        .unwrap_or_default(),
                    timeout_seconds: pick(|x| x.timeout_seconds.is_some())
                        .timeout_seconds
                        .or(their_timeout)
                        .unwrap_or(30.0),
                    startup_timeout_seconds: pick(|x| x.startup_timeout_seconds.is_some())
                        .startup_timeout_seconds
                        .unwrap_or(DEFAULT_STARTUP_TIMEOUT_SECONDS),
                    role: pick(|x| x.role.is_some()).role.clone().flatten(),
                    max_concurrency: o.max_concurrency.or(defaults.max_concurrency),
                    origin: server_origin,
                });
            }
        }
    }
    for (name, sp, _) in &per_server {
        if !entries.iter().any(|(n, _, _)| n == name) {
            let msg = format!(
                "`servers.{name}` of this [[mcp_import]] names no server of {}: these overrides apply to nothing (servers there: {})",
                file.display(),
                if entries.is_empty() {
                    "none".to_string()
                } else {
                    entries
                        .iter()
                        .map(|(n, _, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
            diags.push(src.warning(sp, msg));
        }
    }
    ok &= !theirs.iter().any(Diagnostic::is_error);
    diags.extend(theirs.into_iter().map(|d| d.anchored(anchor)));
    ok.then_some(out)
}

/// The name a server of the file has here: its own when it is a valid
/// name, else with each other character made `_` (a warning says so).
/// Short enough that `NAME_` is a valid prefix.
fn our_name(
    name: &str,
    src: &SourceText<'_>,
    span: &Range<usize>,
    diags: &mut Vec<Diagnostic>,
) -> String {
    let mut local: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(62)
        .collect();
    if local.is_empty() || local == "." || local == ".." {
        local = format!("server{}", local.len());
    }
    if local != name {
        diags.push(src.warning(
            span,
            format!(
                "MCP server \"{name}\" is called `{local}` here (names allow at most 62 characters from A-Z a-z 0-9 _ . -): its tools are `{local}_…` unless [mcp_import.servers.\"{name}\"] sets a `prefix`"
            ),
        ));
    }
    local
}

#[derive(Debug, Clone, Copy)]
enum ListKind {
    Json,
    Toml,
}

/// Reads the imported file; its problems are located at `path` in the
/// manifest.
fn read_list(
    file: &Path,
    raw: &str,
    sp: &Range<usize>,
    r: &mut TableReader<'_, '_>,
) -> Option<(String, ListKind)> {
    let problem = match std::fs::metadata(file) {
        Ok(m) if !m.is_file() => Some("is not a regular file".to_string()),
        Ok(m) if m.len() > MAX_IMPORT_BYTES => Some(format!(
            "is {} bytes: an MCP server list is at most {MAX_IMPORT_BYTES}",
            m.len()
        )),
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some("does not exist (the program that writes it may not have yet: add a server there first)".to_string())
        }
        Err(e) => Some(format!("cannot be read: {e}")),
    };
    let text = match problem {
        None => match crate::diag::read_utf8(file, "the imported MCP server list") {
            Ok(t) => t,
            Err(d) => {
                r.diags.push(d);
                return None;
            }
        },
        Some(p) => {
            let msg = format!(
                "the file \"{raw}\" of this [[mcp_import]] ({}) {p}",
                file.display()
            );
            r.error(sp, msg);
            return None;
        }
    };
    let first = text
        .trim_start_matches('\u{feff}')
        .trim_start()
        .chars()
        .next();
    let kind = match first {
        Some('{') | Some('/') => ListKind::Json,
        _ => ListKind::Toml,
    };
    Some((text, kind))
}

/// One server of an imported file: its name, the span of its key, its value.
type Entry = (String, Range<usize>, Node);

/// The server entries of an imported file, and the call timeout it sets
/// for all of them (N.E.K.O's `[mcp_adapter] tool_timeout`), which is the
/// default of ours.
fn parse_list(
    src: &SourceText<'_>,
    kind: ListKind,
    diags: &mut Vec<Diagnostic>,
) -> Option<(Vec<Entry>, Option<f64>)> {
    // A UTF-8 byte order mark (Windows editors write one) is blank.
    let bom = if src.text.starts_with('\u{feff}') {
        3
    } else {
        0
    };
    let root = match kind {
        ListKind::Json => match node::parse_jsonc(&src.text[bom..]) {
            Ok(mut n) => {
                shift(&mut n, bom);
                n
            }
            Err(e) => {
                let at = bom + e.at;
                diags.push(src.error(&(at..at), format!("not JSON: {}", e.message)));
                return None;
            }
        },
        ListKind::Toml => match tomldoc::parse(src) {
            Ok(doc) => Node::from_toml(&DeValue::Table(doc.get_ref().clone()), doc.span()),
            Err(d) => {
                diags.push(d);
                return None;
            }
        },
    };
    let (list, expected) = match kind {
        ListKind::Json => {
            let list = root
                .get("mcpServers")
                .or_else(|| root.get("servers"))
                .or_else(|| root.get("mcp").and_then(|m| m.get("servers")));
            (
                list,
                "an object `mcpServers` (Claude Desktop, Cursor, N.E.K.O's import) or `servers` (VS Code's .vscode/mcp.json) at the top",
            )
        }
        ListKind::Toml => (
            root.get("mcp_servers"),
            "a table [mcp_servers] with one [mcp_servers.NAME] per server (N.E.K.O's mcp_adapter plugin.toml)",
        ),
    };
    let Some(list) = list else {
        let at = root.span.start;
        diags.push(src.error(
            &(at..at),
            format!("no MCP server list here: expected {expected}"),
        ));
        return None;
    };
    let tool_timeout = root
        .get("mcp_adapter")
        .and_then(|a| a.get("tool_timeout"))
        .and_then(|t| match t.value {
            Value::Number(n) if n > 0.0 && n <= MAX_TIMEOUT_SECONDS => Some(n),
            Value::Number(n) if n > MAX_TIMEOUT_SECONDS => {
                diags.push(src.warning(
                    &t.span,
                    format!("`tool_timeout` {n} is past main_server's limit: the sidecar uses {MAX_TIMEOUT_SECONDS} s for these servers' tools"),
                ));
                Some(MAX_TIMEOUT_SECONDS)
            }
            _ => None,
        });
    match &list.value {
        Value::Object(entries) => Some((entries.clone(), tool_timeout)),
        _ => {
            diags.push(src.error(
                &list.span,
                format!(
                    "the MCP server list must be an object of servers by name, found {}",
                    list.type_name()
                ),
            ));
            None
        }
    }
}

/// Moves every span of `n` by `by` bytes.
fn shift(n: &mut Node, by: usize) {
    if by == 0 {
        return;
    }
    n.span = n.span.start + by..n.span.end + by;
    match &mut n.value {
        Value::Array(items) => items.iter_mut().for_each(|i| shift(i, by)),
        Value::Object(entries) => {
            for (_, ksp, v) in entries.iter_mut() {
                *ksp = ksp.start + by..ksp.end + by;
                shift(v, by);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
