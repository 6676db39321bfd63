//! main_server's own built-in tools, as the stand-in fakes them: listed on
//! every role with source `builtin`, `callback_url: null`, `is_remote:
//! false`, and brought back by a restart and whenever a role is (re)built.
//! Upstream has exactly one, `recall_memory`; the stand-in invents no
//! others (a builder can still set its own list, or none, as main_server's
//! `NEKO_DISABLE_BUILTIN_TOOLS` does).
//!
//! A built-in runs inside the server, so invoking one returns its fixed
//! `answer` instead of calling anything. This module never touches the
//! registry; `registry.rs` seeds roles from these definitions.

use serde_json::{Value, json};

pub use crate::contract::BUILTIN_SOURCE;

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
    pub(crate) fn new(
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

pub use crate::contract::RECALL_MEMORY;

/// The default built-ins: upstream's `recall_memory` alone, with a fixed
/// answer (the stand-in has no memory to search).
pub fn default_builtins() -> Vec<BuiltinTool> {
    vec![BuiltinTool::new(
        RECALL_MEMORY,
        "Recall what the character remembers about the user and past conversations (stand-in: always answers the same memory).",
        json!({"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}),
        json!({"memories":[{"text":"stand-in memory from neko-sidecar dev-server","score":1.0}]}),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_memory_is_the_one_default_builtin() {
        let names: Vec<_> = default_builtins().into_iter().map(|b| b.name).collect();
        assert_eq!(names, [RECALL_MEMORY]);
    }
}
