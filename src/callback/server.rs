//! The callback server's transport: the accept loop, the bound on open
//! connections, each connection served by hyper's HTTP/1.1 under our
//! timeouts, and the routing of a request to `on_call` (or to a 403, 404,
//! 405, 408 or 413).
//!
//! Timeouts, per connection (hyper's own header timeout is off: it also
//! runs while a kept-alive connection waits for its next request, so it
//! cannot tell a stalled head from an idle connection):
//! - a request head must arrive within `read_timeout` of its first byte,
//!   and a body within `read_timeout` of its head: a client that sends
//!   part of a request and stops does not hold a connection for ever;
//! - a connection with no request for `idle_timeout` is closed, as nginx
//!   closes kept-alive connections (main_server's client drops its own
//!   idle connections after 5 s, so it never meets this one);
//! - a call itself runs under the tool's deadline (`call`), not these.
//!
//! At most `max_connections` connections are held. When one more arrives,
//! the connection that has waited longest without a call running is
//! closed to make room, so idle connections of another local process can
//! never lock main_server out; only when every connection is running a
//! call does the next one wait in the listen queue. Either way a warning
//! is logged (at most once a minute).
//!
//! A connection closed with a body left unread (413, 403, 404...) lingers:
//! see `Watched::drop`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http::header::{ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::envelope::Envelope;
use super::{Shared, limits};

/// After an accept error (out of descriptors, mostly), the pause before
/// the next accept, so the loop does not spin while nothing can be done.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// The least time between two warnings that the connection bound was hit.
const BOUND_WARNING_EVERY: Duration = Duration::from_secs(60);
/// How long, and how much, a closing connection reads and drops of what
/// its client still sends (see `Watched::drop`).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 4 * 1024 * 1024;

/// The transport's limits (from `[callback]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ConnectionLimits {
    /// For a request head from its first byte, and for a body from its head.
    pub read_timeout: Duration,
    /// For a connection without a request.
    pub idle_timeout: Duration,
    /// Connections held at once.
    pub max_connections: usize,
}

/// An HTTP answer.
pub(crate) type Answer = Response<Full<Bytes>>;

/// One open connection, as its own watch and the accept loop see it.
#[derive(Debug)]
struct Conn {
    /// A request is being answered (HTTP/1.1 answers one at a time).
    busy: AtomicBool,
    /// Bytes of a next request have arrived since the last answer.
    head_started: AtomicBool,
    /// When the connection last became idle, or its next head began, in
    /// milliseconds since `Connections::epoch`.
    since_ms: AtomicU64,
    /// A body was left unread: linger when closing.
    linger: AtomicBool,
    /// Woken when a request head begins, the one change that can bring the
    /// connection's deadline forward; any other change is seen when the
    /// watch next wakes (see `deadline`).
    head_began: Notify,
    /// Cancelled to close the connection at once (to make room).
    evict: CancellationToken,
}

impl Conn {
    fn set_since(&self, epoch: Instant) {
        let ms = epoch.elapsed().as_millis() as u64;
        self.since_ms.store(ms, Ordering::Relaxed);
    }

    /// When this connection's watch should look at it next: its deadline,
    /// or, while it answers a request, one idle timeout from now.
    fn deadline(&self, epoch: Instant, limits: &ConnectionLimits) -> Instant {
        if self.busy.load(Ordering::Relaxed) {
            return Instant::now() + limits.idle_timeout;
        }
        let since = epoch + Duration::from_millis(self.since_ms.load(Ordering::Relaxed));
        if self.head_started.load(Ordering::Relaxed) {
            since + limits.read_timeout
        } else {
            since + limits.idle_timeout
        }
    }

    /// Whether its deadline has passed (never while it answers a request).
    fn expired(&self, epoch: Instant, limits: &ConnectionLimits) -> bool {
        !self.busy.load(Ordering::Relaxed) && self.deadline(epoch, limits) <= Instant::now()
    }
}

/// Marks a connection busy while a request is answered.
struct Busy<'a>(&'a Conn, Instant);

impl<'a> Busy<'a> {
    fn new(conn: &'a Conn, epoch: Instant) -> Self {
        conn.busy.store(true, Ordering::Relaxed);
        Self(conn, epoch)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Relaxed);
        self.0.head_started.store(false, Ordering::Relaxed);
        self.0.set_since(self.1);
    }
}

/// The open connections, for the bound.
#[derive(Debug)]
pub(crate) struct Connections {
    epoch: Instant,
    limits: ConnectionLimits,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Woken when a connection closes (for an accept loop at the bound).
    closed: Notify,
    /// When the bound was last warned about, in ms since `epoch` (+1, so 0
    /// is "never").
    warned_ms: AtomicU64,
}

impl Connections {
    pub(crate) fn new(limits: ConnectionLimits) -> Self {
        Self {
            epoch: Instant::now(),
            limits,
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
            closed: Notify::new(),
            warned_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.open().len()
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes room for one more connection: closes the longest idle one
    /// when at the bound. `false` when every connection runs a call.
    fn make_room(&self) -> bool {
        let mut open = self.open();
        if open.len() < self.limits.max_connections {
            return true;
        }
        let idlest = open
            .iter()
            .filter(|(_, c)| !c.busy.load(Ordering::Relaxed))
            .min_by_key(|(_, c)| c.since_ms.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        self.warn_bound(idlest.is_some());
        match idlest.and_then(|id| open.remove(&id)) {
            Some(c) => {
                c.evict.cancel();
                true
            }
            None => false,
        }
    }

    fn warn_bound(&self, evicting: bool) {
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.warned_ms.load(Ordering::Relaxed);
        let every = BOUND_WARNING_EVERY.as_millis() as u64;
        if last != 0 && now < last + every {
            return;
        }
        self.warned_ms.store(now, Ordering::Relaxed);
        let max = self.limits.max_connections;
        if evicting {
            tracing::warn!(
                max,
                "the callback server holds its most connections ([callback] max_connections); closing the longest idle ones to make room (a local process may be holding connections open)"
            );
        } else {
            tracing::warn!(
                max,
                "the callback server holds its most connections ([callback] max_connections), each running a call; new connections wait until one closes"
            );
        }
    }

    fn add(&self) -> (u64, Arc<Conn>) {
        let conn = Arc::new(Conn {
            busy: AtomicBool::new(false),
            head_started: AtomicBool::new(false),
            since_ms: AtomicU64::new(0),
            linger: AtomicBool::new(false),
            head_began: Notify::new(),
            evict: CancellationToken::new(),
        });
        conn.set_since(self.epoch);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open().insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.open().remove(&id);
        self.closed.notify_one();
    }
}

/// Accepts and serves connections until the server stops accepting.
pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let stop = shared.stop_accepting.clone();
    loop {
        while !shared.connections.make_room() {
            tokio::select! {
                () = stop.cancelled() => return,
                () = shared.connections.closed.notified() => {}
            }
        }
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
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
        let (id, conn) = shared.connections.add();
        let s = shared.clone();
        shared.connection_tasks.spawn(async move {
            serve_connection(&s, stream, peer, &conn).await;
            s.connections.remove(id);
        });
    }
}

/// Serves one connection until it closes, times out, is closed to make
/// room, or the server stops (after its running call, if any).
async fn serve_connection(
    shared: &Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    conn: &Arc<Conn>,
) {
    let connections = &shared.connections;
    let epoch = connections.epoch;
    let io = Watched {
        io: Some(stream),
        conn: conn.clone(),
        epoch,
        shared: shared.clone(),
    };
    let service = {
        let (shared, conn) = (shared.clone(), conn.clone());
        hyper::service::service_fn(move |req| {
            let (shared, conn) = (shared.clone(), conn.clone());
            async move {
                let _busy = Busy::new(&conn, epoch);
                Ok::<_, Infallible>(respond(&shared, &conn, peer, req).await)
            }
        })
    };
    // No timer: hyper's header timeout would also run while a connection
    // waits for its next request; the watch below times both apart.
    let http = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        // A head over 64 KiB gets 431: main_server's are a few hundred bytes.
        .max_header_size(64 * 1024)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(http);
    let stop = shared.stop_accepting.clone();
    let mut stopping = false;
    loop {
        let limits = &connections.limits;
        tokio::select! {
            r = http.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "a callback connection ended with an error");
                }
                return;
            }
            () = conn.head_began.notified() => {}
            () = tokio::time::sleep_until(conn.deadline(epoch, limits)) => {
                if conn.expired(epoch, limits) {
                    let why = if conn.head_started.load(Ordering::Relaxed) { "its request stalled" } else { "it was idle" };
                    tracing::debug!(%peer, why, "closing a callback connection");
                    return;
                }
            }
            () = conn.evict.cancelled() => return,
            () = stop.cancelled(), if !stopping => {
                // Idle, or part of a head in: close now. Running a call:
                // close after its answer.
                if !conn.busy.load(Ordering::Relaxed) {
                    return;
                }
                http.as_mut().graceful_shutdown();
                stopping = true;
            }
        }
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
            conn.linger.store(true, Ordering::Relaxed);
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
    let (token, tool) = (token.to_owned(), tool.to_owned());
    let limit = shared.max_body_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let body = if declared.is_some_and(|n| n > limit as u64) {
        // Refused before it is read (and before a 100 Continue is sent).
        Err(BodyError::TooLarge)
    } else {
        read_body(
            req.into_body(),
            limit,
            shared.connections.limits.read_timeout,
        )
        .await
    };
    let a = super::on_call(shared, &token, &tool, body).await;
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
    Unreadable(String),
}

/// Reads a body of at most `limit` bytes within `timeout`. Past the limit
/// it stops reading: the 413 goes out at once (and the connection lingers).
async fn read_body(
    mut body: Incoming,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, BodyError> {
    let read = async {
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Unreadable(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > limit {
                    return Err(BodyError::TooLarge);
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(out))
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(BodyError::Stalled))
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

/// A connection's socket, noting when a request starts to arrive (for the
/// timeouts) and lingering when closed with a body unread.
struct Watched {
    /// `None` only once dropped.
    io: Option<TcpStream>,
    conn: Arc<Conn>,
    epoch: Instant,
    shared: Arc<Shared>,
}

impl Watched {
    fn io(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.io.as_mut().expect("taken only on drop"))
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = self.io().poll_read(cx, buf);
        let c = &self.conn;
        if buf.filled().len() > before
            && !c.busy.load(Ordering::Relaxed)
            && !c.head_started.swap(true, Ordering::Relaxed)
        {
            c.set_since(self.epoch);
            c.head_began.notify_one();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}

impl Drop for Watched {
    /// Closed at once with a body unread, the kernel would answer the
    /// client's next bytes with a reset, which can destroy the answer
    /// before the client has read it. So, as nginx's lingering close does,
    /// what still arrives is read and dropped for a while (the answer went
    /// out with a FIN when hyper shut the connection down).
    fn drop(&mut self) {
        let Some(mut io) = self.io.take() else { return };
        if !self.conn.linger.load(Ordering::Relaxed) {
            return;
        }
        self.shared.connection_tasks.spawn(async move {
            use tokio::io::AsyncReadExt;
            let deadline = Instant::now() + LINGER_TIME;
            let mut scratch = vec![0u8; 16 * 1024];
            let mut total = 0;
            while total < LINGER_BYTES {
                match tokio::time::timeout_at(deadline, io.read(&mut scratch)).await {
                    Ok(Ok(n)) if n > 0 => total += n,
                    _ => return,
                }
            }
        });
    }
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

    #[test]
    fn the_longest_idle_connection_makes_room_and_a_busy_one_never_does() {
        let c = Connections::new(ConnectionLimits {
            read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            max_connections: 2,
        });
        let (_, a) = c.add();
        let (_, b) = c.add();
        a.since_ms.store(5, Ordering::Relaxed);
        b.since_ms.store(9, Ordering::Relaxed);
        assert!(c.make_room());
        assert!(a.evict.is_cancelled() && !b.evict.is_cancelled());
        let (_, d) = c.add();
        b.busy.store(true, Ordering::Relaxed);
        d.busy.store(true, Ordering::Relaxed);
        assert!(!c.make_room(), "every connection runs a call");
        assert_eq!(c.count(), 2);
    }
}
