//! Which tools of an MCP server's listing become ours, and under which
//! name: the pure rule from a `tools/list` result and the server's
//! `[[mcp_server]]` to `ToolSpec`s, and the reason for each tool refused.
//!
//! A tool is `prefix + name`, with the listed description and `inputSchema`
//! as its parameters. A name main_server would refuse, a name another tool
//! already has, or a schema our manifest rules refuse is a rejection of that
//! tool alone, with the reason: never a truncated or renamed tool, which the
//! model would call by a name nobody chose. Never I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value as Json;

use crate::manifest::schema::compile;
use crate::manifest::{Handler, McpServerSpec, McpToolHandler, ToolSpec, valid_name};

/// One MCP tool as listed (the wire fields we use).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Listed {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub input_schema: Json,
}

impl Listed {
    /// From a tool as the specification writes it on the wire.
    pub(crate) fn from_wire(v: &Json) -> Option<Self> {
        Some(Self {
            name: v.get("name")?.as_str()?.to_string(),
            title: v.get("title").and_then(Json::as_str).map(str::to_string),
            description: v
                .get("description")
                .and_then(Json::as_str)
                .map(str::to_string),
            input_schema: v.get("inputSchema").cloned().unwrap_or(Json::Null),
        })
    }
}

/// A listed tool that is not offered, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rejected {
    /// The name it would have had (prefix + MCP name).
    pub name: String,
    pub reason: String,
}

/// What one server's listing gives.
#[derive(Debug, Clone, Default)]
pub(crate) struct Offered {
    pub tools: Vec<ToolSpec>,
    pub rejected: Vec<Rejected>,
    /// Left out by `include`/`exclude`.
    pub filtered: usize,
}

/// The most bytes a tool's description may have: past it the tool is
/// refused (a 15 MB description went to main_server as is before issue 49).
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// The most bytes a tool's `inputSchema` may have, as JSON.
pub(crate) const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// The compiled schemas of a server's last offer, by MCP tool name, with
/// the schema each was compiled from: a listing that changed recompiles
/// only the schemas that did.
pub(crate) type Compiled = HashMap<String, (Json, Arc<jsonschema::Validator>)>;

/// A name as it may be shown: a long one cut, its length said (a 5 MB
/// name made a 10.8 MB `/status` before issue 49).
fn shown(name: &str) -> String {
    const SHOWN: usize = 80;
    if name.len() <= SHOWN {
        return name.to_owned();
    }
    let mut end = SHOWN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &name[..end], name.len())
}

/// The tools `server` offers from `listing`. `taken(name)` says which tool
/// already has a name (manifest tools and the servers before this one),
/// as a sentence.
#[cfg(test)]
pub(crate) fn offered(
    server: &McpServerSpec,
    listing: &[Listed],
    taken: impl Fn(&str) -> Option<String>,
) -> Offered {
    offered_with(server, listing, taken, &mut Compiled::new())
}

/// [`offered`], reusing the schemas `compiled` holds and leaving there
/// those of this offer.
pub(crate) fn offered_with(
    server: &McpServerSpec,
    listing: &[Listed],
    taken: impl Fn(&str) -> Option<String>,
    compiled: &mut Compiled,
) -> Offered {
    let previous = std::mem::take(compiled);
    let mut out = Offered::default();
    let mut mine: BTreeMap<String, &str> = BTreeMap::new();
    for tool in listing {
        if !server.offers(&tool.name) {
            out.filtered += 1;
            continue;
        }
        let name = format!("{}{}", server.prefix, tool.name);
        let reject = |reason: String| Rejected {
            name: shown(&name),
            reason,
        };
        if !valid_name(&name) {
            let why = if name.len() > 64 {
                format!(
                    "`{}` is {} characters long: main_server allows at most 64 (A-Z a-z 0-9 _ . -); set a shorter `prefix` for MCP server `{}`, or leave the tool out with `exclude`",
                    shown(&name),
                    name.chars().count(),
                    server.name
                )
            } else {
                format!(
                    "`{}` is not a name main_server accepts (1 to 64 characters from A-Z a-z 0-9 _ . -); leave the tool out with `exclude`",
                    shown(&name).escape_debug()
                )
            };
            out.rejected.push(reject(why));
            continue;
        }
        if let Some(owner) = taken(&name) {
            out.rejected.push(reject(format!(
                "`{name}` is already the name of {owner}; tool names must be unique within one sidecar: set another `prefix` for MCP server `{}`",
                server.name
            )));
            continue;
        }
        if let Some(first) = mine.get(&name) {
            out.rejected.push(reject(format!(
                "the server lists `{first}` twice; the first is kept"
            )));
            continue;
        }
        let description = [&tool.description, &tool.title]
            .into_iter()
            .flatten()
            .find(|d| !d.trim().is_empty());
        let Some(description) = description else {
            out.rejected.push(reject(
                "the server gives it no description (nor title); the model reads the description to decide when to call a tool".into(),
            ));
            continue;
        };
        if description.len() > MAX_DESCRIPTION_BYTES {
            out.rejected.push(reject(format!(
                "its description is {} bytes; the sidecar offers tools whose description is at most {MAX_DESCRIPTION_BYTES}",
                description.len()
            )));
            continue;
        }
        let schema_bytes = serde_json::to_string(&tool.input_schema).map_or(0, |s| s.len());
        if schema_bytes > MAX_SCHEMA_BYTES {
            out.rejected.push(reject(format!(
                "its inputSchema is {schema_bytes} bytes as JSON; the sidecar offers tools whose schema is at most {MAX_SCHEMA_BYTES}"
            )));
            continue;
        }
        let reused = previous
            .get(&tool.name)
            .filter(|(schema, _)| *schema == tool.input_schema)
            .map(|(_, v)| v.clone());
        let compiled_now = match reused {
            Some(v) => Ok(v),
            None => compile(&tool.input_schema).map(Arc::new),
        };
        let validator = match compiled_now {
            Ok(v) => v,
            Err(problems) => {
                let list: Vec<String> = problems
                    .iter()
                    .map(|p| {
                        if p.pointer.is_empty() {
                            p.message.clone()
                        } else {
                            format!("{} (at {})", p.message, p.pointer)
                        }
                    })
                    .collect();
                out.rejected.push(reject(format!(
                    "its inputSchema is refused: {}",
                    list.join("; ")
                )));
                continue;
            }
        };
        mine.insert(name.clone(), &tool.name);
        compiled.insert(
            tool.name.clone(),
            (tool.input_schema.clone(), validator.clone()),
        );
        out.tools.push(ToolSpec {
            name,
            description: description.clone(),
            parameters: tool.input_schema.clone(),
            validator,
            timeout_seconds: server.timeout_seconds,
            role: server.role.clone(),
            handler: Handler::Mcp(McpToolHandler {
                server: server.name.clone(),
                tool: tool.name.clone(),
            }),
            validate_arguments: true,
            // The bound is the server's, across its tools (`Session`).
            max_concurrency: None,
            origin: server.origin.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{HttpKind, McpTransport, Origin};
    use serde_json::json;

    fn server(prefix: &str) -> McpServerSpec {
        McpServerSpec {
            name: "files".into(),
            transport: McpTransport::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: BTreeMap::new(),
                kind: HttpKind::Detect,
                options: Default::default(),
            },
            prefix: prefix.into(),
            include: None,
            exclude: Vec::new(),
            timeout_seconds: 30.0,
            startup_timeout_seconds: 120.0,
            role: None,
            max_concurrency: None,
            origin: Origin {
                file: "m.toml".into(),
                line: 1,
                col: 1,
            },
        }
    }

    fn tool(name: &str) -> Listed {
        Listed {
            name: name.into(),
            title: None,
            description: Some(format!("does {name}")),
            input_schema: json!({"type": "object", "properties": {}}),
        }
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn oversized_names_descriptions_and_schemas_are_refused_and_shown_short() {
        let long = Listed {
            name: "n".repeat(5_000_000),
            ..tool("x")
        };
        let wordy = Listed {
            description: Some("d".repeat(MAX_DESCRIPTION_BYTES + 1)),
            ..tool("wordy")
        };
        let huge = Listed {
            input_schema: json!({"type": "object", "description": "s".repeat(MAX_SCHEMA_BYTES)}),
            ..tool("huge")
        };
        let forged = tool("a\nERROR forged");
        let o = offered(&server(""), &[long, wordy, huge, forged], none);
        assert!(o.tools.is_empty());
        let r = &o.rejected;
        assert_eq!(r[0].name, format!("{}… (5000000 bytes)", "n".repeat(80)));
        assert!(r[0].reason.len() < 400, "{}", r[0].reason.len());
        assert!(
            r[0].reason.contains("is 5000000 characters long"),
            "{}",
            r[0].reason
        );
        assert_eq!(
            r[1].reason,
            "its description is 16385 bytes; the sidecar offers tools whose description is at most 16384"
        );
        assert!(
            r[2].reason.starts_with("its inputSchema is 262"),
            "{}",
            r[2].reason
        );
        assert!(
            r[3].reason.starts_with("`a\\nERROR forged` is not a name"),
            "{}",
            r[3].reason
        );
    }

    #[test]
    fn a_schema_unchanged_since_the_last_offer_is_not_compiled_again() {
        let mut compiled = Compiled::new();
        let first = offered_with(&server(""), &[tool("a"), tool("b")], none, &mut compiled);
        let changed_b = Listed {
            input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            ..tool("b")
        };
        let second = offered_with(&server(""), &[tool("a"), changed_b], none, &mut compiled);
        assert!(Arc::ptr_eq(
            &first.tools[0].validator,
            &second.tools[0].validator
        ));
        assert!(!Arc::ptr_eq(
            &first.tools[1].validator,
            &second.tools[1].validator
        ));
        // Only the current tools' schemas are kept.
        offered_with(&server(""), &[tool("a")], none, &mut compiled);
        assert_eq!(compiled.len(), 1);
    }

    #[test]
    fn tools_get_the_prefix_and_the_servers_settings() {
        let mut s = server("files_");
        s.role = Some("Lanlan".into());
        let o = offered(&s, &[tool("read")], none);
        let t = &o.tools[0];
        assert_eq!(t.name, "files_read");
        assert_eq!(t.role.as_deref(), Some("Lanlan"));
        assert_eq!(
            t.handler,
            Handler::Mcp(McpToolHandler {
                server: "files".into(),
                tool: "read".into()
            })
        );
    }

    #[test]
    fn include_and_exclude_filter_by_the_mcp_name() {
        let mut s = server("f_");
        s.include = Some(vec!["a".into(), "b".into()]);
        s.exclude = vec!["b".into()];
        let o = offered(&s, &[tool("a"), tool("b"), tool("c")], none);
        let names: Vec<&str> = o.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["f_a"]);
        assert_eq!(o.filtered, 2);
    }

    #[test]
    fn a_name_too_long_is_rejected_with_its_length_never_truncated() {
        let long = "x".repeat(60);
        let o = offered(&server("files_"), &[tool(&long), tool("ok")], none);
        assert_eq!(o.tools.len(), 1);
        assert_eq!(o.rejected[0].name, format!("files_{long}"));
        assert!(
            o.rejected[0].reason.contains("66 characters"),
            "{:?}",
            o.rejected
        );
    }

    #[test]
    fn a_taken_name_a_bad_schema_or_no_description_rejects_that_tool_alone() {
        let mut bad = tool("bad");
        bad.input_schema = json!({"type": "object", "properties": {"x": {"type": "nonsense"}}});
        let mut mute = tool("mute");
        mute.description = None;
        let mut titled = tool("titled");
        titled.description = None;
        titled.title = Some("A titled tool".into());
        let taken = |n: &str| (n == "f_weather").then(|| "tool `f_weather` (a.toml:1:1)".into());
        let o = offered(
            &server("f_"),
            &[tool("weather"), bad, mute, titled, tool("fine")],
            taken,
        );
        let names: Vec<&str> = o.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["f_titled", "f_fine"]);
        assert_eq!(o.tools[0].description, "A titled tool");
        let reasons: Vec<&str> = o.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert!(reasons[0].contains("already the name of tool `f_weather`"));
        assert!(reasons[1].contains("inputSchema is refused"));
        assert!(reasons[2].contains("no description"));
    }
}
