//! The callback server's transport: the worker threads, their accept loops,
//! HTTP/1.1 connections, and the routing of a request to `on_call` (or to
//! a 403, 404, 405 or 413).
//!
//! Each worker thread runs a single-threaded tokio runtime and accepts from
//! the shared listener, so a connection, its calls and their handler
//! connections all stay on one thread (see the module doc of `callback`
//! for why). This is hyper's connection API with a plain function as the
//! service, not axum: one route, known at compile time, on the hot path of
//! every call. What a request gets is decided in `mod.rs`.
//!
//! Whichever worker wakes first accepts a connection, which can leave one
//! thread with most of a client's kept-alive connections (72 % of 64 in a
//! benchmark) while the other idles. So a worker holding more than one
//! connection above the least-loaded worker leaves new connections to the
//! others for a moment; the least-loaded worker always accepts, so a
//! connection never waits for long. main_server's one connection per call
//! is spread by the same rule.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::envelope::Envelope;
use super::http_handler::read_at_most;
use super::{Worker, limits};

/// After an accept error (out of descriptors, mostly), the pause before
/// the next accept, so the loop does not spin while nothing can be done.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// How long a worker with more than its share of connections leaves new
/// ones to the others before looking again.
const REBALANCE_PAUSE: Duration = Duration::from_millis(2);

/// Counts one open connection of a worker while it lives.
struct Open<'a>(&'a AtomicUsize);

impl<'a> Open<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether worker `me` holds more than one connection above the least
/// loaded worker. The least loaded one never is, so someone always accepts.
fn over_share(open: &[AtomicUsize], me: usize) -> bool {
    let mine = open[me].load(Ordering::Relaxed);
    let least = open
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    mine > least + 1
}

pub type Answer = Response<Full<Bytes>>;

/// A worker thread's life: serve connections from `listener` on `runtime`
/// until `stop`, then let its open connections finish their calls.
pub fn serve_on(
    runtime: Runtime,
    listener: std::net::TcpListener,
    worker: Worker,
    stop: CancellationToken,
) {
    runtime.block_on(async move {
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "a callback worker cannot use the listener");
                return;
            }
        };
        let connections = TaskTracker::new();
        loop {
            if over_share(&worker.shared.open_connections, worker.index) {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(REBALANCE_PAUSE) => continue,
                }
            }
            let (stream, peer) = tokio::select! {
                () = stop.cancelled() => break,
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot accept a callback connection");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                        continue;
                    }
                },
            };
            // Answers are written whole, at once: no Nagle delay.
            let _ = stream.set_nodelay(true);
            let worker = worker.clone();
            let stop = stop.clone();
            let counted = worker.clone();
            connections.spawn(async move {
                let _open = Open::new(&counted.shared.open_connections[counted.index]);
                let service = service_fn(move |req| {
                    let worker = worker.clone();
                    async move { Ok::<_, Infallible>(route(&worker, peer, req).await) }
                });
                let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                tokio::pin!(conn);
                let r = tokio::select! {
                    r = conn.as_mut() => r,
                    () = stop.cancelled() => {
                        // Finish the call in progress, then close.
                        conn.as_mut().graceful_shutdown();
                        conn.await
                    }
                };
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "a callback connection ended with an error");
                }
            });
        }
        drop(listener);
        connections.close();
        connections.wait().await;
    });
}

/// Which answer a request gets.
async fn route(worker: &Worker, peer: SocketAddr, req: Request<Incoming>) -> Answer {
    let shared = &worker.shared;
    if !limits::peer_allowed(peer) {
        shared.rejections.count_forbidden();
        tracing::warn!(%peer, "refused a callback from a non-loopback peer");
        let mut res = Response::new(Full::from("only loopback peers may call the sidecar\n"));
        *res.status_mut() = StatusCode::FORBIDDEN;
        res.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return res;
    }
    let (parts, mut body) = req.into_parts();
    let routed = call_path(parts.uri.path());
    let Some((token, tool)) = routed.filter(|_| parts.method == Method::POST) else {
        let e = Envelope::failure(
            "NO_SUCH_ROUTE",
            "the sidecar serves calls only at POST /cb/{token}/{tool}",
        );
        if routed.is_none() {
            return answer(StatusCode::NOT_FOUND, &e);
        }
        let mut res = answer(StatusCode::METHOD_NOT_ALLOWED, &e);
        res.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return res;
    };
    let limit = shared.max_body_bytes;
    // `size_hint` is the Content-Length, when there is one.
    let body = if body.size_hint().lower() > limit as u64 {
        // Not read at all: hyper closes the connection after the answer.
        Err(BodyError::TooLarge)
    } else {
        match read_at_most(&mut body, limit).await {
            Ok((b, false)) => Ok(b),
            Ok((_, true)) => Err(BodyError::TooLarge),
            Err(e) => Err(BodyError::Unreadable(e.to_string())),
        }
    };
    super::on_call(worker, token, tool, body).await
}

/// Why a call's body could not be had.
pub enum BodyError {
    TooLarge,
    Unreadable(String),
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

/// A call's answer (always HTTP 200).
pub fn reply(r: super::envelope::Reply) -> Answer {
    json(StatusCode::OK, r.into_bytes())
}

/// An envelope as the HTTP answer.
pub fn answer(status: StatusCode, e: &Envelope) -> Answer {
    json(status, e.to_vec())
}

fn json(status: StatusCode, body: Vec<u8>) -> Answer {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_worker_above_the_least_loaded_by_two_leaves_connections_to_others() {
        let open = |ns: &[usize]| ns.iter().map(|&n| AtomicUsize::new(n)).collect::<Vec<_>>();
        assert!(!over_share(&open(&[0, 0]), 0));
        assert!(!over_share(&open(&[1, 0]), 0), "one ahead is fine");
        assert!(over_share(&open(&[2, 0]), 0));
        assert!(
            !over_share(&open(&[2, 0]), 1),
            "the least loaded always accepts"
        );
        assert!(!over_share(&open(&[5]), 0), "a lone worker always accepts");
        let n = open(&[3, 3, 1]);
        assert!(over_share(&n, 0) && over_share(&n, 1) && !over_share(&n, 2));
        let guard = Open::new(&n[2]);
        assert_eq!(n[2].load(Ordering::Relaxed), 2);
        drop(guard);
        assert_eq!(n[2].load(Ordering::Relaxed), 1);
    }

    #[test]
    fn only_two_non_empty_segments_after_cb_make_a_call_path() {
        assert_eq!(call_path("/cb/abc/greet"), Some(("abc", "greet")));
        assert_eq!(call_path("/cb/abc/a.b-c_d"), Some(("abc", "a.b-c_d")));
        for bad in [
            "/cb/abc",
            "/cb/abc/",
            "/cb//greet",
            "/cb/abc/greet/x",
            "/cbx/abc/greet",
            "/",
            "",
        ] {
            assert_eq!(call_path(bad), None, "{bad}");
        }
    }
}
