//! The callback server's transport: the worker threads, their accept loops,
//! HTTP/1.1 connections, and the routing of a request to `on_call` (or to
//! a 400, 403, 404, 405, 413 or 431).
//!
//! Each worker thread runs a single-threaded tokio runtime and accepts from
//! the shared listener, so a connection, its calls and their handler
//! connections all stay on one thread (see the module doc of `callback`
//! for why). The HTTP/1.1 is our own (framing in `h1`), not hyper's or
//! axum's: one route, known at compile time, on the hot path of every call,
//! where a general server's machinery cost more than the call's own work
//! (BENCHMARKS.md, benchmark 1). What a request gets is decided in `mod.rs`.
//!
//! A connection serves its requests in order (pipelined ones too) and is
//! kept alive unless the client or a framing problem says otherwise. While
//! a call runs, the connection is watched: a caller that hangs up drops the
//! call (see `on_call`). When the server stops accepting, an idle connection
//! (or one whose next request has not fully arrived) closes at once, and
//! one in the middle of a call closes after its answer. A connection closed
//! with a body left unread (413, 404 ...) lingers: see `linger`.
//!
//! Whichever worker wakes first accepts a connection, which can leave one
//! thread with most of a client's kept-alive connections (72 % of 64 in a
//! benchmark) while the other idles. So a worker holding more than one
//! connection above the least-loaded worker leaves new connections to the
//! others for a moment; the least-loaded worker always accepts, so a
//! connection never waits for long. main_server's one connection per call
//! is spread by the same rule.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::envelope::Envelope;
use super::h1::{self, Framing, HeadError};
use super::{Worker, limits};

/// After an accept error (out of descriptors, mostly), the pause before
/// the next accept, so the loop does not spin while nothing can be done.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// How long a worker with more than its share of connections leaves new
/// ones to the others before looking again.
const REBALANCE_PAUSE: Duration = Duration::from_millis(2);

/// Counts one open connection of a worker while it lives. It is made at
/// the accept, not when the connection's task first runs: a worker accepts
/// a whole backlog before its tasks run, and a count that lagged behind
/// let one worker take all of a client's 64 connections (`over_share`
/// never saw them).
struct Open(Worker);

impl Open {
    fn new(worker: &Worker) -> Self {
        worker.shared.open_connections[worker.index].fetch_add(1, Ordering::Relaxed);
        Self(worker.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let Worker { shared, index, .. } = &self.0;
        shared.open_connections[*index].fetch_sub(1, Ordering::Relaxed);
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

/// An HTTP answer: a status, and a body of `content_type`.
#[derive(Debug)]
pub struct Answer {
    status: StatusCode,
    content_type: &'static str,
    /// `Allow: POST`, for a 405.
    allow_post: bool,
    body: Vec<u8>,
}

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
            let open = Open::new(&worker);
            let stop = stop.clone();
            connections.spawn(async move {
                if let Err(e) = serve_connection(&open.0, stream, peer, &stop).await {
                    tracing::debug!(%peer, error = %e, "a callback connection ended with an error");
                }
            });
        }
        drop(listener);
        connections.close();
        connections.wait().await;
    });
}

/// Serves one connection's requests until it closes, fails, or the server
/// stops.
async fn serve_connection(
    worker: &Worker,
    mut io: TcpStream,
    peer: SocketAddr,
    stop: &CancellationToken,
) -> io::Result<()> {
    let mut buf = BytesMut::with_capacity(h1::READ_CHUNK);
    let mut out: Vec<u8> = Vec::new();
    // Made once: a fresh wait per request would register with the token
    // on every call.
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    loop {
        let head = loop {
            match h1::parse_request(&buf) {
                Ok(Some(head)) => break Ok(head),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            let n = tokio::select! {
                biased;
                r = h1::fill(&mut io, &mut buf) => r?,
                // Nothing (or part of a head) has come: close.
                () = &mut stopped => return Ok(()),
            };
            if n == 0 {
                return Ok(()); // the client is done
            }
        };
        let (answer, after) = match head {
            Ok(head) => {
                let bytes = buf.split_to(head.len).freeze();
                match respond(worker, &mut io, &mut buf, peer, &bytes, &head).await? {
                    (a, After::Next) if stop.is_cancelled() => (a, After::Close),
                    r => r,
                }
            }
            // What follows an unreadable head cannot be framed: drained.
            Err(e) => {
                let status = match e {
                    HeadError::TooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    HeadError::Malformed(_) => StatusCode::BAD_REQUEST,
                };
                (text(status, format!("{e}\n")), After::Drain)
            }
        };
        write_answer(&mut io, &mut out, &answer, after != After::Next).await?;
        match after {
            After::Next => {}
            After::Close => return Ok(()),
            After::Drain => {
                tokio::select! {
                    () = linger(&mut io) => {}
                    () = &mut stopped => {}
                }
                return Ok(());
            }
        }
    }
}

/// What becomes of a connection after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// It carries the next request.
    Next,
    /// It closes (the client asked, or the framing leaves no choice).
    Close,
    /// It closes, and the client may still be sending what was not read
    /// (a body refused or never read): see `linger`.
    Drain,
}

/// The answer to one request, and what becomes of the connection after it.
/// `Err` when the caller has gone.
async fn respond(
    worker: &Worker,
    io: &mut TcpStream,
    buf: &mut BytesMut,
    peer: SocketAddr,
    bytes: &Bytes,
    head: &h1::RequestHead,
) -> io::Result<(Answer, After)> {
    let shared = &worker.shared;
    let meta = head.meta;
    // Whether the request's body (not read for these answers) is absent.
    let bodiless = matches!(meta.framing, Framing::Empty | Framing::Length(0));
    // What becomes of the connection when the request was read whole.
    let read_whole = if meta.close {
        After::Close
    } else {
        After::Next
    };
    if !limits::peer_allowed(peer) {
        shared.rejections.count_forbidden();
        tracing::warn!(%peer, "refused a callback from a non-loopback peer");
        let a = text(
            StatusCode::FORBIDDEN,
            "only loopback peers may call the sidecar\n".into(),
        );
        return Ok((a, if bodiless { After::Close } else { After::Drain }));
    }
    let path = std::str::from_utf8(&bytes[head.path.clone()]).unwrap_or("");
    // The path proper: without a query.
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let routed = call_path(path);
    let Some((token, tool)) = routed.filter(|_| head.post) else {
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
        a.allow_post = routed.is_some();
        return Ok((a, if bodiless { read_whole } else { After::Drain }));
    };
    let limit = shared.max_body_bytes;
    let mut after = read_whole;
    let body = if matches!(meta.framing, Framing::Length(n) if n > limit as u64) {
        // Not read at all: the connection closes after the answer.
        after = After::Drain;
        Err(BodyError::TooLarge)
    } else {
        if meta.expect_continue && !bodiless {
            io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        match h1::read_body(io, buf, meta.framing, limit).await {
            Ok((b, false)) => Ok(b),
            Ok((_, true)) => {
                after = After::Drain;
                Err(BodyError::TooLarge)
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                after = After::Drain;
                Err(BodyError::Unreadable(e.to_string()))
            }
            Err(e) => return Err(e), // the caller has gone
        }
    };
    let a = tokio::select! {
        biased;
        a = super::on_call(worker, token, tool, body) => a,
        e = hung_up(io, buf) => return Err(e),
    };
    Ok((a, after))
}

/// How long, and how much, a closing connection reads and drops of what
/// its client still sends (see `linger`).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 4 * 1024 * 1024;

/// Closes a connection whose client may still be sending what the server
/// did not read (as nginx's lingering close does): the answer goes out with
/// a FIN, then what arrives is read and dropped for a while. Closed at once,
/// the kernel would answer the client's next bytes with a reset, which can
/// destroy the answer before the client has read it.
async fn linger(io: &mut TcpStream) {
    use tokio::io::AsyncReadExt;
    if io.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    let mut scratch = vec![0u8; 16 * 1024];
    let mut total = 0;
    while total < LINGER_BYTES {
        match tokio::time::timeout_at(deadline, io.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => total += n,
            _ => return,
        }
    }
}

/// Ends when the caller hangs up (or its connection fails) while its call
/// runs. Bytes that arrive meanwhile (the next request, pipelined) are
/// kept in `buf`, up to a head's worth.
async fn hung_up(io: &TcpStream, buf: &mut BytesMut) -> io::Error {
    loop {
        if let Err(e) = io.readable().await {
            return e;
        }
        if buf.len() > h1::MAX_HEAD_BYTES {
            // Enough to go on with; look again after the answer.
            return std::future::pending().await;
        }
        buf.reserve(h1::READ_CHUNK);
        match io.try_read_buf(buf) {
            Ok(0) => {
                return io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the caller hung up before its answer",
                );
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return e,
        }
    }
}

/// Writes `a`, head and body in one write.
async fn write_answer(
    io: &mut TcpStream,
    out: &mut Vec<u8>,
    a: &Answer,
    close: bool,
) -> io::Result<()> {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(a.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(a.status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: ");
    out.extend_from_slice(a.content_type.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    h1::push_decimal(out, a.body.len());
    if a.allow_post {
        out.extend_from_slice(b"\r\nallow: POST");
    }
    if close {
        out.extend_from_slice(b"\r\nconnection: close");
    }
    out.extend_from_slice(b"\r\ndate: ");
    push_date(out);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&a.body);
    let r = io.write_all(out).await;
    // A buffer grown by a large answer is not kept with the connection.
    if out.capacity() > 64 * 1024 {
        *out = Vec::new();
    }
    r
}

thread_local! {
    /// The `Date` value of the current second, made once per second.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

fn push_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *at = secs;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
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
    Answer {
        status,
        content_type: "application/json",
        allow_post: false,
        body,
    }
}

fn text(status: StatusCode, body: String) -> Answer {
    Answer {
        status,
        content_type: "text/plain; charset=utf-8",
        allow_post: false,
        body: body.into_bytes(),
    }
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
