//! The Streamable HTTP side of [`Fault::PingFlood`] and
//! [`Fault::PingFloodStream`]: a layer in front of rmcp's service that
//! stalls every POST carrying one of the client's replies, as a server that
//! sends its own requests and never takes their answers does (issue 49, B).
//! Every other request goes on to rmcp unchanged.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use tokio_util::sync::CancellationToken;

use super::Fault;

/// The largest POST body read here; the client's messages are far smaller.
const MAX_BODY: usize = 4 << 20;

/// Stalls a POST that carries a reply: with [`Fault::PingFloodStream`] it
/// is answered by an event stream that sends nothing until `shutdown`,
/// otherwise it is never answered until `shutdown`.
pub(super) async fn stall_replies(
    fault: Fault,
    shutdown: CancellationToken,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "the body is too large").into_response();
    };
    if !is_reply(&bytes) {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    }
    if fault == Fault::PingFloodStream {
        // The headers and one comment go out at once; then nothing, until
        // the server shuts down.
        let first =
            futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from_static(b": stalled\n\n"))]);
        let end = futures_util::stream::once(async move {
            shutdown.cancelled_owned().await;
            Ok(Bytes::new())
        });
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(futures_util::StreamExt::chain(first, end)),
        )
            .into_response();
    }
    shutdown.cancelled().await;
    (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response()
}

/// Whether `body` is one JSON-RPC reply (a result or an error).
fn is_reply(body: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<ClientJsonRpcMessage>(body),
        Ok(JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_))
    )
}
