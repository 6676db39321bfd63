//! One tool as main_server holds it (`Tool`), and whether it came from a
//! global or a role-scoped registration (`Scope`): the entries of the
//! registry and of the ledger.
//!
//! Plain data, below both: neither `registry.rs` nor `ledger.rs` is needed
//! to read it.

use serde::Serialize;
use serde_json::Value;

use super::builtin::{BUILTIN_SOURCE, BuiltinTool};
use super::eviction::origin_of;
use super::requests::DEFAULT_TIMEOUT_SECONDS;

/// Whether an entry came from a global (`role: null`) or a role-scoped
/// registration. main_server does not show this; the snapshot does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Global,
    Role,
}

/// One tool as one role holds it, with everything the server knows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    /// `None` for built-in tools, which run inside main_server.
    pub callback_url: Option<String>,
    pub source: String,
    pub timeout_seconds: f64,
    pub is_remote: bool,
    pub scope: Scope,
}

impl Tool {
    /// Whether this is a tool of `source` whose callback is on `origin`
    /// (`scheme://host:port`): what a dead-plugin eviction removes.
    pub(crate) fn is_of(&self, source: &str, origin: &str) -> bool {
        self.source == source
            && self.callback_url.as_deref().and_then(origin_of).as_deref() == Some(origin)
    }

    /// The built-in tool as a registry entry.
    pub(crate) fn from_builtin(b: &BuiltinTool) -> Self {
        Tool {
            name: b.name.clone(),
            description: b.description.clone(),
            parameters: b.parameters.clone(),
            callback_url: None,
            source: BUILTIN_SOURCE.to_owned(),
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            is_remote: false,
            scope: Scope::Global,
        }
    }
}
