//! Loading one manifest file into validated `ToolSpec`s, reporting every
//! problem with its place.
//!
//! A file is all or nothing: if it has any error, it yields no tools (so a
//! reload can keep its last good version). This module reads the manifest and
//! the schema files it names; it never scans directories or talks to the
//! network.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value as Json;
use toml::de::{DeTable, DeValue};

use super::fields::{
    LoadContext, origin, read_command, read_cwd, read_env, read_max_concurrency, read_name,
    read_role, read_timeout, valid_name,
};
use super::{
    ExecHandler, Handler, HttpHandler, InheritEnv, McpServerSpec, ToolSpec, UnbridgedServer,
    default_parameters, schema,
};
use crate::config::{absolutize, runtime_path};
use crate::contract::url_host_is_loopback;
use crate::diag::{Diagnostic, SourceText};
use crate::os::Feature;
use crate::tomldoc::{self, TableReader, type_name};

/// The result of loading one file.
#[derive(Debug, Clone)]
pub struct ManifestFile {
    pub path: PathBuf,
    /// Empty whenever `diagnostics` holds an error.
    pub tools: Vec<ToolSpec>,
    /// Empty whenever `diagnostics` holds an error.
    pub mcp_servers: Vec<McpServerSpec>,
    /// Imported servers the sidecar cannot reach, each with its reason.
    pub unbridged: Vec<UnbridgedServer>,
    pub diagnostics: Vec<Diagnostic>,
}

impl ManifestFile {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    pub(crate) fn failed(path: &Path, d: Diagnostic) -> Self {
        Self {
            path: path.to_path_buf(),
            tools: Vec::new(),
            mcp_servers: Vec::new(),
            unbridged: Vec::new(),
            diagnostics: vec![d],
        }
    }
}

const TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "parameters",
    "parameters_file",
    "timeout_seconds",
    "role",
    "handler",
    "validate_arguments",
    "max_concurrency",
];
const HTTP_KEYS: &[&str] = &["type", "url", "unix_socket"];
const EXEC_KEYS: &[&str] = &["type", "command", "cwd", "env", "inherit_env"];

/// A JSON Schema is sent to main_server and the model with every
/// registration; a megabyte is far past any sensible one.
const MAX_SCHEMA_FILE_BYTES: u64 = 1 << 20;

/// Reads and validates one manifest file.
pub fn load_file(path: &Path, ctx: &LoadContext) -> ManifestFile {
    match crate::diag::read_utf8(path, "the manifest") {
        Ok(text) => parse_manifest(path, &text, ctx),
        Err(d) => ManifestFile::failed(path, d),
    }
}

/// Validates manifest text; `path` locates messages and anchors relative paths.
pub fn parse_manifest(path: &Path, text: &str, ctx: &LoadContext) -> ManifestFile {
    let src = SourceText::new(path, text);
    let mut diags = Vec::new();
    if text.trim().is_empty() {
        return ManifestFile::failed(
            path,
            Diagnostic::error(
                path,
                None,
                "the manifest is empty: declare at least one tool with a [[tool]] table, an MCP server with an [[mcp_server]] table, or a file of MCP servers to import with an [[mcp_import]] table",
            ),
        );
    }
    let doc = match tomldoc::parse(&src) {
        Ok(d) => d,
        Err(d) => return ManifestFile::failed(path, d),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut top = TableReader::new(&src, doc.get_ref(), 0..0, "the manifest", &mut diags);
    top.deny_unknown(&["tool", "mcp_server", "mcp_import"]);
    let mut tools = Vec::new();
    let mut mcp_servers = Vec::new();
    let mut unbridged = Vec::new();
    let has_servers = top.get("mcp_server").is_some() || top.get("mcp_import").is_some();
    each_table(&mut top, "tool", "tool", !has_servers, |t, span, diags| {
        if let Some(spec) = read_tool(&src, t, span, base, ctx, diags) {
            tools.push(spec);
        }
    });
    each_table(
        &mut top,
        "mcp_server",
        "MCP server",
        false,
        |t, span, diags| {
            if let Some(spec) = super::mcp::read_mcp_server(&src, t, span, base, ctx, diags) {
                mcp_servers.push(spec);
            }
        },
    );
    each_table(
        &mut top,
        "mcp_import",
        "file of MCP servers",
        false,
        |t, span, diags| {
            if let Some(i) = super::import::read_import(&src, t, span, base, ctx, diags) {
                mcp_servers.extend(i.servers);
                unbridged.extend(i.unbridged);
            }
        },
    );
    // Report in reading order, whatever order the checks ran in. The sort is
    // stable, and diagnostics of other files (schema files) keep their place.
    diags.sort_by_key(|d| if d.path == path { d.position } else { d.anchor });
    let has_errors = diags.iter().any(Diagnostic::is_error);
    ManifestFile {
        path: path.to_path_buf(),
        tools: if has_errors { Vec::new() } else { tools },
        mcp_servers: if has_errors { Vec::new() } else { mcp_servers },
        unbridged: if has_errors { Vec::new() } else { unbridged },
        diagnostics: diags,
    }
}

/// Reads each table of the array of tables `key` (`[[tool]]`,
/// `[[mcp_server]]`) with `read`; `required`: its absence is an error.
fn each_table<'a, 'i>(
    top: &mut TableReader<'a, 'i>,
    key: &str,
    what: &str,
    required: bool,
    mut read: impl FnMut(&'a DeTable<'i>, Range<usize>, &mut Vec<Diagnostic>),
) {
    let Some(item) = top.get(key) else {
        if required {
            top.missing(
                key,
                "declare each tool in a [[tool]] table, an MCP server whose tools to offer in an [[mcp_server]] table, or a file of MCP servers to import in an [[mcp_import]] table",
            );
        }
        return;
    };
    match item.get_ref() {
        DeValue::Array(arr) => {
            for el in arr.iter() {
                match el.get_ref() {
                    DeValue::Table(t) => read(t, el.span(), top.diags),
                    other => {
                        let msg =
                            format!("each `{key}` must be a table, found {}", type_name(other));
                        top.error(&el.span(), msg);
                    }
                }
            }
            if arr.is_empty() {
                top.error(
                    &item.span(),
                    format!("`{key}` is empty: declare at least one {what} with a [[{key}]] table"),
                );
            }
        }
        DeValue::Table(_) => top.error(
            &item.span(),
            format!("`{key}` is a single table: write [[{key}]] (double brackets), one per {what}"),
        ),
        other => {
            let msg = format!(
                "`{key}` must be an array of [[{key}]] tables, found {}",
                type_name(other)
            );
            top.error(&item.span(), msg);
        }
    }
}

fn read_tool(
    src: &SourceText<'_>,
    table: &DeTable<'_>,
    span: Range<usize>,
    base: &Path,
    ctx: &LoadContext,
    diags: &mut Vec<Diagnostic>,
) -> Option<ToolSpec> {
    let errors_before = diags.iter().filter(|d| d.is_error()).count();
    let pos = src.position(&span);
    let mut r = TableReader::new(src, table, span, "this [[tool]]", diags);

    let name = read_name(
        &mut r,
        "tool",
        "a tool name of 1 to 64 characters from A-Z a-z 0-9 _ . -",
    );
    if let Some((n, sp)) = &name {
        if valid_name(n) && n.contains('.') {
            r.warning(
                sp,
                format!("tool name `{n}` contains `.`: some model providers accept only A-Z a-z 0-9 _ - in tool names, so prefer `{}`", n.replace('.', "_")),
            );
        }
    }
    let name = name.map(|(n, _)| n);

    // After the name, so that messages can say which tool.
    r.deny_unknown(TOOL_KEYS);

    let description = match r.string("description") {
        Some((d, sp)) if d.trim().is_empty() => {
            r.error(&sp, format!("`description` of {} is empty: the model reads it to decide when to call the tool", r.what));
            None
        }
        Some((d, _)) => Some(d),
        None => {
            if r.get("description").is_none() {
                r.missing(
                    "description",
                    "say what the tool does; the model reads it to decide when to call it",
                );
            }
            None
        }
    };

    let parameters = read_parameters(&mut r, base);

    let timeout_seconds = read_timeout(&mut r);
    let role = read_role(&mut r);

    let handler = match r.table("handler") {
        Some((t, sp)) => read_handler(src, t, sp, base, ctx, &r.what.clone(), r.diags),
        None => {
            if r.get("handler").is_none() {
                r.missing(
                    "handler",
                    "say how calls reach the plugin, e.g. handler = { type = \"http\", url = \"http://127.0.0.1:9876/tool\" } or handler = { type = \"exec\", command = [\"python3\", \"tool.py\"] }",
                );
            }
            None
        }
    };

    let validate_arguments = r.boolean("validate_arguments").is_none_or(|(b, _)| b);
    let max_concurrency = read_max_concurrency(&mut r);

    let errors_after = r.diags.iter().filter(|d| d.is_error()).count();
    if errors_after > errors_before {
        return None;
    }
    let (parameters, validator) = parameters?;
    Some(ToolSpec {
        name: name?,
        description: description?,
        parameters,
        validator: Arc::new(validator),
        timeout_seconds: timeout_seconds?,
        role: role?,
        handler: handler?,
        validate_arguments,
        max_concurrency,
        origin: origin(src, pos),
    })
}

fn read_parameters(
    r: &mut TableReader<'_, '_>,
    base: &Path,
) -> Option<(Json, jsonschema::Validator)> {
    let inline = r.get("parameters");
    let file = r.get("parameters_file");
    if let (Some(_), Some(f)) = (inline, file) {
        let msg = format!(
            "{} has both `parameters` and `parameters_file`: keep one",
            r.what
        );
        r.error(&f.span(), msg);
        return None;
    }
    if let Some(item) = inline {
        if !item.get_ref().is_table() {
            let msg = format!(
                "`parameters` of {} must be a table holding a JSON Schema, found {}",
                r.what,
                type_name(item.get_ref())
            );
            r.error(&item.span(), msg);
            return None;
        }
        let json = tomldoc::to_json(r.src, item, r.diags)?;
        return match schema::compile(&json) {
            Ok(v) => Some((json, v)),
            Err(problems) => {
                for p in problems {
                    let sp = tomldoc::span_at_pointer(item, &p.pointer);
                    let at = if p.pointer.is_empty() {
                        String::new()
                    } else {
                        format!(" (at {})", p.pointer)
                    };
                    let msg = format!("`parameters` of {}: {}{at}", r.what, p.message);
                    r.error(&sp, msg);
                }
                None
            }
        };
    }
    if file.is_some() {
        let (rel, sp) = r.string("parameters_file")?;
        let path = absolutize(base, &rel);
        // A FIFO or a device (`/dev/zero`) would hang the loader or grow it
        // without end: only a regular file of a sane size is read.
        match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => {
                let msg = format!(
                    "`parameters_file` \"{rel}\" of {} is not a regular file ({})",
                    r.what,
                    path.display()
                );
                r.error(&sp, msg);
                return None;
            }
            Ok(m) if m.len() > MAX_SCHEMA_FILE_BYTES => {
                let msg = format!(
                    "`parameters_file` \"{rel}\" of {} is {} bytes: a schema file may hold at most {MAX_SCHEMA_FILE_BYTES} bytes",
                    r.what,
                    m.len()
                );
                r.error(&sp, msg);
                return None;
            }
            _ => {}
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                let msg = format!(
                    "`parameters_file` \"{rel}\" of {} cannot be read ({}): {e}",
                    r.what,
                    path.display()
                );
                r.error(&sp, msg);
                return None;
            }
        };
        let anchor = r.src.position(&sp);
        let json: Json = match serde_json::from_str(&text) {
            Ok(j) => j,
            Err(e) => {
                let at = crate::diag::Position {
                    line: e.line(),
                    col: e.column(),
                };
                // serde_json ends its message with the place, which we print first.
                let full = e.to_string();
                let reason = full
                    .rsplit_once(" at line ")
                    .map_or(full.as_str(), |(m, _)| m);
                r.diags.push(
                    Diagnostic::error(
                        &path,
                        Some(at),
                        format!(
                            "not JSON ({reason}): `parameters_file` of {} must hold a JSON Schema",
                            r.what
                        ),
                    )
                    .anchored(anchor),
                );
                return None;
            }
        };
        return match schema::compile(&json) {
            Ok(v) => Some((json, v)),
            Err(problems) => {
                for p in problems {
                    let at = if p.pointer.is_empty() {
                        "the root".to_string()
                    } else {
                        p.pointer.clone()
                    };
                    r.diags.push(
                        Diagnostic::error(
                            &path,
                            None,
                            format!("at {at}: {} (the parameters of {})", p.message, r.what),
                        )
                        .anchored(anchor),
                    );
                }
                None
            }
        };
    }
    let json = default_parameters();
    schema::compile(&json).ok().map(|v| (json, v))
}

fn read_handler(
    src: &SourceText<'_>,
    table: &DeTable<'_>,
    span: Range<usize>,
    base: &Path,
    ctx: &LoadContext,
    tool: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Handler> {
    let mut r = TableReader::new(src, table, span, format!("the handler of {tool}"), diags);
    let kind = match r.string("type") {
        Some((k, sp)) => match k.as_str() {
            "http" | "exec" => k,
            _ => {
                let msg = format!(
                    "handler `type` \"{k}\" is unknown: allowed types are \"http\" (POST to an endpoint of the plugin) and \"exec\" (run a command per call)"
                );
                r.error(&sp, msg);
                return None;
            }
        },
        None => {
            if r.get("type").is_none() {
                r.missing("type", "\"http\" or \"exec\"");
            }
            return None;
        }
    };
    if kind == "http" {
        r.deny_unknown(HTTP_KEYS);
        read_http(&mut r, base, ctx).map(Handler::Http)
    } else {
        r.deny_unknown(EXEC_KEYS);
        read_exec(&mut r, base).map(Handler::Exec)
    }
}

fn read_http(r: &mut TableReader<'_, '_>, base: &Path, ctx: &LoadContext) -> Option<HttpHandler> {
    let unix_socket = r.string("unix_socket").map(|(s, sp)| {
        if s.is_empty() {
            r.error(&sp, "`unix_socket` is empty: give the socket's path");
        } else if let Some(why) = ctx.platform.lacks(Feature::UnixSocketHandler) {
            r.error(
                &sp,
                format!("{why}: reach the handler over loopback TCP instead, e.g. url = \"http://127.0.0.1:9876/weather\""),
            );
        }
        runtime_path(&absolutize(base, &s))
    });
    let Some((url, sp)) = r.string("url") else {
        if r.get("url").is_none() {
            r.missing("url", "the plugin endpoint to POST calls to, e.g. url = \"http://127.0.0.1:9876/weather\"");
        }
        return None;
    };
    let shown = super::remote::redact_url(&url);
    let parsed = match reqwest::Url::parse(&url) {
        Ok(u) => u,
        Err(e) => {
            r.error(&sp, format!("handler `url` \"{shown}\" is not a URL ({e}): expected e.g. \"http://127.0.0.1:9876/weather\""));
            return None;
        }
    };
    match parsed.scheme() {
        "http" => {}
        "https" => {
            r.error(&sp, format!("handler `url` \"{shown}\" uses https: handlers are reached on this machine over plain http (https is for remote MCP servers: a [[mcp_server]] with an https `url`)"));
            return None;
        }
        other => {
            r.error(&sp, format!("handler `url` \"{shown}\" has scheme `{other}`: only http is allowed (for a unix socket, add unix_socket = \"/path/to.sock\")"));
            return None;
        }
    }
    // Over a unix socket the host part is only a Host header.
    if unix_socket.is_none() && !ctx.allow_remote_handlers && !url_host_is_loopback(&parsed) {
        r.error(
            &sp,
            format!("handler `url` \"{shown}\" is not on loopback: the sidecar would become the off-box proxy that main_server's loopback rule exists to prevent; use 127.0.0.1, ::1 or localhost, or set allow_remote_handlers = true in the agent config"),
        );
        return None;
    }
    Some(HttpHandler { url, unix_socket })
}

fn read_exec(r: &mut TableReader<'_, '_>, base: &Path) -> Option<ExecHandler> {
    // Every field is checked before giving up, so one bad field does not
    // hide the next.
    let cwd = read_cwd(r, base);
    let env = read_env(r);
    let path_var = env.as_ref().and_then(|e| e.get("PATH")).cloned();
    let command = read_command(r, cwd.as_deref(), path_var.as_deref());
    let inherit_env = read_inherit_env(r);
    Some(ExecHandler {
        command: command?,
        cwd: runtime_path(&cwd?),
        env: env?,
        inherit_env: inherit_env?,
    })
}

/// `inherit_env`: `true` (the default), `false`, or a list of names.
fn read_inherit_env(r: &mut TableReader<'_, '_>) -> Option<InheritEnv> {
    let Some(item) = r.get("inherit_env") else {
        return Some(InheritEnv::All);
    };
    match item.get_ref() {
        DeValue::Boolean(_) => r.boolean("inherit_env").map(|(all, _)| {
            if all {
                InheritEnv::All
            } else {
                InheritEnv::Only(Vec::new())
            }
        }),
        DeValue::Array(_) => {
            let (names, _) = r.string_array("inherit_env")?;
            let mut ok = true;
            for (name, sp) in &names {
                if name.is_empty() || name.contains('=') || name.contains('\0') {
                    r.error(sp, format!("`inherit_env` names \"{name}\", which is not an environment variable name: it must be non-empty with no `=` or NUL"));
                    ok = false;
                }
            }
            ok.then(|| InheritEnv::Only(names.into_iter().map(|(n, _)| n).collect()))
        }
        other => {
            let msg = format!(
                "`inherit_env` of {} must be true (the sidecar's whole environment, the default), false (only `env`) or a list of the variables to pass on, e.g. [\"PATH\", \"HOME\", \"LANG\"]; found {}",
                r.what,
                type_name(other)
            );
            let sp = item.span();
            r.error(&sp, msg);
            None
        }
    }
}
