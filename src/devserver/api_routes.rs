//! The main_server emulation at HTTP level: every request outside `/__dev/`
//! goes through here, in upstream's order: request log, Host gate (400),
//! local access (401 `instance_authorization_required`, 403), body size
//! (413 `payload_too_large`, before any route), storage-blocked 409,
//! injected failures, routing (404, 405, 307 on a trailing slash), body
//! validation (422), role lookup (404), the operation, then any injected
//! delay.
//!
//! The decisions themselves live in the pure modules (`gates`, `body`,
//! `requests`, `tool_api`); this file only sequences them.

use std::net::SocketAddr;

use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::body::decode_object;
use super::http::{
    AppState, MAX_BODY_BYTES, access_gates, body_parse_error, detail, json_bytes, json_response,
    payload_too_large,
};
use super::pydantic::ValidationErrors;
use super::registry::UnknownRole;
use super::requests::{ClearRequest, RegisterRequest, UnregisterRequest, fold_role};
use super::tool_api;

/// The routes main_server has, with the method each accepts.
const ROUTES: [(&str, &str); 4] = [
    ("/api/tools/register", "POST"),
    ("/api/tools/unregister", "POST"),
    ("/api/tools/clear", "POST"),
    ("/api/tools", "GET"),
];

/// What the storage-blocked 409 gives as `blocking_reason`.
pub(crate) const STORAGE_BLOCKING_REASON: &str = "storage_initializing";

/// A request body main_server refuses before any route runs.
enum Refused {
    /// A declared `Content-Length` over the limit: 413, unread.
    TooLarge,
    /// A streamed (chunked) body that grew past the limit, or broke off:
    /// Starlette's body parsing fails, and FastAPI answers 400.
    Unparsable,
}

/// The fallback handler: everything that is not `/__dev/`. Every request
/// is logged, a refused one too (its body as `null` when too large).
pub(crate) async fn entry(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let read = read_body(&parts, body).await;
    let seq = app.shared.with_log(|log| {
        log.push(
            parts.method.as_str(),
            parts.uri.path(),
            parts.uri.query(),
            read.as_deref().unwrap_or_default(),
        )
    });
    let response = if let Some(refused) = access_gates(peer, &parts.headers) {
        refused
    } else {
        match &read {
            Ok(bytes) => answer(&app, &parts, bytes).await,
            Err(Refused::TooLarge) => payload_too_large(),
            Err(Refused::Unparsable) => body_parse_error(),
        }
    };
    let status = response.status().as_u16();
    app.shared.with_log(|log| log.set_status(seq, status));
    response
}

/// Reads the body up to [`MAX_BODY_BYTES`]: a declared `Content-Length`
/// over it is refused unread (413), a streamed (chunked) body as soon as it
/// goes over (400, as main_server's body parsing fails). A body that
/// breaks off is refused the same way: its client is no longer there to
/// read the answer.
async fn read_body(parts: &Parts, body: Body) -> Result<axum::body::Bytes, Refused> {
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|h| h.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(Refused::TooLarge);
    }
    to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| Refused::Unparsable)
}

/// Everything after the gates and the body size, for a served caller.
async fn answer(app: &AppState, parts: &Parts, bytes: &[u8]) -> Response {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let path = parts.uri.path();
    let is_api = path == "/api" || path.starts_with("/api/");
    if !is_api {
        return detail(StatusCode::NOT_FOUND, "Not Found");
    }
    let (blocked, injected, delay) = app.shared.with_faults(|f| {
        let blocked = f.storage_blocked;
        // A blocked request does not consume an injected failure.
        let injected = if blocked { None } else { f.take_failure() };
        (blocked, injected, f.delay)
    });
    let response = if blocked {
        json_response(
            StatusCode::CONFLICT,
            &json!({
                "ok": false,
                "error_code": "storage_startup_blocked",
                "blocking_reason": STORAGE_BLOCKING_REASON,
                "limited_mode": true,
                "error": "main_server storage is still starting; retry shortly",
            }),
        )
    } else if let Some(status) = injected {
        detail(status, "injected failure (dev-server fail-next)")
    } else {
        route(app, parts, host.unwrap_or_default(), bytes)
    };
    if !delay.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = app.stop.cancelled() => {}
        }
    }
    response
}

fn route(app: &AppState, parts: &Parts, host: &str, bytes: &[u8]) -> Response {
    let path = parts.uri.path();
    let Some(&(route, allowed)) = ROUTES.iter().find(|(p, _)| *p == path) else {
        return not_found_or_redirect(parts, host);
    };
    let method_ok =
        parts.method.as_str() == allowed || (allowed == "GET" && parts.method == Method::HEAD);
    if !method_ok {
        let mut res = detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        let allow = if allowed == "GET" {
            "GET, HEAD"
        } else {
            allowed
        };
        res.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        return res;
    }
    if route == "/api/tools" {
        return list_tools(app, parts);
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok());
    let result = decode_object(content_type, bytes).and_then(|obj| operate(app, route, &obj));
    match result {
        Ok(Ok(body)) => json_response(StatusCode::OK, &body),
        Ok(Err(UnknownRole(role))) => {
            detail(StatusCode::NOT_FOUND, format!("unknown role: {role}"))
        }
        Err(errors) => json_response(StatusCode::UNPROCESSABLE_ENTITY, &errors.to_body()),
    }
}

/// Validates the body for `route`, then runs the operation under the lock.
fn operate(
    app: &AppState,
    route: &str,
    obj: &Map<String, Value>,
) -> Result<Result<Value, UnknownRole>, ValidationErrors> {
    let faults = app.shared.with_faults(|f| f.clone());
    Ok(match route {
        "/api/tools/register" => {
            let req = RegisterRequest::from_object(obj)?;
            app.shared
                .with_world(|w| tool_api::register(&mut w.registry, &faults, req))
        }
        "/api/tools/unregister" => {
            let req = UnregisterRequest::from_object(obj)?;
            app.shared
                .with_world(|w| tool_api::unregister(&mut w.registry, &faults, req))
        }
        _ => {
            let req = ClearRequest::from_object(obj)?;
            app.shared
                .with_world(|w| tool_api::clear(&mut w.registry, &faults, req))
        }
    })
}

/// `GET /api/tools[?role=R]`, serialised straight from the registry.
fn list_tools(app: &AppState, parts: &Parts) -> Response {
    // Starlette keeps the last value of a repeated query parameter.
    let role = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
        .ok()
        .and_then(|Query(pairs)| {
            pairs
                .into_iter()
                .rev()
                .find(|(k, _)| k == "role")
                .map(|(_, v)| v)
        });
    let role = fold_role(role);
    match app.shared.listing(role.as_deref()) {
        Ok(body) => json_bytes(StatusCode::OK, body),
        Err(UnknownRole(r)) => detail(StatusCode::NOT_FOUND, format!("unknown role: {r}")),
    }
}

/// Starlette's `redirect_slashes`: a path that only differs from a route by
/// trailing slashes answers 307 to the route, query kept; anything else 404.
fn not_found_or_redirect(parts: &Parts, host: &str) -> Response {
    let path = parts.uri.path();
    let trimmed = path.trim_end_matches('/');
    if trimmed.len() == path.len() || !ROUTES.iter().any(|(p, _)| *p == trimmed) {
        return detail(StatusCode::NOT_FOUND, "Not Found");
    }
    let location = match parts.uri.query() {
        Some(q) => format!("http://{host}{trimmed}?{q}"),
        None => format!("http://{host}{trimmed}"),
    };
    let mut res = Response::new(Body::empty());
    *res.status_mut() = StatusCode::TEMPORARY_REDIRECT;
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}
