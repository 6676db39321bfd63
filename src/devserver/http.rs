//! What the stand-in's routes share: the state each handler sees, the
//! access gates (Host, then local access), the body limit and the small
//! response helpers.
//!
//! It owns no state and no listener, and knows no route: `router.rs`
//! assembles the routes, `server.rs` binds and serves.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::gates::{Access, AccessHeaders, is_trusted_host, local_access};
use super::state::Shared;

/// Largest request body main_server takes: one byte more gets 413 before
/// any route runs.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// What every handler of one listener generation sees.
#[derive(Clone)]
pub(crate) struct AppState {
    pub shared: Arc<Shared>,
    /// Cancelled when this listener stops, so held (delayed) answers end
    /// at once instead of keeping the port's connections alive.
    pub stop: CancellationToken,
}

/// The gates main_server runs before anything else, in its order: the
/// `Host` header (400), then local access (401 or 403). `None` when the
/// caller is served.
pub(crate) fn access_gates(peer: SocketAddr, headers: &axum::http::HeaderMap) -> Option<Response> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|h: &HeaderValue| h.to_str().ok())
    };
    let host = text(header::HOST);
    if !is_trusted_host(host) {
        return Some(untrusted_host());
    }
    let access = local_access(
        peer.ip(),
        AccessHeaders {
            host,
            authorization: text(header::AUTHORIZATION),
            cookie: text(header::COOKIE),
            origin: text(header::ORIGIN),
        },
    );
    match access {
        Access::Local | Access::Authorized => None,
        Access::AuthorizationRequired => Some(detail(
            StatusCode::UNAUTHORIZED,
            "instance_authorization_required",
        )),
        Access::OriginNotAllowed => Some(detail(StatusCode::FORBIDDEN, "origin_not_allowed")),
        Access::NotLoopbackPeer => Some(forbidden()),
    }
}

/// A JSON answer with `status`.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    json_bytes(status, body.to_string().into())
}

/// Already-serialised JSON with `status`.
pub(crate) fn json_bytes(status: StatusCode, bytes: Bytes) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// `400 untrusted_host`, exactly as main_server words it.
pub(crate) fn untrusted_host() -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({"ok": false, "error_code": "untrusted_host", "error": "Invalid Host header"}),
    )
}

/// `403` for a caller that is not on loopback.
pub(crate) fn forbidden() -> Response {
    json_response(
        StatusCode::FORBIDDEN,
        &json!({"detail": "Forbidden: main_server only serves loopback callers"}),
    )
}

/// main_server's 413 for a declared body over [`MAX_BODY_BYTES`]
/// (CONTRACT.md, "Where it lives"; its `error` is in Chinese upstream).
pub(crate) fn payload_too_large() -> Response {
    json_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        &json!({
            "ok": false,
            "error_code": "payload_too_large",
            "max_bytes": MAX_BODY_BYTES,
            "error": "请求体超过全局体积上限。",
        }),
    )
}

/// FastAPI's 400 for a body it could not read: a chunked one that grew
/// past [`MAX_BODY_BYTES`].
pub(crate) fn body_parse_error() -> Response {
    detail(
        StatusCode::BAD_REQUEST,
        "There was an error parsing the body",
    )
}

/// `{"detail": ...}` with `status`, FastAPI's HTTPException shape.
pub(crate) fn detail(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, &json!({ "detail": message.into() }))
}

/// A `/__dev/` request that cannot be carried out: answered 400 with the
/// reason as `detail`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct DevBadRequest(pub String);

/// Turns a `/__dev/` result into a response.
pub(crate) fn dev_result(result: Result<Value, DevBadRequest>) -> Response {
    match result {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => detail(StatusCode::BAD_REQUEST, e.0),
    }
}

/// Parses a `/__dev/` JSON body, answering 400 with the reason when it does
/// not fit.
pub(crate) fn parse_dev_body<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, DevBadRequest> {
    let bytes = if bytes.is_empty() { &b"{}"[..] } else { bytes };
    serde_json::from_slice(bytes)
        .map_err(|e| DevBadRequest(format!("invalid /__dev/ request body: {e}")))
}

impl IntoResponse for super::invoke::InvokeError {
    fn into_response(self) -> Response {
        detail(StatusCode::NOT_FOUND, self.to_string())
    }
}
