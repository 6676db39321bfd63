//! Reading one `[[mcp_server]]` table into an `McpServerSpec`, with every
//! problem located, and the `${VAR}` expansion of its `env` and `headers`.
//!
//! `${VAR}` is taken from the sidecar's own environment at load time, so a
//! secret (a bearer token, an API key) stays out of the manifest; a variable
//! that is not set is an error of the file, like any other, so the file's
//! last good version stays in use. Nothing here starts a server.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::fields::{
    LoadContext, expand, origin, read_command, read_cwd, read_filters, read_max_concurrency,
    read_name, read_prefix, read_role, read_startup_timeout, read_timeout,
};
use super::{HttpKind, McpServerSpec, McpTransport};
use crate::config::runtime_path;
use crate::diag::{Diagnostic, SourceText};
use crate::tomldoc::{TableReader, type_name};

const KEYS: &[&str] = &[
    "name",
    "command",
    "url",
    "transport",
    "headers",
    "env",
    "cwd",
    "prefix",
    "include",
    "exclude",
    "timeout_seconds",
    "startup_timeout_seconds",
    "role",
    "max_concurrency",
    "ca_file",
    "proxy",
    "connect_timeout_seconds",
    "read_timeout_seconds",
    "oauth",
];

pub(super) fn read_mcp_server(
    src: &SourceText<'_>,
    table: &DeTable<'_>,
    span: Range<usize>,
    base: &Path,
    ctx: &LoadContext,
    diags: &mut Vec<Diagnostic>,
) -> Option<McpServerSpec> {
    let errors_before = diags.iter().filter(|d| d.is_error()).count();
    let pos = src.position(&span);
    let mut r = TableReader::new(src, table, span, "this [[mcp_server]]", diags);

    let name = read_name(
        &mut r,
        "MCP server",
        "a name of 1 to 64 characters from A-Z a-z 0-9 _ . - (for logs and status, and the default prefix of its tools)",
    )
    .map(|(n, _)| n);
    r.deny_unknown(KEYS);

    let transport = read_transport(&mut r, base, ctx);

    let prefix = match read_prefix(&mut r) {
        Some(p) => Some(p),
        None if r.get("prefix").is_some() => None,
        None => name.as_ref().map(|n| format!("{n}_")),
    };
    let (include, exclude) = read_filters(&mut r);
    let timeout_seconds = read_timeout(&mut r);
    let startup_timeout_seconds = read_startup_timeout(&mut r);
    let role = read_role(&mut r);
    let max_concurrency = read_max_concurrency(&mut r);

    let errors_after = r.diags.iter().filter(|d| d.is_error()).count();
    if errors_after > errors_before {
        return None;
    }
    Some(McpServerSpec {
        name: name?,
        transport: transport?,
        prefix: prefix?,
        include: include?,
        exclude: exclude?,
        timeout_seconds: timeout_seconds?,
        startup_timeout_seconds: startup_timeout_seconds?,
        role: role?,
        max_concurrency,
        origin: origin(src, pos),
    })
}

/// The values of `transport`, as N.E.K.O's `mcp_adapter` spells them.
const TRANSPORTS: &str = "\"stdio\" (with `command`), \"streamable-http\" or \"sse\" (with `url`)";

/// `transport`, when given: `Ok(None)` when absent, `Err` after an error.
/// "stdio" is `None` too: `command` says it already.
fn read_kind(r: &mut TableReader<'_, '_>, has_url: bool) -> Result<Option<HttpKind>, ()> {
    let Some((t, sp)) = r.string("transport") else {
        return if r.get("transport").is_some() {
            Err(())
        } else {
            Ok(None)
        };
    };
    let kind = match t.as_str() {
        "stdio" => None,
        "streamable-http" => Some(HttpKind::StreamableHttp),
        "sse" => Some(HttpKind::Sse),
        _ => {
            let msg = format!(
                "`transport` \"{t}\" of {} is unknown: allowed values are {TRANSPORTS}; without it, a `url` is tried as Streamable HTTP, then as the legacy HTTP+SSE transport",
                r.what
            );
            r.error(&sp, msg);
            return Err(());
        }
    };
    if kind.is_some() != has_url {
        let msg = if has_url {
            format!(
                "`transport` \"stdio\" of {} needs `command`, not `url`: a server the sidecar reaches at a URL uses \"streamable-http\" or \"sse\"",
                r.what
            )
        } else {
            format!(
                "`transport` \"{t}\" of {} needs `url`, not `command`: a server the sidecar starts speaks stdio",
                r.what
            )
        };
        r.error(&sp, msg);
        return Err(());
    }
    Ok(kind)
}

/// `command` (with `cwd` and `env`) or `url` (with `headers`): exactly one;
/// and `transport`, which must agree.
fn read_transport(
    r: &mut TableReader<'_, '_>,
    base: &Path,
    ctx: &LoadContext,
) -> Option<McpTransport> {
    let command = r.get("command");
    let url = r.get("url");
    let kind = if command.is_some() != url.is_some() {
        read_kind(r, url.is_some())
    } else {
        Ok(None)
    };
    match (command, url) {
        (None, None) => {
            r.missing(
                "command",
                "the argv that starts the server on stdio, e.g. command = [\"python3\", \"server.py\"], or url = \"http://127.0.0.1:8808/mcp\" for a Streamable HTTP server",
            );
            None
        }
        (Some(_), Some(u)) => {
            let msg = format!(
                "{} has both `command` and `url`: keep `command` for a server the sidecar starts, or `url` for one already running",
                r.what
            );
            r.error(&u.span(), msg);
            None
        }
        (Some(_), None) => {
            if let Some(h) = r.get("headers") {
                let msg = format!(
                    "`headers` of {} apply to a `url` server only; for a `command`, pass settings in `env`",
                    r.what
                );
                r.error(&h.span(), msg);
            }
            if let Some(o) = r.get("oauth") {
                let msg = format!(
                    "`oauth` of {} applies to a `url` server only: a `command` server is started by the sidecar and signs in by its own means",
                    r.what
                );
                r.error(&o.span(), msg);
            }
            let cwd = read_cwd(r, base);
            let env = expanded_map(r, "env");
            let path_var = env.as_ref().and_then(|e| e.get("PATH")).cloned();
            let command = read_command(r, cwd.as_deref(), path_var.as_deref());
            kind.ok()?;
            Some(McpTransport::Stdio {
                command: command?,
                cwd: runtime_path(&cwd?),
                env: env?,
            })
        }
        (None, Some(_)) => {
            for key in ["env", "cwd"] {
                if let Some(item) = r.get(key) {
                    let msg = format!(
                        "`{key}` of {} applies to a `command` server only (a `url` server runs on its own)",
                        r.what
                    );
                    r.error(&item.span(), msg);
                }
            }
            let headers = expanded_map(r, "headers");
            let options = super::remote::read_http_settings(r, base);
            let (text, sp) = r.string("url")?;
            let url = match super::remote::expand_url(&text) {
                Ok(u) => u,
                Err(why) => {
                    let msg = format!("`url` of {}: {why}", r.what);
                    r.error(&sp, msg);
                    return None;
                }
            };
            // Shown only redacted: the query may hold an API key.
            let shown = super::remote::redact_url(&url);
            let parsed = match reqwest::Url::parse(&url) {
                Ok(u) => u,
                Err(e) => {
                    let msg = format!(
                        "`url` \"{shown}\" of {} is not a URL ({e}): expected e.g. \"https://mcp.example.com/mcp\" or \"http://127.0.0.1:8808/mcp\"",
                        r.what
                    );
                    r.error(&sp, msg);
                    return None;
                }
            };
            if let Some(why) = super::remote::reach_problem(&parsed, ctx.allow_remote_handlers) {
                let msg = format!("`url` \"{shown}\" of {} is refused: {why}", r.what);
                r.error(&sp, msg);
                return None;
            }
            Some(McpTransport::Http {
                url,
                headers: headers?,
                kind: kind.ok()?.unwrap_or(HttpKind::Detect),
                options: options?,
            })
        }
    }
}

/// A table of strings (`env`, `headers`) with `${VAR}` expanded from the
/// sidecar's environment; `Some(empty)` when absent.
fn expanded_map(r: &mut TableReader<'_, '_>, key: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let Some((t, _)) = r.table(key) else {
        return if r.get(key).is_some() {
            None
        } else {
            Some(out)
        };
    };
    let mut ok = true;
    for (k, v) in t.iter() {
        let name = k.get_ref().to_string();
        let bad = name.is_empty()
            || name.contains(['=', '\0'])
            || (key == "headers" && name.contains([':', ' ', '\r', '\n']));
        if bad {
            let msg = format!(
                "{} name \"{name}\" in `{key}` of {} is not allowed: it must be non-empty, with no `=`, `:`, NUL or line break",
                if key == "env" { "variable" } else { "header" },
                r.what
            );
            r.error(&k.span(), msg);
            ok = false;
            continue;
        }
        let DeValue::String(text) = v.get_ref() else {
            let msg = format!(
                "`{name}` in `{key}` of {} must be a string, found {}",
                r.what,
                type_name(v.get_ref())
            );
            r.error(&v.span(), msg);
            ok = false;
            continue;
        };
        match expand(text, |var| std::env::var(var).ok()) {
            Ok(value) if value.contains(['\0', '\r', '\n']) => {
                let msg = format!(
                    "`{name}` in `{key}` of {} holds a NUL or a line break once expanded",
                    r.what
                );
                r.error(&v.span(), msg);
                ok = false;
            }
            Ok(value) => {
                out.insert(name, value);
            }
            Err(why) => {
                let msg = format!("`{name}` in `{key}` of {}: {why}", r.what);
                r.error(&v.span(), msg);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}
