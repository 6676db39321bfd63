//! The http handler: POST the callback body, untouched, to the plugin's
//! endpoint over loopback TCP or a unix socket, and read its answer within
//! `max_output_bytes`.
//!
//! This is a small HTTP/1.1 client of our own (framing in `h1`), not a
//! general-purpose one (reqwest, hyper's client), because it is the hot path
//! of every call (BENCHMARKS.md, benchmark 1): the handler's URL is parsed
//! and the request head built once per reload into an [`Endpoint`]; each
//! callback worker thread keeps its own pool of keep-alive connections
//! ([`Upstreams`]), so a call and its handler connection run on one thread;
//! a call writes its request in one write and reads the answer itself, with
//! no connection task or channel in between; and there is nothing to
//! configure away: no proxy from the environment (a call never leaves the
//! machine through `HTTP_PROXY`), no redirects, no cookies, no compression.
//!
//! A pooled connection the handler has closed while it sat idle is noticed
//! before it is used (the runtime saw it become readable; a read then finds
//! its end) and replaced. A request written to a connection is never sent
//! again, as a POST must not run twice: a handler closing a kept-alive
//! connection at the very moment a call is written to it fails that call.
//! The deadline is the caller's business (`handler::run`): dropping the call
//! closes its connection.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, IoSlice};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

use super::h1::{self, Framing};
use super::handler::HandlerError;
use crate::manifest::HttpHandler;

/// How much of a non-2xx answer is quoted back, as main_server quotes.
const STATUS_BODY_CHARS: usize = 200;
/// Idle pooled connections are closed after this.
pub const POOL_IDLE: Duration = Duration::from_secs(60);
/// The most idle connections kept per endpoint and worker; more than the
/// concurrency a tool sees in practice, fewer than the descriptor limit.
const MAX_IDLE_PER_ENDPOINT: usize = 256;
/// A body up to this size is copied behind the head and sent in one write;
/// a larger one goes out from where it is, with a vectored write.
const COPY_BODY_BYTES: usize = 16 * 1024;
/// A connection's read buffer is given back to the allocator, rather than
/// kept in the pool, once an answer has grown it past this.
const KEEP_BUFFER_BYTES: usize = 64 * 1024;

/// Where and how to reach one http handler, worked out once per reload.
#[derive(Debug)]
pub struct Endpoint {
    /// The handler as messages name it (URL, and the socket if any).
    target: String,
    /// The pool this endpoint's connections live in: one per address, so
    /// tools sharing a plugin share its connections.
    pool_key: String,
    connect: Connect,
    /// The request head up to the Content-Length value.
    head: Vec<u8>,
}

#[derive(Debug, Clone)]
enum Connect {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl Endpoint {
    /// The endpoint of `h`. The manifest loader checked the URL already, so
    /// an error here is a URL it let through; the call reports it.
    pub fn new(h: &HttpHandler) -> Result<Self, String> {
        let target = match &h.unix_socket {
            Some(s) => format!("{} (unix socket {})", h.url, s.display()),
            None => h.url.clone(),
        };
        let url = url::Url::parse(&h.url).map_err(|e| format!("{target}: not a URL: {e}"))?;
        if url.scheme() != "http" {
            return Err(format!("{target}: only http:// URLs can be called"));
        }
        let host_str = url
            .host_str()
            .ok_or_else(|| format!("{target}: the URL has no host"))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let host = match url.port() {
            Some(p) => format!("{host_str}:{p}"),
            None => host_str.to_string(),
        };
        // `Url` percent-encodes the path and query, so they are one token of
        // the request line; a control character would still break the head.
        let mut path = url.path().to_string();
        if let Some(q) = url.query() {
            path.push('?');
            path.push_str(q);
        }
        if path
            .bytes()
            .chain(host.bytes())
            .any(|b| b <= b' ' || b == 0x7f)
        {
            return Err(format!(
                "{target}: the path or host cannot be sent in a request head"
            ));
        }
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: "
        )
        .into_bytes();
        let (connect, pool_key) = match &h.unix_socket {
            Some(s) => (Connect::Unix(s.clone()), format!("unix:{}", s.display())),
            None => {
                // `[::1]` in the URL, `::1` to connect.
                let bare = host_str.trim_start_matches('[').trim_end_matches(']');
                (
                    Connect::Tcp {
                        host: bare.to_string(),
                        port,
                    },
                    format!("tcp:{host_str}:{port}"),
                )
            }
        };
        Ok(Self {
            target,
            pool_key,
            connect,
            head,
        })
    }

    /// The request carrying `body`: the head, with the body behind it when
    /// it is small (one buffer, one write), and what of the body is still
    /// to be written after it (all of it when large, nothing when small).
    fn request<'b>(&self, body: &'b Bytes) -> (Vec<u8>, &'b [u8]) {
        let small = body.len() <= COPY_BODY_BYTES;
        let mut wire =
            Vec::with_capacity(self.head.len() + 24 + if small { body.len() } else { 0 });
        wire.extend_from_slice(&self.head);
        h1::push_decimal(&mut wire, body.len());
        wire.extend_from_slice(b"\r\n\r\n");
        if small {
            wire.extend_from_slice(body);
            (wire, &[])
        } else {
            (wire, body)
        }
    }
}

/// A connection to a handler, TCP or unix.
#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl Stream {
    /// Whether an idle connection can carry a request: the handler has not
    /// closed it, nor sent anything unasked. Costs a read only when the
    /// runtime has seen the connection become readable since it was last
    /// read to its end (usually, it has not).
    fn still_open(&self, buf: &mut BytesMut) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let ready = match self {
            Self::Tcp(s) => s.poll_read_ready(&mut cx),
            Self::Unix(s) => s.poll_read_ready(&mut cx),
        };
        match ready {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                buf.reserve(1);
                let read = match self {
                    Self::Tcp(s) => s.try_read_buf(buf),
                    Self::Unix(s) => s.try_read_buf(buf),
                };
                matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }
}

/// A keep-alive connection and the bytes read from it, not yet used.
#[derive(Debug)]
struct Conn {
    io: Stream,
    buf: BytesMut,
}

/// A hasher for the pool keys (a few dozen bytes, ours): FNV-1a, as the
/// default SipHash costs more than the rest of a checkout.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// One worker thread's keep-alive connections, by endpoint address.
#[derive(Debug, Default)]
pub struct Upstreams {
    pools: Mutex<Pools>,
}

#[derive(Debug, Default)]
struct Pools {
    idle: HashMap<String, Vec<Idle>, BuildHasherDefault<Fnv>>,
    /// A task closing connections idle past `POOL_IDLE` runs while any
    /// connection is idle, and only then (no timer in an idle daemon).
    sweeping: bool,
}

#[derive(Debug)]
struct Idle {
    conn: Conn,
    since: Instant,
}

impl Upstreams {
    /// A live idle connection to `e`, most recently used first.
    fn checkout(&self, e: &Endpoint) -> Option<Conn> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let list = pools.idle.get_mut(&e.pool_key)?;
        while let Some(mut c) = list.pop() {
            if c.since.elapsed() < POOL_IDLE && c.conn.io.still_open(&mut c.conn.buf) {
                return Some(c.conn);
            }
        }
        None
    }

    /// Keeps a connection whose answer was read in full for the next call.
    fn give_back(self: &Arc<Self>, e: &Endpoint, mut conn: Conn) {
        if !conn.buf.is_empty() {
            return; // more than the answer came: not a connection to trust
        }
        if conn.buf.capacity() > KEEP_BUFFER_BYTES {
            conn.buf = BytesMut::new();
        }
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let list = match pools.idle.get_mut(e.pool_key.as_str()) {
            Some(l) => l,
            None => pools.idle.entry(e.pool_key.clone()).or_default(),
        };
        if list.len() >= MAX_IDLE_PER_ENDPOINT {
            return;
        }
        list.push(Idle {
            conn,
            since: Instant::now(),
        });
        if !pools.sweeping {
            pools.sweeping = true;
            let me = self.clone();
            tokio::spawn(async move { me.sweep().await });
        }
    }

    /// Closes (drops) connections idle past `POOL_IDLE`, or closed by their
    /// handler, until none is idle.
    async fn sweep(self: Arc<Self>) {
        loop {
            tokio::time::sleep(POOL_IDLE / 2).await;
            let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
            for list in pools.idle.values_mut() {
                list.retain_mut(|c| {
                    c.since.elapsed() < POOL_IDLE && c.conn.io.still_open(&mut c.conn.buf)
                });
            }
            pools.idle.retain(|_, list| !list.is_empty());
            if pools.idle.is_empty() {
                pools.sweeping = false;
                return;
            }
        }
    }

    /// The number of idle connections kept, for tests.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools.idle.values().map(Vec::len).sum()
    }
}

/// POSTs `body` to the endpoint and returns the 2xx answer's body.
pub async fn call(
    upstreams: &Arc<Upstreams>,
    endpoint: &Result<Endpoint, String>,
    body: Bytes,
    max_output_bytes: usize,
) -> Result<Vec<u8>, HandlerError> {
    let e = match endpoint {
        Ok(e) => e,
        Err(detail) => {
            return Err(HandlerError::Failed {
                detail: detail.clone(),
            });
        }
    };
    let (wire, rest) = e.request(&body);
    let mut conn = send(upstreams, e, &wire, rest).await?;
    let failed = |err: io::Error| HandlerError::Failed {
        detail: format!("{}: {}", e.target, err),
    };
    let head = read_head(&mut conn).await.map_err(failed)?;
    if !(200..300).contains(&head.status) {
        // Only the start is quoted; a little more is read so a multi-byte
        // character at the cut is not lost. The rest is not read, so this
        // connection is not reused.
        let start = h1::read_body(
            &mut conn.io,
            &mut conn.buf,
            head.meta.framing,
            STATUS_BODY_CHARS * 4,
        )
        .await
        .map_or_else(|_| Bytes::new(), |(b, _)| b);
        let text: String = String::from_utf8_lossy(&start)
            .chars()
            .take(STATUS_BODY_CHARS)
            .collect();
        return Err(HandlerError::Status {
            target: e.target.clone(),
            status: head.status,
            body_start: text.trim().to_string(),
        });
    }
    if matches!(head.meta.framing, Framing::Length(n) if n > max_output_bytes as u64) {
        return Err(HandlerError::OutputTooLarge {
            limit: max_output_bytes,
        });
    }
    match h1::read_body(
        &mut conn.io,
        &mut conn.buf,
        head.meta.framing,
        max_output_bytes,
    )
    .await
    {
        Ok((b, false)) => {
            // Read to its end: the connection may serve the next call.
            if !head.meta.close {
                upstreams.give_back(e, conn);
            }
            Ok(b.into())
        }
        Ok((_, true)) => Err(HandlerError::OutputTooLarge {
            limit: max_output_bytes,
        }),
        Err(err) => Err(HandlerError::Failed {
            detail: format!("reading the answer of {}: {err}", e.target),
        }),
    }
}

/// Writes the request on a pooled connection, or a new one.
async fn send(
    upstreams: &Arc<Upstreams>,
    e: &Endpoint,
    wire: &[u8],
    rest: &[u8],
) -> Result<Conn, HandlerError> {
    // Pooled connections first. A write that fails left the request
    // incomplete at the handler, which cannot have acted on it: the next
    // connection is tried.
    while let Some(mut conn) = upstreams.checkout(e) {
        if write_request(&mut conn.io, wire, rest).await.is_ok() {
            return Ok(conn);
        }
    }
    let mut conn = connect(e).await?;
    match write_request(&mut conn.io, wire, rest).await {
        Ok(()) => Ok(conn),
        Err(err) => Err(HandlerError::Failed {
            detail: format!("sending the call to {}: {err}", e.target),
        }),
    }
}

async fn write_request(io: &mut Stream, wire: &[u8], rest: &[u8]) -> io::Result<()> {
    if rest.is_empty() {
        return io.write_all(wire).await;
    }
    let (mut a, mut b) = (wire, rest);
    while !a.is_empty() || !b.is_empty() {
        let n = io
            .write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    Ok(())
}

/// Reads the answer's head, skipping interim (1xx) answers.
async fn read_head(conn: &mut Conn) -> io::Result<h1::ResponseHead> {
    loop {
        match h1::parse_response(&conn.buf) {
            Ok(Some(head)) => {
                let _ = conn.buf.split_to(head.len);
                if (100..200).contains(&head.status) && head.status != 101 {
                    continue;
                }
                return Ok(head);
            }
            Ok(None) => {
                if h1::fill(&mut conn.io, &mut conn.buf).await? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        if conn.buf.is_empty() {
                            "the handler closed the connection without answering"
                        } else {
                            "the handler closed the connection in the middle of its answer"
                        },
                    ));
                }
            }
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("its answer cannot be read: {e}"),
                ));
            }
        }
    }
}

/// Opens a new connection.
async fn connect(e: &Endpoint) -> Result<Conn, HandlerError> {
    let opened = match &e.connect {
        Connect::Tcp { host, port } => TcpStream::connect((host.as_str(), *port)).await.map(|s| {
            // One write per request already; no Nagle delay on top.
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        }),
        Connect::Unix(path) => UnixStream::connect(path).await.map(Stream::Unix),
    };
    match opened {
        Ok(io) => Ok(Conn {
            io,
            buf: BytesMut::with_capacity(h1::READ_CHUNK),
        }),
        Err(io) if out_of_descriptors(&io) => Err(HandlerError::Failed {
            // The sidecar's own limit, not the plugin: say so, or the
            // operator goes looking for a plugin that is running fine.
            detail: format!(
                "the sidecar has no file descriptor left to reach {} ({io}): raise its open-files limit (LimitNOFILE)",
                e.target
            ),
        }),
        Err(io) => Err(HandlerError::Unreachable {
            target: e.target.clone(),
            detail: io.to_string(),
        }),
    }
}

/// EMFILE/ENFILE.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(24 | 23))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(url: &str, socket: Option<&str>) -> Endpoint {
        Endpoint::new(&HttpHandler {
            url: url.into(),
            unix_socket: socket.map(PathBuf::from),
        })
        .unwrap()
    }

    #[test]
    fn running_out_of_descriptors_is_told_apart_from_a_plugin_that_is_down() {
        assert!(out_of_descriptors(&std::io::Error::from_raw_os_error(24)));
        assert!(!out_of_descriptors(&std::io::Error::from_raw_os_error(111)));
    }

    #[test]
    fn an_endpoint_is_worked_out_once_from_the_url() {
        let head = |e: &Endpoint| String::from_utf8(e.head.clone()).unwrap();
        let e = endpoint("http://127.0.0.1:9876/tools/w?x=1", None);
        assert!(head(&e).starts_with("POST /tools/w?x=1 HTTP/1.1\r\nhost: 127.0.0.1:9876\r\n"));
        assert_eq!(e.pool_key, "tcp:127.0.0.1:9876");
        assert!(matches!(&e.connect, Connect::Tcp { host, port: 9876 } if host == "127.0.0.1"));

        let e = endpoint("http://[::1]/", None);
        assert!(head(&e).contains("\r\nhost: [::1]\r\n"));
        assert!(matches!(&e.connect, Connect::Tcp { host, port: 80 } if host == "::1"));

        let e = endpoint("http://localhost/w", Some("/run/p.sock"));
        assert_eq!(e.pool_key, "unix:/run/p.sock");
        assert_eq!(e.target, "http://localhost/w (unix socket /run/p.sock)");
        assert!(matches!(&e.connect, Connect::Unix(p) if p == &PathBuf::from("/run/p.sock")));
    }

    /// A plain HTTP/1.1 server counting its connections; with `close`, it
    /// closes each connection after one answer, without saying so first.
    async fn counting_server(close: bool) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        scripted_server(
            |_| {
                let body = r#"{"output":1,"is_error":false}"#;
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            },
            close,
        )
        .await
    }

    /// One call of `{}` to `e` through the pool `up`.
    async fn call_once(
        up: &Arc<Upstreams>,
        e: &Result<Endpoint, String>,
    ) -> Result<Vec<u8>, HandlerError> {
        call(up, e, Bytes::from_static(b"{}"), 1024).await
    }

    #[tokio::test]
    async fn a_connection_serves_call_after_call() {
        use std::sync::atomic::Ordering;
        let (url, connections) = counting_server(false).await;
        let (e, up) = (Ok(endpoint(&url, None)), Arc::default());
        for _ in 0..5 {
            let out = call_once(&up, &e).await.unwrap();
            assert_eq!(out, br#"{"output":1,"is_error":false}"#);
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
        assert_eq!(up.idle_count(), 1);
    }

    /// The handler closing an idle kept-alive connection is no failure:
    /// the request, not yet sent, goes on a new connection.
    #[tokio::test]
    async fn a_connection_the_handler_closed_meanwhile_is_replaced() {
        use std::sync::atomic::Ordering;
        let (url, connections) = counting_server(true).await;
        let (e, up) = (Ok(endpoint(&url, None)), Arc::default());
        for i in 0..20 {
            let r = call_once(&up, &e).await;
            assert!(r.is_ok(), "call {i}: {r:?}");
            // Sometimes the next call finds the closed connection pooled,
            // sometimes already gone: both must work.
            if i % 2 == 0 {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(connections.load(Ordering::SeqCst), 20);
    }

    #[tokio::test]
    async fn a_handler_that_is_not_listening_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/w", listener.local_addr().unwrap());
        drop(listener);
        let (e, up) = (Ok(endpoint(&url, None)), Arc::default());
        let r = call_once(&up, &e).await;
        assert!(matches!(r, Err(HandlerError::Unreachable { .. })), "{r:?}");
    }

    /// A server answering each request with `reply(body)`, closing the
    /// connection after it when `close`; it counts its connections.
    async fn scripted_server(
        reply: fn(&[u8]) -> Vec<u8>,
        close: bool,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/w", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = vec![0u8; 64 * 1024];
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            let n = s.read(&mut chunk).await.unwrap_or(0);
                            if n == 0 {
                                return;
                            }
                            buf.extend_from_slice(&chunk[..n]);
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .unwrap()
                            .parse()
                            .unwrap();
                        while buf.len() < end + 4 + len {
                            let n = s.read(&mut chunk).await.unwrap_or(0);
                            if n == 0 {
                                return;
                            }
                            buf.extend_from_slice(&chunk[..n]);
                        }
                        let body: Vec<u8> = buf.drain(..end + 4 + len).skip(end + 4).collect();
                        s.write_all(&reply(&body)).await.unwrap();
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        (url, count)
    }

    /// One call of `body` to a `scripted_server(reply, close)`: its result,
    /// and how many connections the pool then keeps.
    async fn scripted_call(
        reply: fn(&[u8]) -> Vec<u8>,
        close: bool,
        body: Bytes,
    ) -> (Result<Vec<u8>, HandlerError>, usize) {
        let (url, _) = scripted_server(reply, close).await;
        let (e, up): (_, Arc<Upstreams>) = (Ok(endpoint(&url, None)), Arc::default());
        let r = call(&up, &e, body, 1024 * 1024).await;
        (r, up.idle_count())
    }

    #[tokio::test]
    async fn a_chunked_answer_is_decoded_and_its_connection_kept() {
        let (r, idle) = scripted_call(
            |_| b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n".to_vec(),
            false,
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(r.unwrap(), br#"{"a":1}"#);
        assert_eq!(idle, 1);
    }

    #[tokio::test]
    async fn an_answer_without_a_length_ends_with_its_connection() {
        let (r, idle) = scripted_call(
            |_| b"HTTP/1.1 200 OK\r\n\r\n{\"until\":\"close\"}".to_vec(),
            true,
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(r.unwrap(), br#"{"until":"close"}"#);
        assert_eq!(idle, 0, "a connection read to its end is not kept");
    }

    #[tokio::test]
    async fn an_interim_answer_is_skipped() {
        let (r, _) = scripted_call(
            |_| {
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
                    .to_vec()
            },
            false,
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(r.unwrap(), b"{}");
    }

    #[tokio::test]
    async fn a_connection_the_handler_says_it_closes_is_not_kept() {
        let (r, idle) = scripted_call(
            |_| b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            true,
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(r.unwrap(), b"{}");
        assert_eq!(idle, 0);
    }

    #[tokio::test]
    async fn a_large_body_arrives_whole() {
        let mut big = vec![b' '; 300 * 1024];
        *big.last_mut().unwrap() = b'!';
        // The handler answers with the length and the last byte it got.
        let (r, _) = scripted_call(
            |body| {
                let out = format!("[{},{}]", body.len(), body.last().copied().unwrap_or(0));
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{out}",
                    out.len()
                )
                .into_bytes()
            },
            false,
            Bytes::from(big),
        )
        .await;
        assert_eq!(r.unwrap(), format!("[{},{}]", 300 * 1024, b'!').as_bytes());
    }

    #[tokio::test]
    async fn an_answer_cut_short_is_a_failure_that_says_so() {
        let (r, idle) = scripted_call(
            |_| b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}".to_vec(),
            true,
            Bytes::from_static(b"{}"),
        )
        .await;
        let Err(HandlerError::Failed { detail }) = r else {
            panic!("{r:?}")
        };
        assert!(
            detail.contains("closed before the message was complete"),
            "{detail}"
        );
        assert_eq!(idle, 0);
    }

    #[test]
    fn the_request_carries_host_content_type_and_length() {
        let e = endpoint("http://localhost:8080/w", None);
        let (wire, _) = e.request(&Bytes::from_static(b"{}"));
        assert_eq!(
            String::from_utf8(wire).unwrap(),
            "POST /w HTTP/1.1\r\nhost: localhost:8080\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        );
        // A large body is not copied behind the head.
        let big = Bytes::from(vec![b' '; COPY_BODY_BYTES + 1]);
        let (wire, rest) = e.request(&big);
        assert_eq!(rest.len(), big.len());
        assert!(
            String::from_utf8(wire)
                .unwrap()
                .ends_with("content-length: 16385\r\n\r\n")
        );
    }

    #[test]
    fn a_url_that_cannot_be_a_request_head_is_refused() {
        let bad = |url: &str| {
            Endpoint::new(&HttpHandler {
                url: url.into(),
                unix_socket: None,
            })
            .is_err()
        };
        assert!(bad("https://127.0.0.1/w"));
        assert!(bad("file:///tmp/w"));
        assert!(!bad("http://127.0.0.1/a%20b"));
    }
}
