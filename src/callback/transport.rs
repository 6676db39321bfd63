//! The connection machinery both HTTP listeners share (the callback server
//! and the admin endpoints): the accept loop, the bound on open
//! connections, each connection served by hyper's HTTP/1.1 under our
//! timeouts, and lingering after an answer sent with a body unread. What a
//! request gets is the listener's own business ([`Serve`]).
//!
//! Timeouts, per connection (hyper's own header timeout is off: it also
//! runs while a kept-alive connection waits for its next request, so it
//! cannot tell a stalled head from an idle connection):
//! - a request head must arrive within `read_timeout` of its first byte, and
//!   a connection that never made a request is closed `read_timeout` after
//!   it was accepted: a client that sends part of a request, or nothing,
//!   does not hold a connection for ever;
//! - a connection that has made a request and waits for its next one is
//!   closed after `idle_timeout`, as nginx closes kept-alive connections
//!   (main_server's client drops its own idle connections after 5 s, so it
//!   never meets this one);
//! - a request being answered is not timed here: the listener times its
//!   body and its work.
//!
//! Slots. A connection *earns* its slot when the listener claims it
//! ([`Conn::claim`]): the callback server does so only once a request has
//! shown the valid token in its request line, before any body is read; the
//! admin endpoints once a request has passed the peer and host checks and
//! its body has arrived. A claimed connection is never closed to make room.
//! At most `max_connections` connections are held, lingering ones
//! included. When one more arrives at the bound, one is closed to make
//! room, in this order: first a connection lingering after an answer sent
//! with its body unread (a wrong token, a 413), then one that has not
//! earned a slot within [`HEAD_GRACE`] of being accepted or of its head
//! starting (a client that holds connections without a valid request),
//! then the longest idle one that did earn one (a kept-alive connection
//! of main_server, which opens a new one when it needs it). A connection
//! within the grace of its accept, its head or its last answer is left
//! alone (to show its request, or to finish writing its answer): when nothing else
//! can go, the next connection waits in the listen queue (never closed
//! unanswered) until one closes, is released, or its grace ends. So a
//! local process without the token can never lock main_server out, and
//! calls past the bound wait for a slot. Evictions and waits are counted
//! ([`ConnectionCounts`]) and warned about at most once a minute.
//!
//! A connection closed with a body left unread lingers: see
//! `Watched::drop`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::limits::peer_allowed;

/// After an accept error (out of descriptors, mostly), the pause before
/// the next accept, so the loop does not spin while nothing can be done.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// The least time between two warnings that the connection bound was hit.
const BOUND_WARNING_EVERY: Duration = Duration::from_secs(60);
/// How long, and how much, a closing connection reads and drops of what
/// its client still sends (see `Watched::drop`).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 4 * 1024 * 1024;
/// The scratch buffer of a lingering connection (what it reads is dropped).
const LINGER_SCRATCH: usize = 4 * 1024;
/// How long a new connection (or a new request head) is left alone at the
/// bound to show its request: main_server sends its head with the connect,
/// so this only covers the time the sidecar itself takes to read it, while
/// a client that holds connections without a valid request loses them.
pub(crate) const HEAD_GRACE: Duration = Duration::from_millis(500);

/// A listener's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ConnectionLimits {
    /// For a request head from its first byte (and for a first request
    /// from the accept).
    pub read_timeout: Duration,
    /// For a connection without a request, once it has made one.
    pub idle_timeout: Duration,
    /// Connections held at once.
    pub max_connections: usize,
}

/// What a listener does with a request: the answer, given the connection
/// (to claim its slot, or to mark a body left unread) and the peer.
pub(crate) trait Serve: Send + Sync + 'static {
    type Body: hyper::body::Body<Data = axum::body::Bytes, Error = Self::BodyError> + Send + 'static;
    type BodyError: Into<Box<dyn std::error::Error + Send + Sync>>;

    fn transport(&self) -> &Transport;

    fn serve(
        self: Arc<Self>,
        conn: Arc<Conn>,
        peer: SocketAddr,
        req: Request<Incoming>,
    ) -> impl Future<Output = Response<Self::Body>> + Send;
}

/// One open connection, as its own watch and the accept loop see it.
#[derive(Debug)]
pub(crate) struct Conn {
    /// A request holds the connection's slot (see the module doc).
    busy: AtomicBool,
    /// It has held a slot once: a client that made a valid request.
    proven: AtomicBool,
    /// Bytes of a next request have arrived since the last answer.
    head_started: AtomicBool,
    /// When the connection was accepted, became idle, or its next head
    /// began, in milliseconds since `Transport::epoch`.
    since_ms: AtomicU64,
    /// A body was left unread: linger when closing.
    linger: AtomicBool,
    /// Lingering now: the first to go at the bound.
    lingering: AtomicBool,
    /// The peer is not loopback: answered 403 and the first to go.
    foreign: bool,
    /// The socket, put here by `Watched::drop` to linger.
    linger_io: Mutex<Option<TcpStream>>,
    /// When the watch will next look at the connection (its timer), in
    /// milliseconds since `Transport::epoch`.
    armed_ms: AtomicU64,
    /// Woken when the connection's deadline moves before the watch's timer
    /// (`armed_ms`): a request head begins (due `read_timeout` later) or a
    /// request is answered (idle, due `idle_timeout` later); any later
    /// deadline is seen when the timer fires (see `deadline`). A kept-alive
    /// connection making one request after another never needs it: its
    /// timer, armed before, is due first.
    moved: Notify,
    /// Cancelled to close the connection at once (to make room).
    evict: CancellationToken,
}

impl Conn {
    fn set_since(&self, epoch: Instant) -> u64 {
        let ms = epoch.elapsed().as_millis() as u64;
        self.since_ms.store(ms, Ordering::Relaxed);
        ms
    }

    /// Holds the connection's slot until the claim is dropped: it is never
    /// closed to make room meanwhile, nor timed out as idle.
    pub(crate) fn claim<'a>(&'a self, transport: &'a Transport) -> Claim<'a> {
        self.busy.store(true, Ordering::Relaxed);
        self.proven.store(true, Ordering::Relaxed);
        Claim {
            conn: self,
            transport,
        }
    }

    /// The answer goes out before the request's body was read: the
    /// connection will close, and linger first (see `Watched::drop`).
    pub(crate) fn leave_body_unread(&self) {
        self.linger.store(true, Ordering::Relaxed);
    }

    fn since(&self, epoch: Instant) -> Instant {
        epoch + Duration::from_millis(self.since_ms.load(Ordering::Relaxed))
    }

    /// When this connection's watch should look at it next: its deadline,
    /// or, while a request holds its slot, one idle timeout from now.
    fn deadline(&self, epoch: Instant, limits: &ConnectionLimits) -> Instant {
        if self.busy.load(Ordering::Relaxed) {
            return Instant::now() + limits.idle_timeout;
        }
        let since = self.since(epoch);
        if self.head_started.load(Ordering::Relaxed) || !self.proven.load(Ordering::Relaxed) {
            since + limits.read_timeout
        } else {
            since + limits.idle_timeout
        }
    }

    /// Whether its deadline has passed (never while it holds its slot).
    fn expired(&self, epoch: Instant, limits: &ConnectionLimits) -> bool {
        !self.busy.load(Ordering::Relaxed) && self.deadline(epoch, limits) <= Instant::now()
    }

    /// How readily it is closed to make room (lower goes first, then the
    /// older), or `Err(when)` it may be: never while it holds its slot
    /// (`Err(None)`), not before its grace ends.
    fn eviction_rank(&self, now_ms: u64) -> Result<(u8, u64), Option<u64>> {
        if self.busy.load(Ordering::Relaxed) {
            return Err(None);
        }
        let since = self.since_ms.load(Ordering::Relaxed);
        if self.lingering.load(Ordering::Relaxed) || self.foreign {
            return Ok((0, since));
        }
        let pending =
            !self.proven.load(Ordering::Relaxed) || self.head_started.load(Ordering::Relaxed);
        // Also a connection that has just answered keeps its grace: its
        // answer may still be being written (the slot is given back when
        // the answer is made, before hyper has written all of it).
        let grace_end = since + HEAD_GRACE.as_millis() as u64;
        if now_ms < grace_end {
            Err(Some(grace_end))
        } else if pending {
            Ok((1, since))
        } else {
            Ok((2, since))
        }
    }
}

/// A connection's slot, held while a request is answered.
pub(crate) struct Claim<'a> {
    conn: &'a Conn,
    transport: &'a Transport,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let c = self.conn;
        c.busy.store(false, Ordering::Relaxed);
        c.head_started.store(false, Ordering::Relaxed);
        let due = c.set_since(self.transport.epoch)
            + self.transport.limits.idle_timeout.as_millis() as u64;
        if due < c.armed_ms.load(Ordering::Relaxed) {
            c.moved.notify_one();
        }
        // An accept loop waiting at the bound may close this one now.
        self.transport.changed.notify_one();
    }
}

/// What the bound did, for `/status` and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ConnectionCounts {
    /// Connections closed to make room, by rank: lingering or foreign,
    /// without a valid request in time, idle.
    pub evicted_lingering: u64,
    pub evicted_unproven: u64,
    pub evicted_idle: u64,
    /// Times a new connection had to wait in the listen queue because every
    /// held connection was answering a request or still in its grace.
    pub waited: u64,
    /// Connections from a peer that is not loopback.
    pub foreign: u64,
    /// Connections held now.
    pub open: u64,
}

#[derive(Debug, Default)]
struct Counters {
    evicted: [AtomicU64; 3],
    waited: AtomicU64,
    foreign: AtomicU64,
}

/// One listener's open connections, their bound, and their tasks.
#[derive(Debug)]
pub(crate) struct Transport {
    /// "callback" or "admin", for the log.
    what: &'static str,
    /// What to raise when the bound is hit, for the log.
    bound_setting: &'static str,
    epoch: Instant,
    limits: ConnectionLimits,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Woken when a connection closes, releases its slot or starts to
    /// linger (for an accept loop at the bound).
    changed: Notify,
    /// When the bound was last warned about, in ms since `epoch` (+1, so 0
    /// is "never").
    warned_ms: AtomicU64,
    counters: Counters,
    /// Cancelled to stop accepting; open connections close after their
    /// running request.
    pub(crate) stop: CancellationToken,
    /// The accept loop and every connection, lingering ones included.
    pub(crate) tasks: TaskTracker,
}

/// What `make_room` found.
#[derive(Debug, PartialEq)]
enum Room {
    Free,
    /// Nothing may go now; something may at this time (ms since `epoch`),
    /// or only when a connection closes or is released (`None`).
    WaitUntil(Option<u64>),
}

impl Transport {
    pub(crate) fn new(
        what: &'static str,
        bound_setting: &'static str,
        limits: ConnectionLimits,
        stop: CancellationToken,
    ) -> Self {
        Self {
            what,
            bound_setting,
            epoch: Instant::now(),
            limits,
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
            changed: Notify::new(),
            warned_ms: AtomicU64::new(0),
            counters: Counters::default(),
            stop,
            tasks: TaskTracker::new(),
        }
    }

    pub(crate) fn limits(&self) -> &ConnectionLimits {
        &self.limits
    }

    pub(crate) fn count(&self) -> usize {
        self.open().len()
    }

    pub(crate) fn counts(&self) -> ConnectionCounts {
        let c = &self.counters;
        let e = |i: usize| c.evicted[i].load(Ordering::Relaxed);
        ConnectionCounts {
            evicted_lingering: e(0),
            evicted_unproven: e(1),
            evicted_idle: e(2),
            waited: c.waited.load(Ordering::Relaxed),
            foreign: c.foreign.load(Ordering::Relaxed),
            open: self.count() as u64,
        }
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Makes room for one more connection at the bound by closing the one
    /// that goes first (see the module doc).
    fn make_room(&self) -> Room {
        let mut open = self.open();
        if open.len() < self.limits.max_connections {
            return Room::Free;
        }
        let now = self.now_ms();
        let mut best: Option<((u8, u64), u64)> = None;
        let mut next: Option<u64> = None;
        for (id, c) in open.iter() {
            match c.eviction_rank(now) {
                Ok(rank) => {
                    if best.is_none_or(|(b, _)| rank < b) {
                        best = Some((rank, *id));
                    }
                }
                Err(Some(at)) => next = Some(next.map_or(at, |n| n.min(at))),
                Err(None) => {}
            }
        }
        let Some(((rank, _), id)) = best else {
            self.warn_bound(None);
            return Room::WaitUntil(next);
        };
        self.warn_bound(Some(rank));
        if let Some(c) = open.remove(&id) {
            c.evict.cancel();
            self.counters.evicted[usize::from(rank)].fetch_add(1, Ordering::Relaxed);
        }
        Room::Free
    }

    fn warn_bound(&self, evicting: Option<u8>) {
        let now = self.now_ms() + 1;
        let last = self.warned_ms.load(Ordering::Relaxed);
        let every = BOUND_WARNING_EVERY.as_millis() as u64;
        if last != 0 && now < last + every {
            return;
        }
        self.warned_ms.store(now, Ordering::Relaxed);
        let (what, setting, max) = (self.what, self.bound_setting, self.limits.max_connections);
        match evicting {
            Some(2) => tracing::warn!(
                listener = what,
                max,
                "the {what} listener holds its most connections ({setting}); closing the longest idle ones to make room"
            ),
            Some(_) => tracing::warn!(
                listener = what,
                max,
                "the {what} listener holds its most connections ({setting}); closing those without a valid request to make room (a local process may be holding connections open)"
            ),
            None => tracing::warn!(
                listener = what,
                max,
                "the {what} listener holds its most connections ({setting}), each answering a request; new connections wait until one is free"
            ),
        }
    }

    fn add(&self, foreign: bool) -> (u64, Arc<Conn>) {
        let conn = Arc::new(Conn {
            busy: AtomicBool::new(false),
            proven: AtomicBool::new(false),
            head_started: AtomicBool::new(false),
            since_ms: AtomicU64::new(0),
            armed_ms: AtomicU64::new(u64::MAX),
            linger: AtomicBool::new(false),
            lingering: AtomicBool::new(false),
            foreign,
            linger_io: Mutex::new(None),
            moved: Notify::new(),
            evict: CancellationToken::new(),
        });
        conn.set_since(self.epoch);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open().insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.open().remove(&id);
        self.changed.notify_one();
    }
}

/// Accepts and serves connections until the listener stops accepting.
pub(crate) async fn accept_loop<S: Serve>(service: Arc<S>, listener: TcpListener) {
    let t = service.transport();
    let stop = t.stop.clone();
    loop {
        let mut waited = false;
        while let Room::WaitUntil(at) = t.make_room() {
            if !waited {
                waited = true;
                t.counters.waited.fetch_add(1, Ordering::Relaxed);
            }
            let at = at.map(|ms| t.epoch + Duration::from_millis(ms));
            tokio::select! {
                () = stop.cancelled() => return,
                () = t.changed.notified() => {}
                () = sleep_until_some(at) => {}
            }
        }
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(listener = t.what, error = %e, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        // Answers are written whole, at once: no Nagle delay.
        let _ = stream.set_nodelay(true);
        // Checked at the accept as well as by the listener's own answer
        // (403): such a connection never holds a slot, and goes first.
        let foreign = !peer_allowed(peer);
        if foreign {
            t.counters.foreign.fetch_add(1, Ordering::Relaxed);
        }
        let (id, conn) = t.add(foreign);
        let s = service.clone();
        t.tasks.spawn(async move {
            serve_connection(&s, stream, peer, &conn).await;
            linger(s.transport(), &conn).await;
            s.transport().remove(id);
        });
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Serves one connection until it closes, times out, is closed to make
/// room, or the listener stops (after its running request, if any).
async fn serve_connection<S: Serve>(
    service: &Arc<S>,
    stream: TcpStream,
    peer: SocketAddr,
    conn: &Arc<Conn>,
) {
    let t = service.transport();
    let epoch = t.epoch;
    let io = Watched {
        io: Some(stream),
        conn: conn.clone(),
        epoch,
        read_timeout_ms: t.limits.read_timeout.as_millis() as u64,
    };
    let svc = {
        let (service, conn) = (service.clone(), conn.clone());
        hyper::service::service_fn(move |req| {
            let fut = service.clone().serve(conn.clone(), peer, req);
            async move { Ok::<_, Infallible>(fut.await) }
        })
    };
    // No timer: hyper's header timeout would also run while a connection
    // waits for its next request; the watch below times both apart.
    let http = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        // A head over 64 KiB gets 431: main_server's are a few hundred
        // bytes, and this bounds the head buffer of every connection.
        .max_header_size(64 * 1024)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(http);
    let stop = t.stop.clone();
    let mut stopping = false;
    let limits = &t.limits;
    // One timer for the connection's life, moved rather than made anew: a
    // request costs no timer of its own (see `Conn::moved`).
    let arm = |at: Instant| {
        let ms = at.saturating_duration_since(epoch).as_millis() as u64;
        conn.armed_ms.store(ms, Ordering::Relaxed);
        at
    };
    let timer = tokio::time::sleep_until(arm(conn.deadline(epoch, limits)));
    tokio::pin!(timer);
    loop {
        tokio::select! {
            r = http.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(listener = t.what, %peer, error = %e, "a connection ended with an error");
                }
                return;
            }
            () = conn.moved.notified() => {
                let at = conn.deadline(epoch, limits);
                if at < timer.deadline() {
                    timer.as_mut().reset(arm(at));
                }
            }
            () = timer.as_mut() => {
                timer.as_mut().reset(arm(conn.deadline(epoch, limits)));
                if conn.expired(epoch, limits) {
                    let why = if conn.head_started.load(Ordering::Relaxed) {
                        "its request stalled"
                    } else if conn.proven.load(Ordering::Relaxed) {
                        "it was idle"
                    } else {
                        "it made no request"
                    };
                    tracing::debug!(listener = t.what, %peer, why, "closing a connection");
                    return;
                }
            }
            () = conn.evict.cancelled() => return,
            () = stop.cancelled(), if !stopping => {
                // Idle, or part of a head in: close now. Answering: close
                // after its answer.
                if !conn.busy.load(Ordering::Relaxed) {
                    return;
                }
                http.as_mut().graceful_shutdown();
                stopping = true;
            }
        }
    }
}

/// Closed at once with a body unread, the kernel would answer the client's
/// next bytes with a reset, which can destroy the answer before the client
/// has read it. So, as nginx's lingering close does, what still arrives is
/// read and dropped for a while (the answer went out with a FIN when hyper
/// shut the connection down). The connection keeps its place among the
/// open ones meanwhile (its descriptor is still held), as the first to go.
async fn linger(t: &Transport, conn: &Conn) {
    let io = conn
        .linger_io
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let Some(mut io) = io else { return };
    conn.lingering.store(true, Ordering::Relaxed);
    t.changed.notify_one();
    use tokio::io::AsyncReadExt;
    let deadline = Instant::now() + LINGER_TIME;
    let mut scratch = vec![0u8; LINGER_SCRATCH];
    let mut total = 0;
    while total < LINGER_BYTES {
        tokio::select! {
            r = tokio::time::timeout_at(deadline, io.read(&mut scratch)) => match r {
                Ok(Ok(n)) if n > 0 => total += n,
                _ => return,
            },
            () = conn.evict.cancelled() => return,
        }
    }
}

/// A connection's socket, noting when a request starts to arrive (for the
/// timeouts) and kept to linger when closed with a body unread.
struct Watched {
    /// `None` only once dropped.
    io: Option<TcpStream>,
    conn: Arc<Conn>,
    epoch: Instant,
    read_timeout_ms: u64,
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
            let due = c.set_since(self.epoch) + self.read_timeout_ms;
            if due < c.armed_ms.load(Ordering::Relaxed) {
                c.moved.notify_one();
            }
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
    /// With a body left unread, the socket is kept for `linger`.
    fn drop(&mut self) {
        let Some(io) = self.io.take() else { return };
        if self.conn.linger.load(Ordering::Relaxed) {
            *self
                .conn
                .linger_io
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(io);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transport(max: usize) -> Transport {
        Transport::new(
            "test",
            "max",
            ConnectionLimits {
                read_timeout: Duration::from_secs(1),
                idle_timeout: Duration::from_secs(1),
                max_connections: max,
            },
            CancellationToken::new(),
        )
    }

    /// A transport whose clock has run for 10 s (so "long ago" exists).
    fn aged(max: usize) -> Transport {
        let mut t = transport(max);
        t.epoch = Instant::now()
            .checked_sub(Duration::from_secs(10))
            .expect("the clock has run for 10 s");
        t
    }

    #[test]
    fn at_the_bound_lingering_goes_first_then_unproven_then_the_longest_idle() {
        let t = aged(4);
        let (_, idle_old) = t.add(false);
        let (_, idle_new) = t.add(false);
        let (_, unproven) = t.add(false);
        let (_, lingering) = t.add(false);
        for c in [&idle_old, &idle_new] {
            c.proven.store(true, Ordering::Relaxed);
        }
        idle_old.since_ms.store(5, Ordering::Relaxed);
        idle_new.since_ms.store(9, Ordering::Relaxed);
        unproven.since_ms.store(1_000, Ordering::Relaxed);
        lingering.lingering.store(true, Ordering::Relaxed);
        lingering.since_ms.store(2_000, Ordering::Relaxed);
        let order = [&lingering, &unproven, &idle_old, &idle_new];
        for (i, expected) in order.iter().enumerate() {
            assert_eq!(t.make_room(), Room::Free);
            assert!(expected.evict.is_cancelled(), "#{i} went");
            assert!(
                order[i + 1..].iter().all(|c| !c.evict.is_cancelled()),
                "#{i}"
            );
            // A fresh connection takes its place, in its grace.
            t.add(false);
        }
        let counts = t.counts();
        assert_eq!(
            (
                counts.evicted_lingering,
                counts.evicted_unproven,
                counts.evicted_idle
            ),
            (1, 1, 2)
        );
        // Only fresh connections are left: the next one waits.
        assert!(matches!(t.make_room(), Room::WaitUntil(Some(_))));
    }

    #[test]
    fn a_connection_in_its_grace_or_holding_its_slot_never_makes_room() {
        let t = aged(2);
        let (_, a) = t.add(false);
        let (_, b) = t.add(false);
        // Both fresh: in their grace, so the next one waits until then.
        match t.make_room() {
            Room::WaitUntil(Some(at)) => assert!(at >= t.now_ms()),
            other => panic!("{other:?}"),
        }
        let _claim_a = a.claim(&t);
        let _claim_b = b.claim(&t);
        assert_eq!(t.make_room(), Room::WaitUntil(None));
        assert_eq!(t.count(), 2);
        assert_eq!(t.counts().evicted_unproven, 0);
    }

    #[test]
    fn unproven_connections_past_their_grace_go_before_idle_ones() {
        let t = transport(2);
        let (_, idle) = t.add(false);
        idle.proven.store(true, Ordering::Relaxed);
        let (_, unproven) = t.add(false);
        assert!(unproven.eviction_rank(t.now_ms()).unwrap_err().is_some());
        // Its grace is over this much later.
        let now = t.now_ms() + HEAD_GRACE.as_millis() as u64 + 1;
        assert_eq!(unproven.eviction_rank(now).unwrap().0, 1);
        assert_eq!(idle.eviction_rank(now).unwrap().0, 2);
        let foreign = t.add(true).1;
        assert_eq!(foreign.eviction_rank(0).unwrap().0, 0);
    }
}
