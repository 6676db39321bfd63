//! The desired state: every tool this sidecar should have registered, with
//! the exact register request it implies and a fingerprint of it.
//!
//! Built from loaded manifest files; pure (no I/O). The fingerprint lets the
//! registration engine tell "changed" from "unchanged" without asking
//! main_server, whose GET does not show parameters or timeouts.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

use crate::diag::Diagnostic;
use crate::manifest::{ManifestFile, McpServerSpec, ToolSpec};

/// A hash of what main_server receives for a tool, callback URL excluded.
///
/// The callback URL is left out on purpose: it carries a token that changes
/// at every start, and a stale URL is detected by comparing it with what GET
/// shows. The handler is left out too: it is local and changing it needs no
/// registration.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub fn of(spec: &ToolSpec, source: &str) -> Self {
        let mut v = register_body(spec, source, "");
        if let Json::Object(m) = &mut v {
            m.remove("callback_url");
        }
        let canonical = canonical_json(&v);
        Self(Sha256::digest(canonical.as_bytes()).into())
    }
}

impl fmt::Display for Fingerprint {
    /// The first 12 hex digits, like a short git hash.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// The body of `POST /api/tools/register` for a tool.
pub(crate) fn register_body(spec: &ToolSpec, source: &str, callback_url: &str) -> Json {
    json!({
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "callback_url": callback_url,
        "role": spec.role,
        "source": source,
        "timeout_seconds": spec.timeout_seconds,
    })
}

/// JSON with object keys sorted at every level, so that key order in a
/// manifest never changes a fingerprint.
pub fn canonical_json(v: &Json) -> String {
    fn sorted(v: &Json) -> Json {
        match v {
            Json::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Json::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Json::Array(a) => Json::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// The error at `spec`, which declares the name of `first` again.
pub(crate) fn declared_twice(spec: &ToolSpec, first: &ToolSpec) -> Diagnostic {
    Diagnostic::error(
        &spec.origin.file,
        Some(spec.origin.position()),
        format!(
            "tool `{}` is declared twice: first at {}; tool names must be unique within one sidecar",
            spec.name, first.origin
        ),
    )
}

/// One desired tool.
#[derive(Debug, Clone)]
pub struct DesiredTool {
    pub spec: Arc<ToolSpec>,
    pub fingerprint: Fingerprint,
}

/// Every desired tool, by name (names are unique within a sidecar), and
/// the MCP servers whose tools are to be added (by `mcp`, once listed).
#[derive(Debug, Clone, Default)]
pub struct DesiredState {
    pub source: String,
    pub tools: BTreeMap<String, DesiredTool>,
    /// By name, unique within a sidecar. Empty in the state `mcp` publishes:
    /// by then their tools are in `tools`.
    pub mcp_servers: BTreeMap<String, Arc<McpServerSpec>>,
}

/// The error at `spec`, which declares the MCP server name of `first` again.
pub(crate) fn server_declared_twice(spec: &McpServerSpec, first: &McpServerSpec) -> Diagnostic {
    Diagnostic::error(
        &spec.origin.file,
        Some(spec.origin.position()),
        format!(
            "MCP server `{}` is declared twice: first at {}; MCP server names must be unique within one sidecar",
            spec.name, first.origin
        ),
    )
}

impl DesiredState {
    /// Assembles the tools of valid files. A name declared twice is an error
    /// that names both places; the first declaration (in file order) is kept.
    pub fn assemble(source: &str, files: &[ManifestFile]) -> (Self, Vec<Diagnostic>) {
        let mut tools: BTreeMap<String, DesiredTool> = BTreeMap::new();
        let mut mcp_servers: BTreeMap<String, Arc<McpServerSpec>> = BTreeMap::new();
        let mut diags = Vec::new();
        for file in files {
            for spec in &file.mcp_servers {
                if let Some(first) = mcp_servers.get(&spec.name) {
                    diags.push(server_declared_twice(spec, first));
                    continue;
                }
                mcp_servers.insert(spec.name.clone(), Arc::new(spec.clone()));
            }
            for spec in &file.tools {
                if let Some(first) = tools.get(&spec.name) {
                    diags.push(declared_twice(spec, &first.spec));
                    continue;
                }
                let fingerprint = Fingerprint::of(spec, source);
                tools.insert(
                    spec.name.clone(),
                    DesiredTool {
                        spec: Arc::new(spec.clone()),
                        fingerprint,
                    },
                );
            }
        }
        (
            Self {
                source: source.to_string(),
                tools,
                mcp_servers,
            },
            diags,
        )
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&DesiredTool> {
        self.tools.get(name)
    }
}

/// Every field a consumer uses. The fingerprint covers what main_server
/// sees; the handler, argument validation, concurrency and origin are local
/// but must still reach the callback server.
pub(crate) fn same_spec(a: &ToolSpec, b: &ToolSpec) -> bool {
    a.name == b.name
        && a.description == b.description
        && a.parameters == b.parameters
        && a.timeout_seconds == b.timeout_seconds
        && a.role == b.role
        && a.handler == b.handler
        && a.validate_arguments == b.validate_arguments
        && a.max_concurrency == b.max_concurrency
        && a.origin == b.origin
}

pub(crate) fn same_state(a: &DesiredState, b: &DesiredState) -> bool {
    a.source == b.source
        && a.tools.len() == b.tools.len()
        && a.tools.iter().zip(&b.tools).all(|((na, ta), (nb, tb))| {
            na == nb && ta.fingerprint == tb.fingerprint && Arc::ptr_eq(&ta.spec, &tb.spec)
        })
        && a.mcp_servers.len() == b.mcp_servers.len()
        && a.mcp_servers
            .iter()
            .zip(&b.mcp_servers)
            .all(|((na, sa), (nb, sb))| na == nb && Arc::ptr_eq(sa, sb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{LoadContext, parse_manifest};
    use std::path::Path;

    fn file(path: &str, text: &str) -> ManifestFile {
        let f = parse_manifest(Path::new(path), text, &LoadContext::default());
        assert!(!f.has_errors(), "{:?}", f.diagnostics);
        f
    }

    /// The fingerprint of the `weather` tool of `text`, under `source`.
    fn fingerprint(source: &str, text: &str) -> Fingerprint {
        DesiredState::assemble(source, &[file("a.toml", text)])
            .0
            .tools["weather"]
            .fingerprint
    }

    const TOOL: &str = r#"
[[tool]]
name = "weather"
description = "Weather of a city"
handler = { type = "http", url = "http://127.0.0.1:9/w" }
parameters = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
"#;

    #[test]
    fn key_order_does_not_change_the_fingerprint() {
        let reordered = TOOL.replace(
            "parameters = { type = \"object\", properties = { city = { type = \"string\" } }, required = [\"city\"] }",
            "parameters = { required = [\"city\"], properties = { city = { type = \"string\" } }, type = \"object\" }",
        );
        assert_eq!(
            fingerprint("plugin:x", TOOL),
            fingerprint("plugin:x", &reordered)
        );
    }

    #[test]
    fn what_the_server_receives_changes_the_fingerprint_and_the_handler_does_not() {
        let base = fingerprint("plugin:x", TOOL);
        let variants = [
            TOOL.replace("Weather of a city", "Weather"),
            TOOL.replace("type = \"string\"", "type = \"integer\""),
            TOOL.replace("[[tool]]", "[[tool]]\ntimeout_seconds = 5"),
            TOOL.replace("[[tool]]", "[[tool]]\nrole = \"Lanlan\""),
        ];
        for v in &variants {
            assert_ne!(fingerprint("plugin:x", v), base, "{v}");
        }
        assert_ne!(fingerprint("plugin:y", TOOL), base);
        let other_handler = TOOL.replace("127.0.0.1:9/w", "127.0.0.1:10/v");
        assert_eq!(fingerprint("plugin:x", &other_handler), base);
    }

    #[test]
    fn register_body_has_the_contract_fields() {
        let state = DesiredState::assemble("plugin:x", &[file("a.toml", TOOL)]).0;
        let body = register_body(
            &state.tools["weather"].spec,
            "plugin:x",
            "http://127.0.0.1:1/cb/t/weather",
        );
        assert_eq!(body["name"], "weather");
        assert_eq!(body["role"], Json::Null);
        assert_eq!(body["timeout_seconds"], 30.0);
        assert_eq!(body["source"], "plugin:x");
        assert_eq!(body["callback_url"], "http://127.0.0.1:1/cb/t/weather");
        assert_eq!(body["parameters"]["required"], json!(["city"]));
    }
}
