//! What the four tool-API operations do to the registry and its ledger and
//! answer, once a request is valid: role targeting, per-role sync results,
//! and the exact JSON of each 200 answer.
//!
//! Ledger rules: a registration some role took is recorded even when every
//! sync failed (`ok:false`); one no role could take (no role at all) is
//! not. An unregister or clear forgets matching entries only when it
//! answers `ok:true`, so a registration survives in the ledger until such a
//! call succeeds.
//!
//! Pure over the registry and the faults: no HTTP, no locking. An unknown
//! role is returned as an error for the HTTP layer to turn into a 404.

use serde_json::{Value, json};

use super::faults::Faults;
use super::registry::{Registry, UnknownRole};
use super::requests::{ClearRequest, RegisterRequest, UnregisterRequest};
use super::tool::{Scope, Tool};

/// The error a role reports when its sync is made to fail.
pub(crate) const SYNC_FAILURE: &str = "session tool sync failed (injected by dev-server)";

/// Per-role outcome of one operation.
#[derive(Debug, Default)]
struct RoleResults {
    affected: Vec<String>,
    failed: Vec<Value>,
}

impl RoleResults {
    fn record(&mut self, role: &str, faults: &Faults) {
        if faults.role_sync_fails(role) {
            self.failed
                .push(json!({ "role": role, "error": SYNC_FAILURE }));
        } else {
            self.affected.push(role.to_owned());
        }
    }

    /// `ok` for unregister and clear: false only when some role failed and
    /// none succeeded, so a no-op (unknown name) is `ok:true`.
    fn ok_unless_all_failed(&self) -> bool {
        self.failed.is_empty() || !self.affected.is_empty()
    }
}

/// `POST /api/tools/register`. Every target role gets the tool written,
/// even one whose sync then fails, and the ledger records it; with no role
/// at all nothing is written anywhere.
pub(crate) fn register(
    registry: &mut Registry,
    faults: &Faults,
    req: RegisterRequest,
) -> Result<Value, UnknownRole> {
    let roles = registry.target_roles(req.role.as_deref())?;
    let scope = if req.role.is_none() {
        Scope::Global
    } else {
        Scope::Role
    };
    let tool = Tool {
        name: req.name.clone(),
        description: req.description,
        parameters: req.parameters,
        callback_url: Some(req.callback_url),
        source: req.source,
        timeout_seconds: req.timeout_seconds,
        is_remote: true,
        scope,
    };
    let mut results = RoleResults::default();
    for role in &roles {
        registry.put(role, tool.clone());
        results.record(role, faults);
    }
    if !roles.is_empty() {
        registry.ledger_mut().record(req.role.as_deref(), tool);
    }
    let ok = !results.affected.is_empty();
    let mut body = json!({
        "ok": ok,
        "registered": req.name,
        "affected_roles": results.affected,
        "failed_roles": results.failed,
    });
    if !ok && let Some(obj) = body.as_object_mut() {
        obj.insert("error".into(), json!("no role accepted the registration"));
    }
    Ok(body)
}

/// `POST /api/tools/unregister`: removes the name whoever registered it.
/// Only roles that held the name sync, so only they are reported.
pub(crate) fn unregister(
    registry: &mut Registry,
    faults: &Faults,
    req: UnregisterRequest,
) -> Result<Value, UnknownRole> {
    let roles = registry.target_roles(req.role.as_deref())?;
    let mut results = RoleResults::default();
    for role in &roles {
        if registry.remove(role, &req.name) {
            results.record(role, faults);
        }
    }
    let removed = !results.affected.is_empty() || !results.failed.is_empty();
    let ok = results.ok_unless_all_failed();
    if ok {
        registry
            .ledger_mut()
            .forget_name(&req.name, req.role.as_deref());
    }
    Ok(json!({
        "ok": ok,
        "removed": removed,
        "name": req.name,
        "affected_roles": results.affected,
        "failed_roles": results.failed,
    }))
}

/// `POST /api/tools/clear`: `removed` counts (tool, role) pairs.
pub(crate) fn clear(
    registry: &mut Registry,
    faults: &Faults,
    req: ClearRequest,
) -> Result<Value, UnknownRole> {
    let roles = registry.target_roles(req.role.as_deref())?;
    let mut results = RoleResults::default();
    let mut removed = 0;
    for role in &roles {
        let n = registry.clear_source(role, &req.source);
        if n > 0 {
            removed += n;
            results.record(role, faults);
        }
    }
    let ok = results.ok_unless_all_failed();
    if ok {
        registry
            .ledger_mut()
            .forget_source(&req.source, req.role.as_deref());
    }
    Ok(json!({
        "ok": ok,
        "removed": removed,
        "source": req.source,
        "affected_roles": results.affected,
        "failed_roles": results.failed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devserver::builtin::default_builtins;

    fn registry() -> Registry {
        Registry::new(&["小八".into(), "Lanlan".into()], &default_builtins())
    }

    fn reg(name: &str, role: Option<&str>, source: &str) -> RegisterRequest {
        RegisterRequest {
            name: name.into(),
            description: String::new(),
            parameters: json!({}),
            callback_url: "http://127.0.0.1:9/x".into(),
            role: role.map(Into::into),
            source: source.into(),
            timeout_seconds: 30.0,
        }
    }

    #[test]
    fn global_register_writes_every_role_and_replaces_role_copies() {
        let mut r = registry();
        let f = Faults::default();
        register(&mut r, &f, reg("t", Some("Lanlan"), "a")).unwrap();
        let body = register(&mut r, &f, reg("t", None, "b")).unwrap();
        assert_eq!(
            body,
            json!({"ok":true,"registered":"t","affected_roles":["小八","Lanlan"],"failed_roles":[]})
        );
        assert_eq!(
            r.find("Lanlan", "t").map(|t| (t.source.as_str(), t.scope)),
            Some(("b", Scope::Global))
        );
    }

    #[test]
    fn unregister_unknown_name_is_ok_not_removed() {
        let mut r = registry();
        let body = unregister(
            &mut r,
            &Faults::default(),
            UnregisterRequest {
                name: "nope".into(),
                role: None,
            },
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"ok":true,"removed":false,"name":"nope","affected_roles":[],"failed_roles":[]})
        );
    }

    fn ledger_names(r: &Registry) -> Vec<(String, Option<String>)> {
        r.ledger()
            .entries()
            .iter()
            .map(|e| (e.tool.name.clone(), e.role.clone()))
            .collect()
    }

    #[test]
    fn an_ok_unregister_forgets_the_entries_it_addresses() {
        let mut r = registry();
        let f = Faults::default();
        register(&mut r, &f, reg("t", None, "s")).unwrap();
        register(&mut r, &f, reg("u", Some("Lanlan"), "s")).unwrap();
        let unreg = |name: &str, role: Option<&str>| UnregisterRequest {
            name: name.into(),
            role: role.map(Into::into),
        };
        unregister(&mut r, &f, unreg("t", Some("小八"))).unwrap();
        assert_eq!(
            ledger_names(&r),
            [
                ("t".to_owned(), None),
                ("u".to_owned(), Some("Lanlan".to_owned()))
            ],
            "a role-addressed unregister leaves the global entry"
        );
        unregister(&mut r, &f, unreg("u", None)).unwrap();
        unregister(&mut r, &f, unreg("t", None)).unwrap();
        assert!(r.ledger().entries().is_empty());
    }
}
