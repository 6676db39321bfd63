//! One server entry of an imported file, read into how the sidecar reaches
//! it: a transport it can bridge, or the reason it cannot, or "disabled".
//!
//! Both formats share the reading, since their entries are one shape with
//! different spellings: Claude Desktop and Cursor write `{command, args,
//! env}` or `{url, headers}`, VS Code adds `type`, N.E.K.O's `mcp_adapter`
//! says `transport` and `enabled`, Cline says `disabled`. Keys that only
//! the other program understands (`autoApprove`, `description`...) are
//! left alone: the file is theirs. Variables (`${VAR}`, `${env:VAR}`,
//! `${userHome}`, `${workspaceFolder}`) are resolved here, at load time;
//! one that cannot be is an error naming the server.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::node::{Node, Value};
use crate::config::{absolutize, runtime_path};
use crate::diag::{Diagnostic, SourceText};
use crate::manifest::{HttpKind, LoadContext, McpTransport};

/// What an entry asks for.
#[derive(Clone, PartialEq)]
pub(crate) enum EntryKind {
    /// `enabled = false` or `"disabled": true`: skipped.
    Disabled,
    Bridged(McpTransport),
    /// A server the sidecar cannot reach, with its transport ("http URL")
    /// and why: reported, never started.
    NotBridged {
        transport: String,
        reason: String,
    },
}

/// What `${...}` resolves from: the environment (injected, for tests),
/// the user's home, and the folder a `.vscode/mcp.json` belongs to.
pub(crate) struct Vars<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub home: Option<PathBuf>,
    /// The parent of `.vscode` or `.cursor` for a file in one, else the
    /// file's own folder; also the default working directory.
    pub workspace: PathBuf,
}

impl Vars<'_> {
    /// The workspace folder of an imported file at `path`.
    pub(crate) fn workspace_of(path: &Path) -> PathBuf {
        let dir = path.parent().unwrap_or(Path::new("."));
        match dir.file_name().and_then(|n| n.to_str()) {
            Some(".vscode" | ".cursor") => dir.parent().unwrap_or(dir).to_path_buf(),
            _ => dir.to_path_buf(),
        }
    }
}

/// Reads the entry `node` of server `name`; `None` after an error (each
/// one pushed to `diags`, located in `src`).
pub(crate) fn read_entry(
    src: &SourceText<'_>,
    name: &str,
    node: &Node,
    vars: &Vars<'_>,
    ctx: &LoadContext,
    diags: &mut Vec<Diagnostic>,
) -> Option<EntryKind> {
    let mut e = EntryReader {
        src,
        name,
        node,
        vars,
        diags,
        errors: 0,
    };
    let Value::Object(_) = node.value else {
        let msg = format!(
            "MCP server `{name}` must be an object, found {}",
            node.type_name()
        );
        e.error(&node.span, msg);
        return None;
    };
    if e.boolean("disabled") == Some(true) || e.boolean("enabled") == Some(false) {
        return Some(EntryKind::Disabled);
    }
    let kind = match (e.node.get("type"), e.node.get("transport")) {
        (Some(t), Some(_)) => {
            let msg = format!("MCP server `{name}` has both `type` and `transport`: keep one");
            e.error(&t.span, msg);
            return None;
        }
        (Some(_), None) => e.string("type"),
        (None, Some(_)) => e.string("transport"),
        (None, None) => None,
    };
    if let Some(env_file) = e.node.get("envFile") {
        let msg = format!(
            "`envFile` of MCP server `{name}` is not read by the sidecar: put the variables in `env`, or in the sidecar's own environment"
        );
        e.diags.push(src.warning(&env_file.span, msg));
    }
    let (kind, kind_span) = match kind {
        Some((k, sp)) => (k, Some(sp)),
        None if e.node.get("command").is_some() => ("stdio".to_string(), None),
        None if e.node.get("url").is_some() => ("http".to_string(), None),
        None => {
            if e.node.get("type").is_none() && e.node.get("transport").is_none() {
                let msg = format!(
                    "MCP server `{name}` has neither `command` (a server to start on stdio) nor `url` (a server already running)"
                );
                e.error(&node.span, msg);
            }
            return None;
        }
    };
    let out = match kind.as_str() {
        "stdio" => e.stdio(ctx),
        // VS Code's "http" (and a `url` with no type, as Claude Desktop and
        // Cursor write it) tries Streamable HTTP, then the legacy SSE
        // transport, as VS Code itself does; the names that say Streamable
        // HTTP outright (mcp_adapter's, Cline's, LangChain's) get it alone.
        "http" => e.http(ctx, HttpKind::Detect),
        "streamable-http" | "streamableHttp" | "streamable_http" => {
            e.http(ctx, HttpKind::StreamableHttp)
        }
        "sse" => e.http(ctx, HttpKind::Sse),
        other => {
            let msg = format!(
                "the transport \"{other}\" of MCP server `{name}` is unknown: allowed are \"stdio\", \"http\" (or \"streamable-http\") and \"sse\""
            );
            e.error(&kind_span.unwrap_or(node.span.clone()), msg);
            None
        }
    };
    (e.errors == 0).then_some(out).flatten()
}

struct EntryReader<'a, 's> {
    src: &'a SourceText<'s>,
    name: &'a str,
    node: &'a Node,
    vars: &'a Vars<'a>,
    diags: &'a mut Vec<Diagnostic>,
    errors: usize,
}

impl EntryReader<'_, '_> {
    fn error(&mut self, span: &Range<usize>, msg: String) {
        self.errors += 1;
        self.diags.push(self.src.error(span, msg));
    }

    fn wrong(&mut self, key: &str, node: &Node, expected: &str) {
        let msg = format!(
            "`{key}` of MCP server `{}` must be {expected}, found {}",
            self.name,
            node.type_name()
        );
        self.error(&node.span, msg);
    }

    fn boolean(&mut self, key: &str) -> Option<bool> {
        let n = self.node.get(key)?;
        match n.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.wrong(key, n, "true or false");
                None
            }
        }
    }

    /// A string with its variables resolved.
    fn string(&mut self, key: &str) -> Option<(String, Range<usize>)> {
        let n = self.node.get(key)?;
        match n.as_str() {
            Some(s) => {
                let v = self.expand(key, s, &n.span)?;
                Some((v, n.span.clone()))
            }
            None => {
                self.wrong(key, n, "a string");
                None
            }
        }
    }

    fn expand(&mut self, field: &str, text: &str, span: &Range<usize>) -> Option<String> {
        match expand(text, self.vars) {
            Ok(v) => Some(v),
            Err(why) => {
                let msg = format!("`{field}` of MCP server `{}`: {why}", self.name);
                self.error(span, msg);
                None
            }
        }
    }

    /// An array of strings, resolved.
    fn strings(&mut self, key: &str, node: &Node) -> Option<Vec<String>> {
        let Value::Array(items) = &node.value else {
            self.wrong(key, node, "an array of strings");
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(s) = item.as_str() else {
                self.wrong(&format!("{key}[{i}]"), item, "a string");
                return None;
            };
            out.push(self.expand(&format!("{key}[{i}]"), s, &item.span)?);
        }
        Some(out)
    }

    /// `env` or `headers`: an object of strings (numbers and booleans are
    /// taken as their text, as the programs that start these servers do).
    fn map(&mut self, key: &str) -> Option<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        let Some(n) = self.node.get(key) else {
            return Some(out);
        };
        let Value::Object(entries) = &n.value else {
            self.wrong(key, n, "an object of strings");
            return None;
        };
        let mut ok = true;
        for (k, ksp, v) in entries {
            let bad = k.is_empty()
                || k.contains(['=', '\0'])
                || (key == "headers" && k.contains([':', ' ', '\r', '\n']));
            if bad {
                let msg = format!(
                    "the name \"{k}\" in `{key}` of MCP server `{}` is not allowed: it must be non-empty, with no `=`, `:`, NUL or line break",
                    self.name
                );
                self.error(ksp, msg);
                ok = false;
                continue;
            }
            let text = match &v.value {
                Value::String(s) => s.clone(),
                Value::Number(x) => x.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => {
                    self.wrong(&format!("{key}.{k}"), v, "a string");
                    ok = false;
                    continue;
                }
            };
            match self.expand(&format!("{key}.{k}"), &text, &v.span) {
                Some(value) if value.contains(['\0', '\r', '\n']) => {
                    let msg = format!(
                        "`{key}.{k}` of MCP server `{}` holds a NUL or a line break once resolved",
                        self.name
                    );
                    self.error(&v.span, msg);
                    ok = false;
                }
                Some(value) => {
                    out.insert(k.clone(), value);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn stdio(&mut self, _ctx: &LoadContext) -> Option<EntryKind> {
        let Some(cmd) = self.node.get("command") else {
            let msg = format!(
                "MCP server `{}` uses stdio but has no `command`: give the program to start",
                self.name
            );
            self.error(&self.node.span.clone(), msg);
            return None;
        };
        // `command` is a string (the program) in every format; an array
        // (the whole argv) is taken too.
        let mut argv = match &cmd.value {
            Value::String(_) => vec![self.string("command")?.0],
            Value::Array(_) => self.strings("command", cmd)?,
            _ => {
                self.wrong("command", cmd, "a string");
                return None;
            }
        };
        if let Some(args) = self.node.get("args") {
            argv.extend(self.strings("args", args)?);
        }
        let cwd = match self.string("cwd") {
            Some((c, sp)) => {
                let p = absolutize(&self.vars.workspace, &c);
                if !p.is_dir() {
                    let msg = format!(
                        "`cwd` of MCP server `{}` \"{c}\" is not a directory ({})",
                        self.name,
                        p.display()
                    );
                    self.error(&sp, msg);
                    return None;
                }
                p
            }
            None if self.node.get("cwd").is_some() => return None,
            None => self.vars.workspace.clone(),
        };
        let env = self.map("env")?;
        let Some(program) = argv.first().cloned().filter(|p| !p.is_empty()) else {
            let msg = format!("the `command` of MCP server `{}` is empty", self.name);
            self.error(&cmd.span, msg);
            return None;
        };
        if program.contains('/') || program.contains('\\') {
            let p = absolutize(&cwd, &program);
            if !p.is_file() {
                let msg = format!(
                    "the program \"{program}\" of MCP server `{}` ({}) does not exist",
                    self.name,
                    p.display()
                );
                self.error(&cmd.span, msg);
                return None;
            }
            argv[0] = runtime_path(&p).to_string_lossy().into_owned();
        } else if let Err(tried) =
            crate::os::resolve_program(&program, &cwd, env.get("PATH").map(std::ffi::OsStr::new))
        {
            let msg = format!(
                "the program `{program}` of MCP server `{}` is {tried}: the server cannot start until it is installed (or give its full path)",
                self.name
            );
            self.diags.push(self.src.warning(&cmd.span, msg));
        }
        Some(EntryKind::Bridged(McpTransport::Stdio {
            command: argv,
            cwd: runtime_path(&cwd),
            env,
        }))
    }

    fn http(&mut self, ctx: &LoadContext, kind: HttpKind) -> Option<EntryKind> {
        let Some((url, sp)) = self.string("url") else {
            if self.node.get("url").is_none() {
                let msg = format!("MCP server `{}` uses HTTP but has no `url`", self.name);
                self.error(&self.node.span.clone(), msg);
            }
            return None;
        };
        let headers = self.map("headers")?;
        let parsed = match reqwest::Url::parse(&url) {
            Ok(u) => u,
            Err(e) => {
                let msg = format!(
                    "the `url` \"{}\" of MCP server `{}` is not a URL ({e})",
                    crate::manifest::remote::redact_url(&url),
                    self.name
                );
                self.error(&sp, msg);
                return None;
            }
        };
        let not_bridged = |reason: String| {
            Some(EntryKind::NotBridged {
                transport: format!(
                    "{} {}",
                    kind.label(),
                    crate::manifest::remote::redact_url(&url)
                ),
                reason,
            })
        };
        if let Some(why) =
            crate::manifest::remote::reach_problem(&parsed, ctx.allow_remote_handlers)
        {
            return not_bridged(why);
        }
        let oauth = self.oauth()?;
        Some(EntryKind::Bridged(McpTransport::Http {
            url,
            headers,
            kind,
            options: crate::manifest::HttpOptions {
                oauth,
                ..Default::default()
            },
        }))
    }

    /// What the file says about signing in: Claude Code's `oauth` object
    /// (`clientId`, and `scopes` as one space-separated string); its
    /// `callbackPort` and `authServerMetadataUrl` are that program's own
    /// (the sidecar's redirect is its admin listener, and discovery follows
    /// the specification). The client secret Claude Code keeps in the
    /// system's keychain, never in the file: set it with an override.
    fn oauth(&mut self) -> Option<crate::manifest::OAuthOptions> {
        let mut out = crate::manifest::OAuthOptions::default();
        let Some(node) = self.node.get("oauth") else {
            return Some(out);
        };
        let Value::Object(_) = node.value else {
            self.wrong("oauth", node, "an object (`clientId`, `scopes`)");
            return None;
        };
        if let Some(id) = node.get("clientId") {
            match id.as_str() {
                Some(s) if !s.trim().is_empty() => {
                    out.client_id = Some(self.expand("oauth.clientId", s, &id.span)?);
                }
                _ => {
                    self.wrong("oauth.clientId", id, "a non-empty string");
                    return None;
                }
            }
        }
        if let Some(sc) = node.get("scopes") {
            match sc.as_str() {
                Some(s) if !s.trim().is_empty() => {
                    out.scopes = Some(s.split_whitespace().map(str::to_string).collect());
                }
                _ => {
                    self.wrong("oauth.scopes", sc, "a string of space-separated scopes");
                    return None;
                }
            }
        }
        Some(out)
    }
}

/// `text` with each `${...}` resolved: `${VAR}`, `${VAR:-default}` and
/// `${env:VAR}` from the environment, `${userHome}`, `${workspaceFolder}`,
/// `${pathSeparator}` (and `${/}`). A `$` before anything else is itself.
pub(crate) fn expand(text: &str, vars: &Vars<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 2..];
        let Some(end) = tail.find('}') else {
            return Err(format!("`${{` without its closing `}}` in \"{text}\""));
        };
        let var = &tail[..end];
        out.push_str(&resolve(var, vars)?);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn resolve(var: &str, vars: &Vars<'_>) -> Result<String, String> {
    let env_var = |name: &str, default: Option<&str>| {
        match (vars.env)(name) {
        Some(v) => Ok(v),
        None => default.map(str::to_string).ok_or_else(|| {
            format!(
                "the environment variable `{name}` is not set: set it in the sidecar's environment (e.g. Environment= in its systemd unit)"
            )
        }),
    }
    };
    let is_name = |s: &str| {
        s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    match var {
        "userHome" => vars
            .home
            .as_ref()
            .map(|h| h.to_string_lossy().into_owned())
            .ok_or_else(|| "`${userHome}`: the sidecar's home directory is unknown".to_string()),
        "workspaceFolder" => Ok(vars.workspace.to_string_lossy().into_owned()),
        "pathSeparator" | "/" => Ok(std::path::MAIN_SEPARATOR.to_string()),
        _ => {
            if let Some(name) = var.strip_prefix("env:") {
                if is_name(name) {
                    return env_var(name, None);
                }
            } else if let Some(id) = var.strip_prefix("input:") {
                return Err(format!(
                    "`${{input:{id}}}` is an input that VS Code asks the user for when it starts the server; the sidecar cannot ask: put the value in the sidecar's environment and write ${{env:NAME}} there"
                ));
            } else if let Some((name, default)) = var.split_once(":-") {
                if is_name(name) {
                    return env_var(name, Some(default));
                }
            } else if is_name(var) {
                return env_var(var, None);
            }
            Err(format!(
                "`${{{var}}}` cannot be resolved: the sidecar knows ${{NAME}}, ${{NAME:-default}}, ${{env:NAME}}, ${{userHome}}, ${{workspaceFolder}} and ${{pathSeparator}}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        (var == "TOKEN").then(|| "s3cret".to_string())
    }

    fn vars() -> Vars<'static> {
        Vars {
            env: &env,
            home: Some(PathBuf::from("/home/u")),
            workspace: PathBuf::from("/w"),
        }
    }

    #[test]
    fn every_kind_of_variable_resolves() {
        let v = vars();
        assert_eq!(
            expand("Bearer ${TOKEN} ${env:TOKEN}", &v).unwrap(),
            "Bearer s3cret s3cret"
        );
        assert_eq!(expand("${NOPE:-x}/${TOKEN:-y}", &v).unwrap(), "x/s3cret");
        assert_eq!(
            expand("${userHome}/a ${workspaceFolder}${/}b $HOME", &v).unwrap(),
            // `${/}` is the platform's separator, as in VS Code.
            format!("/home/u/a /w{}b $HOME", std::path::MAIN_SEPARATOR)
        );
    }

    #[test]
    fn an_unresolvable_variable_says_what_to_do() {
        let v = vars();
        assert!(
            expand("${NOPE}", &v)
                .unwrap_err()
                .contains("`NOPE` is not set")
        );
        assert!(
            expand("${env:NOPE}", &v)
                .unwrap_err()
                .contains("`NOPE` is not set")
        );
        let e = expand("${input:api-key}", &v).unwrap_err();
        assert!(
            e.contains("VS Code asks the user") && e.contains("${env:NAME}"),
            "{e}"
        );
        assert!(
            expand("${command:x}", &v)
                .unwrap_err()
                .contains("cannot be resolved")
        );
        assert!(expand("${TOKEN", &v).unwrap_err().contains("closing"));
    }

    #[test]
    fn the_workspace_of_a_vscode_file_is_above_its_folder() {
        assert_eq!(
            Vars::workspace_of(Path::new("/p/.vscode/mcp.json")),
            PathBuf::from("/p")
        );
        assert_eq!(
            Vars::workspace_of(Path::new("/c/claude_desktop_config.json")),
            PathBuf::from("/c")
        );
    }
}
