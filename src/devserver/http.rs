//! The stand-in's HTTP surface: builds the axum router (`/__dev/*` control
//! routes, everything else through the main_server emulation in
//! `api_routes.rs`) and the small response helpers both share.
//!
//! It owns no state and no listener: `server.rs` binds and serves.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::gates::{is_loopback_peer, is_trusted_host};
use super::state::Shared;

/// Largest request body read, far above any real registration.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// What every handler of one listener generation sees.
#[derive(Clone)]
pub struct AppState {
    pub shared: Arc<Shared>,
    /// Cancelled when this listener stops, so held (delayed) answers end
    /// at once instead of keeping the port's connections alive.
    pub stop: CancellationToken,
}

/// The whole router of one listener generation.
pub fn router(state: AppState) -> Router {
    super::control::routes()
        .layer(middleware::from_fn(dev_gate))
        .fallback(super::api_routes::entry)
        .with_state(state)
}

/// `/__dev/*` gets the same two gates as the API, so the control surface
/// is never reachable from another host either.
async fn dev_gate(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if !is_trusted_host(host) {
        return untrusted_host();
    }
    if !is_loopback_peer(peer.ip()) {
        return forbidden();
    }
    next.run(req).await
}

/// A JSON answer with `status`.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    json_bytes(status, body.to_string().into())
}

/// Already-serialised JSON with `status`.
pub fn json_bytes(status: StatusCode, bytes: Bytes) -> Response {
    let mut res = Response::new(Body::from(bytes));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// `400 untrusted_host`, exactly as main_server words it.
pub fn untrusted_host() -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({"ok": false, "error_code": "untrusted_host", "error": "Invalid Host header"}),
    )
}

/// `403` for a caller that is not on loopback.
pub fn forbidden() -> Response {
    json_response(
        StatusCode::FORBIDDEN,
        &json!({"detail": "Forbidden: main_server only serves loopback callers"}),
    )
}

/// `{"detail": ...}` with `status`, FastAPI's HTTPException shape.
pub fn detail(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, &json!({ "detail": message.into() }))
}

/// A `/__dev/` request that cannot be carried out: answered 400 with the
/// reason as `detail`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DevBadRequest(pub String);

/// Turns a `/__dev/` result into a response.
pub fn dev_result(result: Result<Value, DevBadRequest>) -> Response {
    match result {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => detail(StatusCode::BAD_REQUEST, e.0),
    }
}

/// Parses a `/__dev/` JSON body, answering 400 with the reason when it does
/// not fit.
pub fn parse_dev_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, DevBadRequest> {
    let bytes = if bytes.is_empty() { &b"{}"[..] } else { bytes };
    serde_json::from_slice(bytes)
        .map_err(|e| DevBadRequest(format!("invalid /__dev/ request body: {e}")))
}

impl IntoResponse for super::invoke::InvokeError {
    fn into_response(self) -> Response {
        detail(StatusCode::NOT_FOUND, self.to_string())
    }
}
