//! main_server's ledger: the in-memory list of accepted registrations that
//! it replays into a role whose session manager is (re)built, and into a
//! new role.
//!
//! Entries are kept in the order they were last registered, so a replay
//! reproduces what the live registry holds: a later registration of the
//! same name and scope replaces the earlier entry (moving it to the end),
//! and a global one also supersedes every role-scoped entry of its name, as
//! it replaces those copies in the registry. A registration that answered
//! `ok:false` (every role's sync failed) is still recorded; only an `ok`
//! unregister or clear, or an eviction, removes entries. A registration no
//! role could take (no role at all) is never recorded.
//!
//! Pure data owned by `Registry`, so a restart (a fresh registry) loses it
//! too. No locking, no I/O.

use serde::Serialize;

use super::tool::Tool;

/// One accepted registration: the tool as registered and its scope.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerEntry {
    /// The role it was scoped to; `None` for a global registration.
    pub role: Option<String>,
    pub tool: Tool,
}

impl LedgerEntry {
    /// Whether a replay into `role` writes this entry.
    fn applies_to(&self, role: &str) -> bool {
        self.role.as_deref().is_none_or(|r| r == role)
    }

    /// Whether an operation addressed to `role` (`None`: every role) covers
    /// this entry. A role-addressed operation leaves global entries alone:
    /// the other roles still hold those tools.
    fn addressed_by(&self, role: Option<&str>) -> bool {
        role.is_none() || self.role.as_deref() == role
    }
}

/// The accepted registrations, in replay order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ledger {
    entries: Vec<LedgerEntry>,
}

impl Ledger {
    pub(crate) fn entries(&self) -> &[LedgerEntry] {
        &self.entries
    }

    /// Records a registration of `tool` scoped to `role` (`None`: global).
    pub(crate) fn record(&mut self, role: Option<&str>, tool: Tool) {
        let global = role.is_none();
        self.entries.retain(|e| {
            let superseded = e.tool.name == tool.name && (global || e.role.as_deref() == role);
            !superseded
        });
        self.entries.push(LedgerEntry {
            role: role.map(str::to_owned),
            tool,
        });
    }

    /// Forgets the registrations of `name` an unregister addressed to
    /// `role` covers; returns how many.
    pub(crate) fn forget_name(&mut self, name: &str, role: Option<&str>) -> usize {
        self.forget(|e| e.tool.name == name && e.addressed_by(role))
    }

    /// Forgets the registrations of `source` a clear addressed to `role`
    /// covers; returns how many.
    pub(crate) fn forget_source(&mut self, source: &str, role: Option<&str>) -> usize {
        self.forget(|e| e.tool.source == source && e.addressed_by(role))
    }

    /// Forgets every registration of `source` whose callback is on
    /// `origin` (`scheme://host:port`), whatever its scope.
    pub(crate) fn evict(&mut self, source: &str, origin: &str) -> usize {
        self.forget(|e| e.tool.is_of(source, origin))
    }

    /// The tools a replay into `role` writes, in order.
    pub(crate) fn replay_for<'a>(&'a self, role: &'a str) -> impl Iterator<Item = &'a Tool> + 'a {
        self.entries
            .iter()
            .filter(move |e| e.applies_to(role))
            .map(|e| &e.tool)
    }

    fn forget(&mut self, doomed: impl Fn(&LedgerEntry) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| !doomed(e));
        before - self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devserver::tool::Scope;
    use serde_json::json;

    fn tool(name: &str, source: &str, port: u16, scope: Scope) -> Tool {
        Tool {
            name: name.into(),
            description: String::new(),
            parameters: json!({}),
            callback_url: Some(format!("http://127.0.0.1:{port}/{name}")),
            source: source.into(),
            timeout_seconds: 30.0,
            is_remote: true,
            scope,
        }
    }

    fn keys(l: &Ledger) -> Vec<(String, Option<String>, String)> {
        l.entries()
            .iter()
            .map(|e| (e.tool.name.clone(), e.role.clone(), e.tool.source.clone()))
            .collect()
    }

    fn k(name: &str, role: Option<&str>, source: &str) -> (String, Option<String>, String) {
        (name.into(), role.map(Into::into), source.into())
    }

    #[test]
    fn a_later_registration_of_the_same_name_and_scope_replaces_and_moves_last() {
        let mut l = Ledger::default();
        l.record(None, tool("a", "s", 1, Scope::Global));
        l.record(Some("R"), tool("b", "s", 1, Scope::Role));
        l.record(Some("Q"), tool("a", "s", 1, Scope::Role));
        l.record(None, tool("a", "t", 1, Scope::Global));
        assert_eq!(
            keys(&l),
            [k("b", Some("R"), "s"), k("a", None, "t")],
            "a global registration supersedes the scoped entries of its name"
        );
        l.record(Some("R"), tool("a", "u", 1, Scope::Role));
        l.record(Some("R"), tool("b", "v", 1, Scope::Role));
        assert_eq!(
            keys(&l),
            [
                k("a", None, "t"),
                k("a", Some("R"), "u"),
                k("b", Some("R"), "v")
            ]
        );
    }

    #[test]
    fn forgetting_follows_the_scope_of_the_operation() {
        let mut l = Ledger::default();
        l.record(None, tool("g", "s", 1, Scope::Global));
        l.record(Some("R"), tool("r", "s", 1, Scope::Role));
        l.record(Some("Q"), tool("r", "s", 1, Scope::Role));
        assert_eq!(l.forget_name("r", Some("R")), 1);
        assert_eq!(l.forget_source("s", Some("R")), 0, "the global entry stays");
        assert_eq!(l.forget_source("s", None), 2);
        assert!(l.entries().is_empty());
    }

    #[test]
    fn eviction_forgets_the_source_on_that_origin_only() {
        let mut l = Ledger::default();
        l.record(None, tool("a", "plugin:p", 7000, Scope::Global));
        l.record(Some("R"), tool("b", "plugin:p", 7000, Scope::Role));
        l.record(None, tool("c", "plugin:p", 7001, Scope::Global));
        l.record(None, tool("d", "plugin:q", 7000, Scope::Global));
        assert_eq!(l.evict("plugin:p", "http://127.0.0.1:7000"), 2);
        let names: Vec<_> = l.entries().iter().map(|e| e.tool.name.as_str()).collect();
        assert_eq!(names, ["c", "d"]);
    }
}
