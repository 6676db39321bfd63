//! The in-memory tool registry: one ordered tool list per role, as upstream
//! keeps one `ToolRegistry` per role's session manager.
//!
//! A global registration is written into every role as a separate entry, so
//! a later role-scoped registration of the same name only replaces that
//! role's copy, and a global unregister removes every copy. Tool order is
//! insertion order, and replacing a name keeps its place (a Python dict).
//! Each entry keeps its `GET /api/tools` JSON, serialised once when it is
//! written, so a listing is a concatenation, fast even on large registries.
//!
//! The registry also owns main_server's ledger of accepted registrations
//! (`ledger.rs`): a role added or rebuilt starts from the built-ins and gets
//! the ledger replayed, and an eviction removes a dead plugin's tools from
//! both. A fresh registry (a restart) has an empty ledger.
//! Pure data: no locking, no I/O, no HTTP; `state.rs` owns the mutex.

use serde::Serialize;
use serde_json::{Value, json};

use super::builtin::BuiltinTool;
use super::ledger::Ledger;
use super::tool::Tool;

/// The tools of one role, in insertion order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoleTools {
    pub role: String,
    pub tools: Vec<Tool>,
}

/// A role name the registry does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role: {0}")]
pub(crate) struct UnknownRole(pub String);

/// One tool as stored: the tool and its `GET /api/tools` JSON.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    tool: Tool,
    listed: String,
}

impl Entry {
    fn new(tool: Tool) -> Self {
        // Only the five public fields: GET never shows parameters, timeout
        // or scope.
        let listed = json!({
            "name": tool.name,
            "description": tool.description,
            "source": tool.source,
            "callback_url": tool.callback_url,
            "is_remote": tool.is_remote,
        })
        .to_string();
        Entry { tool, listed }
    }
}

/// Replaces the entry of `tool`'s name in place, or appends one.
fn put_entry(entries: &mut Vec<Entry>, tool: Tool) {
    let entry = Entry::new(tool);
    match entries.iter_mut().find(|e| e.tool.name == entry.tool.name) {
        Some(slot) => *slot = entry,
        None => entries.push(entry),
    }
}

#[derive(Debug, Clone, PartialEq)]
struct RoleEntries {
    role: String,
    entries: Vec<Entry>,
}

/// Every role and its tools, in role order, and the ledger.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Registry {
    roles: Vec<RoleEntries>,
    ledger: Ledger,
}

impl Registry {
    /// A fresh registry: every role holds only the built-in tools.
    pub(crate) fn new(roles: &[String], builtins: &[BuiltinTool]) -> Self {
        let mut registry = Registry::default();
        for role in roles {
            registry.add_role(role, builtins);
        }
        registry
    }

    pub(crate) fn role_names(&self) -> Vec<String> {
        self.roles.iter().map(|r| r.role.clone()).collect()
    }

    /// A copy of every role's tools, in order.
    pub(crate) fn roles(&self) -> Vec<RoleTools> {
        self.roles
            .iter()
            .map(|r| RoleTools {
                role: r.role.clone(),
                tools: r.entries.iter().map(|e| e.tool.clone()).collect(),
            })
            .collect()
    }

    /// The roles a request addresses: every role for `None`, else that one.
    pub(crate) fn target_roles(&self, role: Option<&str>) -> Result<Vec<String>, UnknownRole> {
        match role {
            None => Ok(self.role_names()),
            Some(r) if self.role(r).is_some() => Ok(vec![r.to_owned()]),
            Some(r) => Err(UnknownRole(r.to_owned())),
        }
    }

    fn role(&self, role: &str) -> Option<&RoleEntries> {
        self.roles.iter().find(|r| r.role == role)
    }

    fn role_mut(&mut self, role: &str) -> Option<&mut RoleEntries> {
        self.roles.iter_mut().find(|r| r.role == role)
    }

    /// Adds a role as main_server builds a new session manager: the
    /// built-ins, then the ledger's global entries and those scoped to it.
    /// A role that exists is left as is.
    pub(crate) fn add_role(&mut self, role: &str, builtins: &[BuiltinTool]) -> bool {
        if self.role(role).is_some() {
            return false;
        }
        self.roles.push(RoleEntries {
            role: role.to_owned(),
            entries: Vec::new(),
        });
        self.build_role(role, builtins);
        true
    }

    /// Rebuilds `role`'s session manager: its tools are reset to the
    /// built-ins and the ledger is replayed into it. False for an unknown
    /// role.
    pub(crate) fn rebuild_role(&mut self, role: &str, builtins: &[BuiltinTool]) -> bool {
        if self.role(role).is_none() {
            return false;
        }
        self.build_role(role, builtins);
        true
    }

    fn build_role(&mut self, role: &str, builtins: &[BuiltinTool]) {
        let mut entries: Vec<Entry> = builtins
            .iter()
            .map(|b| Entry::new(Tool::from_builtin(b)))
            .collect();
        for tool in self.ledger.replay_for(role) {
            put_entry(&mut entries, tool.clone());
        }
        if let Some(rt) = self.role_mut(role) {
            rt.entries = entries;
        }
    }

    /// The ledger of accepted registrations.
    pub(crate) fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub(crate) fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    /// Removes a role and its tools.
    pub(crate) fn remove_role(&mut self, role: &str) -> bool {
        let before = self.roles.len();
        self.roles.retain(|r| r.role != role);
        self.roles.len() != before
    }

    /// Inserts or replaces `tool` in `role`, keeping the place of a replaced name.
    pub(crate) fn put(&mut self, role: &str, tool: Tool) -> bool {
        let Some(rt) = self.role_mut(role) else {
            return false;
        };
        put_entry(&mut rt.entries, tool);
        true
    }

    /// Removes from `role` the tools `doomed` picks; returns how many.
    fn remove_where(&mut self, role: &str, doomed: impl Fn(&Tool) -> bool) -> usize {
        let Some(rt) = self.role_mut(role) else {
            return 0;
        };
        let before = rt.entries.len();
        rt.entries.retain(|e| !doomed(&e.tool));
        before - rt.entries.len()
    }

    /// Removes `name` from `role`; true when it was there.
    pub(crate) fn remove(&mut self, role: &str, name: &str) -> bool {
        self.remove_where(role, |t| t.name == name) > 0
    }

    /// Removes every tool of `source` from `role`; returns how many.
    pub fn clear_source(&mut self, role: &str, source: &str) -> usize {
        self.remove_where(role, |t| t.source == source)
    }

    /// Removes, from every role and from the ledger, the tools of `source`
    /// whose callback origin is `origin`. Returns how many (tool, role)
    /// pairs went from the roles.
    pub(crate) fn evict(&mut self, source: &str, origin: &str) -> usize {
        self.ledger.evict(source, origin);
        self.role_names()
            .iter()
            .map(|role| self.remove_where(role, |t| t.is_of(source, origin)))
            .sum()
    }

    pub(crate) fn find(&self, role: &str, name: &str) -> Option<&Tool> {
        self.role(role)?
            .entries
            .iter()
            .map(|e| &e.tool)
            .find(|t| t.name == name)
    }

    /// The `GET /api/tools` body, `{"ok":true,"tools_by_role":{..}}`, for
    /// every role (`None`) or one role (already checked to exist).
    pub(crate) fn listing_json(&self, role: Option<&str>) -> String {
        let roles: Vec<&RoleEntries> = self
            .roles
            .iter()
            .filter(|r| role.is_none_or(|want| want == r.role))
            .collect();
        let size: usize = roles
            .iter()
            .flat_map(|r| &r.entries)
            .map(|e| e.listed.len() + 1)
            .sum();
        let mut out = String::with_capacity(size + 64 * roles.len() + 32);
        out.push_str(r#"{"ok":true,"tools_by_role":{"#);
        for (i, r) in roles.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::String(r.role.clone()).to_string());
            out.push_str(":[");
            for (j, e) in r.entries.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                out.push_str(&e.listed);
            }
            out.push(']');
        }
        out.push_str("}}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devserver::tool::Scope;
    use serde_json::json;

    fn tool(name: &str, source: &str, url: &str, scope: Scope) -> Tool {
        Tool {
            name: name.into(),
            description: String::new(),
            parameters: json!({}),
            callback_url: Some(url.into()),
            source: source.into(),
            timeout_seconds: 30.0,
            is_remote: true,
            scope,
        }
    }

    fn roles() -> Vec<String> {
        vec!["小八".into(), "Lanlan".into()]
    }

    #[test]
    fn replacing_keeps_the_place() {
        let mut r = Registry::new(&roles(), &[]);
        r.put("小八", tool("a", "s", "http://127.0.0.1:1/", Scope::Role));
        r.put("小八", tool("b", "s", "http://127.0.0.1:1/", Scope::Role));
        r.put("小八", tool("a", "t", "http://127.0.0.1:2/", Scope::Global));
        let roles = r.roles();
        let names: Vec<_> = roles[0]
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.source.as_str()))
            .collect();
        assert_eq!(names, [("a", "t"), ("b", "s")]);
    }

    #[test]
    fn evict_matches_source_and_origin_in_every_role() {
        let mut r = Registry::new(&roles(), &[]);
        for role in roles() {
            r.put(
                &role,
                tool("a", "plugin:p", "http://127.0.0.1:7000/a", Scope::Global),
            );
            r.put(
                &role,
                tool("b", "plugin:p", "http://127.0.0.1:7001/b", Scope::Global),
            );
            r.put(
                &role,
                tool("c", "plugin:q", "http://127.0.0.1:7000/c", Scope::Global),
            );
        }
        assert_eq!(r.evict("plugin:p", "http://127.0.0.1:7000"), 2);
        let left: Vec<_> = r.roles()[1].tools.iter().map(|t| t.name.clone()).collect();
        assert_eq!(left, ["b", "c"]);
    }

    #[test]
    fn listing_is_valid_json_in_role_order() {
        let mut r = Registry::new(&roles(), &[]);
        r.put(
            "小八",
            tool("q\"uote", "s", "http://127.0.0.1:1/", Scope::Role),
        );
        let body: Value = serde_json::from_str(&r.listing_json(None)).unwrap();
        let keys: Vec<_> = body["tools_by_role"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, roles());
        assert_eq!(body["tools_by_role"]["小八"][0]["name"], "q\"uote");
        assert_eq!(body["tools_by_role"]["Lanlan"], json!([]));
    }

    fn builtin() -> Vec<BuiltinTool> {
        vec![BuiltinTool::new(
            "recall_memory",
            "",
            json!({}),
            json!(null),
        )]
    }

    #[test]
    fn rebuilding_a_role_resets_it_to_the_builtins_and_replays_the_ledger() {
        let mut r = Registry::new(&roles(), &builtin());
        let g = tool("g", "s", "http://127.0.0.1:1/g", Scope::Global);
        let own = tool("own", "s", "http://127.0.0.1:1/o", Scope::Role);
        for role in roles() {
            r.put(&role, g.clone());
        }
        r.ledger_mut().record(None, g);
        r.put("小八", own.clone());
        r.ledger_mut().record(Some("小八"), own);
        // Written to the registry without a ledger entry: a rebuild drops it.
        r.put(
            "小八",
            tool("stray", "s", "http://127.0.0.1:1/x", Scope::Role),
        );
        r.clear_source("小八", "builtin");
        assert!(r.rebuild_role("小八", &builtin()));
        assert_eq!(
            r.roles()[0]
                .tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["recall_memory", "g", "own"]
        );
        assert!(!r.rebuild_role("Nobody", &builtin()));
    }

    #[test]
    fn a_new_role_gets_the_builtins_and_its_ledger_entries() {
        let mut r = Registry::new(&roles(), &builtin());
        r.ledger_mut()
            .record(None, tool("g", "s", "http://127.0.0.1:1/g", Scope::Global));
        r.ledger_mut().record(
            Some("Mochi"),
            tool("m", "s", "http://127.0.0.1:1/m", Scope::Role),
        );
        r.ledger_mut().record(
            Some("小八"),
            tool("x", "s", "http://127.0.0.1:1/x", Scope::Role),
        );
        assert!(r.add_role("Mochi", &builtin()));
        assert_eq!(
            r.roles()[2]
                .tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["recall_memory", "g", "m"]
        );
    }
}
