//! The in-memory tool registry: one ordered tool list per role, as upstream
//! keeps one `ToolRegistry` per role's session manager.
//!
//! A global registration is written into every role as a separate entry, so
//! a later role-scoped registration of the same name only replaces that
//! role's copy, and a global unregister removes every copy. Tool order is
//! insertion order, and replacing a name keeps its place (a Python dict).
//! Pure data: no locking, no I/O, no HTTP; `state.rs` owns the mutex.

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq};
use serde_json::Value;

use super::builtin::BuiltinTool;

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
    /// The built-in tool as a registry entry.
    pub fn from_builtin(b: &BuiltinTool) -> Self {
        Tool {
            name: b.name.clone(),
            description: b.description.clone(),
            parameters: b.parameters.clone(),
            callback_url: None,
            source: super::builtin::BUILTIN_SOURCE.to_owned(),
            timeout_seconds: super::requests::DEFAULT_TIMEOUT_SECONDS,
            is_remote: false,
            scope: Scope::Global,
        }
    }
}

/// The tools of one role, in insertion order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoleTools {
    pub role: String,
    pub tools: Vec<Tool>,
}

/// A role name the registry does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role: {0}")]
pub struct UnknownRole(pub String);

/// Every role and its tools, in role order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registry {
    roles: Vec<RoleTools>,
}

impl Registry {
    /// A fresh registry: every role holds only the built-in tools.
    pub fn new(roles: &[String], builtins: &[BuiltinTool]) -> Self {
        let mut registry = Registry::default();
        for role in roles {
            registry.add_role(role, builtins);
        }
        registry
    }

    pub fn role_names(&self) -> Vec<String> {
        self.roles.iter().map(|r| r.role.clone()).collect()
    }

    pub fn roles(&self) -> &[RoleTools] {
        &self.roles
    }

    /// The roles a request addresses: every role for `None`, else that one.
    pub fn target_roles(&self, role: Option<&str>) -> Result<Vec<String>, UnknownRole> {
        match role {
            None => Ok(self.role_names()),
            Some(r) if self.role(r).is_some() => Ok(vec![r.to_owned()]),
            Some(r) => Err(UnknownRole(r.to_owned())),
        }
    }

    fn role(&self, role: &str) -> Option<&RoleTools> {
        self.roles.iter().find(|r| r.role == role)
    }

    fn role_mut(&mut self, role: &str) -> Option<&mut RoleTools> {
        self.roles.iter_mut().find(|r| r.role == role)
    }

    /// Adds a role holding only the built-ins; a role that exists is left as is.
    pub fn add_role(&mut self, role: &str, builtins: &[BuiltinTool]) -> bool {
        if self.role(role).is_some() {
            return false;
        }
        let tools = builtins.iter().map(Tool::from_builtin).collect();
        self.roles.push(RoleTools {
            role: role.to_owned(),
            tools,
        });
        true
    }

    /// Removes a role and its tools.
    pub fn remove_role(&mut self, role: &str) -> bool {
        let before = self.roles.len();
        self.roles.retain(|r| r.role != role);
        self.roles.len() != before
    }

    /// Inserts or replaces `tool` in `role`, keeping the place of a replaced name.
    pub fn put(&mut self, role: &str, tool: Tool) -> bool {
        let Some(rt) = self.role_mut(role) else {
            return false;
        };
        match rt.tools.iter_mut().find(|t| t.name == tool.name) {
            Some(slot) => *slot = tool,
            None => rt.tools.push(tool),
        }
        true
    }

    /// Removes `name` from `role`; true when it was there.
    pub fn remove(&mut self, role: &str, name: &str) -> bool {
        let Some(rt) = self.role_mut(role) else {
            return false;
        };
        let before = rt.tools.len();
        rt.tools.retain(|t| t.name != name);
        rt.tools.len() != before
    }

    /// Removes every tool of `source` from `role`; returns how many.
    pub fn clear_source(&mut self, role: &str, source: &str) -> usize {
        let Some(rt) = self.role_mut(role) else {
            return 0;
        };
        let before = rt.tools.len();
        rt.tools.retain(|t| t.source != source);
        before - rt.tools.len()
    }

    /// Removes, from every role, the tools of `source` whose callback origin
    /// is `origin`. Returns how many (tool, role) pairs went.
    pub fn evict(&mut self, source: &str, origin: &str) -> usize {
        let mut removed = 0;
        for rt in &mut self.roles {
            let before = rt.tools.len();
            rt.tools.retain(|t| {
                !(t.source == source
                    && t.callback_url
                        .as_deref()
                        .and_then(super::eviction::origin_of)
                        .as_deref()
                        == Some(origin))
            });
            removed += before - rt.tools.len();
        }
        removed
    }

    pub fn find(&self, role: &str, name: &str) -> Option<&Tool> {
        self.role(role)?.tools.iter().find(|t| t.name == name)
    }

    /// The `GET /api/tools` body for `roles` (already checked to exist).
    pub fn listing<'a>(&'a self, role: Option<&'a str>) -> Listing<'a> {
        Listing {
            registry: self,
            role,
        }
    }
}

/// Serialises `{"ok":true,"tools_by_role":{..}}` straight from the registry,
/// without building an intermediate JSON tree: this is what keeps GET fast
/// on large registries.
pub struct Listing<'a> {
    registry: &'a Registry,
    role: Option<&'a str>,
}

struct RoleList<'a>(&'a [Tool]);
struct ToolsByRole<'a>(&'a Listing<'a>);

#[derive(Serialize)]
struct PublicTool<'a> {
    name: &'a str,
    description: &'a str,
    source: &'a str,
    callback_url: Option<&'a str>,
    is_remote: bool,
}

impl Serialize for RoleList<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for t in self.0 {
            seq.serialize_element(&PublicTool {
                name: &t.name,
                description: &t.description,
                source: &t.source,
                callback_url: t.callback_url.as_deref(),
                is_remote: t.is_remote,
            })?;
        }
        seq.end()
    }
}

impl Serialize for ToolsByRole<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let roles = self
            .0
            .registry
            .roles
            .iter()
            .filter(|r| self.0.role.is_none_or(|want| want == r.role));
        let mut map = s.serialize_map(None)?;
        for rt in roles {
            map.serialize_entry(&rt.role, &RoleList(&rt.tools))?;
        }
        map.end()
    }
}

impl Serialize for Listing<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("ok", &true)?;
        map.serialize_entry("tools_by_role", &ToolsByRole(self))?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let names: Vec<_> = r.roles()[0]
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.source.as_str()))
            .collect();
        assert_eq!(names, [("a", "t"), ("b", "s")]);
    }

    #[test]
    fn unknown_role_is_reported() {
        let r = Registry::new(&roles(), &[]);
        assert_eq!(
            r.target_roles(Some("Nobody")),
            Err(UnknownRole("Nobody".into()))
        );
        assert_eq!(r.target_roles(None).unwrap(), roles());
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
        let left: Vec<_> = r.roles()[1].tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(left, ["b", "c"]);
    }

    #[test]
    fn listing_hides_schema_and_scope() {
        let mut r = Registry::new(&roles(), &[]);
        r.put("Lanlan", tool("a", "s", "http://127.0.0.1:1/", Scope::Role));
        let body = serde_json::to_value(r.listing(Some("Lanlan"))).unwrap();
        assert_eq!(
            body,
            json!({"ok":true,"tools_by_role":{"Lanlan":[{"name":"a","description":"","source":"s","callback_url":"http://127.0.0.1:1/","is_remote":true}]}})
        );
    }
}
