//! The callback server's requests: what a request to the callback listener
//! gets (a 403, 404, 405, 408, 413, 503, or `on_call`'s answer), on the
//! connection machinery of `transport` (accept loop, bound, timeouts,
//! lingering).
//!
//! The order is what keeps a local process without the token from locking
//! main_server out: the peer and the route are checked, then the token from
//! the request line, all before any body is read; only a request with the
//! valid token claims its connection's slot (so it is never closed to make
//! room) and has its body read, within `read_timeout`, `max_body_bytes`,
//! and the memory all bodies being read or answered may hold together
//! (`body_memory`: past it, a call waits up to `read_timeout`, then gets a
//! 503 `SIDECAR_BUSY` envelope). A wrong token is answered at once, and its
//! connection lingers, first to go at the bound.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use http::header::{ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::transport::{Conn, Serve, Transport};
use super::{Shared, limits};
use crate::contract::envelope::Envelope;

/// An HTTP answer.
pub(crate) type Answer = Response<Full<Bytes>>;

impl Serve for Shared {
    type Body = Full<Bytes>;
    type BodyError = std::convert::Infallible;

    fn transport(&self) -> &Transport {
        &self.transport
    }

    async fn serve(
        self: Arc<Self>,
        conn: Arc<Conn>,
        peer: SocketAddr,
        req: Request<Incoming>,
    ) -> Answer {
        respond(&self, &conn, peer, req).await
    }
}

/// The answer to one request.
async fn respond(shared: &Shared, conn: &Conn, peer: SocketAddr, req: Request<Incoming>) -> Answer {
    let headers = req.headers();
    let has_body = headers.contains_key(TRANSFER_ENCODING)
        || headers.get(CONTENT_LENGTH).is_some_and(|v| v != "0");
    // An answer sent before the body was read closes the connection, which
    // lingers so the client can finish sending and read it.
    let unread = |mut a: Answer| {
        if has_body {
            conn.leave_body_unread();
            a.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        a
    };
    if !limits::peer_allowed(peer) {
        shared.rejections.count_forbidden();
        tracing::warn!(%peer, "refused a callback from a non-loopback peer");
        return unread(with_body(
            StatusCode::FORBIDDEN,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"only loopback peers may call the sidecar\n"),
        ));
    }
    let routed = call_path(req.uri().path());
    let Some((token, tool)) = routed.filter(|_| req.method() == Method::POST) else {
        let e = Envelope::failure(
            "NO_SUCH_ROUTE",
            "the sidecar serves calls only at POST /cb/{token}/{tool}",
        );
        let mut a = answer(
            if routed.is_none() {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::METHOD_NOT_ALLOWED
            },
            &e,
        );
        if routed.is_some() {
            a.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
        }
        return unread(a);
    };
    // The token is checked from the request line, before any body is read:
    // a client without it never holds a slot nor a byte of body memory.
    if !super::token_matches(&shared.token, token) {
        return unread(super::unknown_token(shared));
    }
    // From here the connection holds its slot until the answer.
    let _slot = conn.claim(&shared.transport);
    let tool = tool.to_owned();
    let limit = shared.max_body_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let read_timeout = shared.transport.limits().read_timeout;
    let body = if declared.is_some_and(|n| n > limit as u64) {
        // Refused before it is read (and before a 100 Continue is sent).
        Err(BodyError::TooLarge)
    } else {
        read_body(
            req.into_body(),
            limit,
            declared.unwrap_or(0) as usize,
            &shared.body_memory,
            Instant::now() + read_timeout,
        )
        .await
    };
    // The body's memory stays counted until the call is answered: the
    // call holds the body meanwhile.
    let (body, _memory) = match body {
        Ok((b, m)) => (Ok(b), Some(m)),
        Err(e) => (Err(e), None),
    };
    let a = super::on_call(shared, &tool, body).await;
    if a.status() == StatusCode::OK {
        a
    } else {
        unread(a)
    }
}

/// Why a call's body could not be had.
pub(crate) enum BodyError {
    /// Over `max_body_bytes`.
    TooLarge,
    /// Not all of it came within `read_timeout`.
    Stalled,
    /// The bodies of other calls hold all of `body_memory`, and none was
    /// freed within `read_timeout`.
    NoMemory,
    Unreadable(String),
}

/// Reads a body of at most `limit` bytes by `deadline`, its bytes counted
/// against `memory` before they are kept: `declared` (its Content-Length)
/// at once, a chunked body chunk by chunk. Past the limit it stops
/// reading: the 413 goes out at once (and the connection lingers).
async fn read_body(
    mut body: Incoming,
    limit: usize,
    declared: usize,
    memory: &Arc<Semaphore>,
    deadline: Instant,
) -> Result<(Bytes, OwnedSemaphorePermit), BodyError> {
    let reserve = |n: usize| {
        let memory = memory.clone();
        async move {
            let n = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
            match tokio::time::timeout_at(deadline, memory.acquire_many_owned(n)).await {
                Ok(Ok(p)) => Ok(p),
                // Never closed; treat it like no memory.
                Ok(Err(_)) | Err(_) => Err(BodyError::NoMemory),
            }
        }
    };
    let mut held = reserve(declared).await?;
    let read = async {
        let mut out = Vec::with_capacity(declared);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Unreadable(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                let len = out.len() + data.len();
                if len > limit {
                    return Err(BodyError::TooLarge);
                }
                if len > held.num_permits() {
                    held.merge(reserve(len - held.num_permits()).await?);
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(out))
    };
    let bytes = tokio::time::timeout_at(deadline, read)
        .await
        .unwrap_or(Err(BodyError::Stalled))?;
    Ok((bytes, held))
}

/// `/cb/{token}/{tool}` → (token, tool); both non-empty, nothing more.
fn call_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/cb/")?;
    let (token, tool) = rest.split_once('/')?;
    if token.is_empty() || tool.is_empty() || tool.contains('/') {
        return None;
    }
    Some((token, tool))
}

/// An envelope as the HTTP answer.
pub(crate) fn answer(status: StatusCode, e: &Envelope) -> Answer {
    with_body(status, "application/json", Bytes::from(e.to_vec()))
}

fn with_body(status: StatusCode, content_type: &'static str, body: Bytes) -> Answer {
    let mut a = Response::new(Full::new(body));
    *a.status_mut() = status;
    a.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_two_non_empty_segments_after_cb_make_a_call_path() {
        assert_eq!(call_path("/cb/t/x"), Some(("t", "x")));
        for bad in ["/cb/t/", "/cb//x", "/cb/t", "/cb/t/x/y", "/x/t/y", "/cb"] {
            assert_eq!(call_path(bad), None, "{bad}");
        }
    }
}
