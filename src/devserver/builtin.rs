//! main_server's own built-in tools, as the stand-in fakes them: listed on
//! every role with source `builtin`, `callback_url: null`, `is_remote:
//! false`, and brought back by a restart.
//!
//! A built-in runs inside the server, so invoking one returns its fixed
//! `answer` instead of calling anything. This module never touches the
//! registry; `registry.rs` seeds roles from these definitions.

use serde_json::{Value, json};

/// The source tag of built-in tools. A client that clears this source
/// deletes them, exactly as upstream does.
pub const BUILTIN_SOURCE: &str = "builtin";

/// One built-in tool of the stand-in.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinTool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    /// What the model sees when it calls this tool through `/__dev/invoke`.
    pub answer: Value,
}

impl BuiltinTool {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        answer: Value,
    ) -> Self {
        BuiltinTool {
            name: name.into(),
            description: description.into(),
            parameters,
            answer,
        }
    }
}

/// The default built-ins: a fake web search and a fake clock.
pub fn default_builtins() -> Vec<BuiltinTool> {
    vec![
        BuiltinTool::new(
            "web_search",
            "Search the web (stand-in: always answers the same result).",
            json!({"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}),
            json!({"results":[{"title":"N.E.K.O","url":"https://example.invalid/neko","snippet":"stand-in result from neko-sidecar dev-server"}]}),
        ),
        BuiltinTool::new(
            "get_current_time",
            "Current date and time (stand-in: a fixed instant).",
            json!({"type":"object","properties":{}}),
            json!({"now":"2025-01-01T00:00:00+09:00"}),
        ),
    ]
}
