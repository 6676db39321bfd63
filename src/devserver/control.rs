//! The `/__dev/` control routes, which the real main_server does not have:
//! restart, fault switches, roles (added, removed, all removed, rebuilt),
//! the request log, the full registry, the ledger and calling a tool as the
//! model would. Each mirrors a `DevServerHandle`
//! method, for plugin authors driving the stand-in over HTTP.
//!
//! Handlers only translate JSON to calls on `Shared`; no behaviour of the
//! emulated main_server lives here.

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::http::{AppState, DevBadRequest, dev_result, json_response, parse_dev_body};
use super::invoke::{InvokeRequest, invoke};
use super::state::Shared;

/// The `/__dev/` routes (gated by `http::dev_gate`).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/__dev/restart", post(restart))
        .route("/__dev/storage-blocked", post(storage_blocked))
        .route("/__dev/fail-next", post(fail_next))
        .route("/__dev/delay", post(delay))
        .route("/__dev/role-sync", post(role_sync))
        .route("/__dev/roles/add", post(add_role))
        .route("/__dev/roles/remove", post(remove_role))
        .route("/__dev/roles/remove-all", post(remove_all))
        .route("/__dev/roles/rebuild", post(rebuild_role))
        .route("/__dev/ledger", get(ledger))
        .route("/__dev/requests", get(requests).delete(clear_requests))
        .route("/__dev/registry", get(registry))
        .route("/__dev/faults", get(faults))
        .route("/__dev/invoke", post(invoke_tool))
}

#[derive(Deserialize)]
struct Blocked {
    blocked: bool,
}

#[derive(Deserialize)]
struct FailNext {
    count: u32,
    #[serde(default = "default_fail_status")]
    status: u16,
}

fn default_fail_status() -> u16 {
    500
}

#[derive(Deserialize)]
struct Delay {
    ms: u64,
}

#[derive(Deserialize)]
struct RoleSync {
    role: String,
    fail: bool,
}

#[derive(Deserialize)]
struct RoleName {
    role: String,
}

async fn restart(State(app): State<AppState>) -> Response {
    app.shared.restart();
    json_response(StatusCode::OK, &json!({"ok": true}))
}

async fn storage_blocked(State(app): State<AppState>, body: Bytes) -> Response {
    dev_result(parse_dev_body::<Blocked>(&body).map(|b| {
        app.shared.with_faults(|f| f.storage_blocked = b.blocked);
        json!({"ok": true, "storage_blocked": b.blocked})
    }))
}

async fn fail_next(State(app): State<AppState>, body: Bytes) -> Response {
    dev_result(parse_dev_body::<FailNext>(&body).and_then(|b| {
        let status = StatusCode::from_u16(b.status)
            .map_err(|_| DevBadRequest(format!("invalid status {}", b.status)))?;
        app.shared
            .with_faults(|f| f.fail_next = (b.count > 0).then_some((b.count, status)));
        Ok(json!({"ok": true, "count": b.count, "status": b.status}))
    }))
}

async fn delay(State(app): State<AppState>, body: Bytes) -> Response {
    dev_result(parse_dev_body::<Delay>(&body).map(|b| {
        app.shared
            .with_faults(|f| f.delay = Duration::from_millis(b.ms));
        json!({"ok": true, "ms": b.ms})
    }))
}

async fn role_sync(State(app): State<AppState>, body: Bytes) -> Response {
    dev_result(parse_dev_body::<RoleSync>(&body).map(|b| {
        set_role_sync(&app.shared, &b.role, b.fail);
        json!({"ok": true, "role": b.role, "fail": b.fail})
    }))
}

/// Shared with the handle: makes `role`'s sync fail or succeed again.
pub(crate) fn set_role_sync(shared: &Shared, role: &str, fail: bool) {
    shared.with_faults(|f| {
        if fail {
            f.failing_roles.insert(role.to_owned());
        } else {
            f.failing_roles.remove(role);
        }
    });
}

async fn add_role(State(app): State<AppState>, body: Bytes) -> Response {
    dev_result(parse_dev_body::<RoleName>(&body).and_then(|b| {
        if b.role.is_empty() {
            return Err(DevBadRequest("role must not be empty".into()));
        }
        let shared = &app.shared;
        let (added, roles) = shared.with_world(|w| {
            (
                w.registry.add_role(&b.role, &shared.builtins),
                w.registry.role_names(),
            )
        });
        Ok(json!({"ok": true, "added": added, "roles": roles}))
    }))
}

async fn remove_role(State(app): State<AppState>, body: Bytes) -> Response {
    dev_result(parse_dev_body::<RoleName>(&body).map(|b| {
        let (removed, roles) = app
            .shared
            .with_world(|w| (w.registry.remove_role(&b.role), w.registry.role_names()));
        json!({"ok": true, "removed": removed, "roles": roles})
    }))
}

async fn remove_all(State(app): State<AppState>) -> Response {
    let removed = remove_all_roles(&app.shared);
    json_response(
        StatusCode::OK,
        &json!({"ok": true, "removed": removed, "roles": []}),
    )
}

/// Shared with the handle: removes every role, returning their names.
pub(crate) fn remove_all_roles(shared: &Shared) -> Vec<String> {
    shared.with_world(|w| {
        let roles = w.registry.role_names();
        for role in &roles {
            w.registry.remove_role(role);
        }
        roles
    })
}

async fn rebuild_role(State(app): State<AppState>, body: Bytes) -> Response {
    dev_result(parse_dev_body::<RoleName>(&body).map(|b| {
        let shared = &app.shared;
        let rebuilt = shared.with_world(|w| w.registry.rebuild_role(&b.role, &shared.builtins));
        json!({"ok": true, "rebuilt": rebuilt, "role": b.role})
    }))
}

async fn ledger(State(app): State<AppState>) -> Response {
    let entries = app
        .shared
        .read_world(|w| json!(w.registry.ledger().entries()));
    json_response(StatusCode::OK, &json!({ "ledger": entries }))
}

async fn requests(State(app): State<AppState>) -> Response {
    let records = app.shared.read_log(|log| log.records());
    json_response(StatusCode::OK, &json!({ "requests": records }))
}

async fn clear_requests(State(app): State<AppState>) -> Response {
    app.shared.with_log(|log| log.clear());
    json_response(StatusCode::OK, &json!({"ok": true}))
}

/// `{"tools_by_role": {role: [every field of every tool]}, "roles": [..]}`.
async fn registry(State(app): State<AppState>) -> Response {
    let body = app.shared.read_world(|w| {
        let mut by_role = serde_json::Map::new();
        for rt in w.registry.roles() {
            by_role.insert(rt.role.clone(), json!(rt.tools));
        }
        json!({"roles": w.registry.role_names(), "tools_by_role": by_role})
    });
    json_response(StatusCode::OK, &body)
}

async fn faults(State(app): State<AppState>) -> Response {
    let f = app.shared.with_faults(|f| f.clone());
    json_response(
        StatusCode::OK,
        &json!({
            "storage_blocked": f.storage_blocked,
            "fail_next": f.fail_next.map(|(count, status)| json!({"count": count, "status": status.as_u16()})),
            "delay_ms": u64::try_from(f.delay.as_millis()).unwrap_or(u64::MAX),
            "failing_roles": f.failing_roles,
        }),
    )
}

async fn invoke_tool(State(app): State<AppState>, body: Bytes) -> Response {
    let req = match parse_dev_body::<InvokeRequest>(&body) {
        Ok(r) => r,
        Err(e) => return dev_result(Err(e)),
    };
    match invoke(&app.shared, req).await {
        Ok(answer) => json_response(StatusCode::OK, &json!(answer)),
        Err(e) => e.into_response(),
    }
}
