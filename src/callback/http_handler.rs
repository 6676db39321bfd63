//! The http handler: POST the callback body, untouched, to the plugin's
//! endpoint over loopback TCP or a unix socket, and read its answer within
//! `max_output_bytes`.
//!
//! This is a small HTTP/1.1 client of our own on hyper's connection API,
//! not a general-purpose one (reqwest), because it is the hot path of every
//! call (BENCHMARKS.md, benchmark 1): the handler's URL is parsed once per
//! reload into an [`Endpoint`], not once per call; each callback worker
//! thread keeps its own pool of keep-alive connections ([`Upstreams`]), so a
//! call and its handler connection run on one thread with no hand-off
//! between threads; and there is nothing to configure away: no proxy from
//! the environment (a call never leaves the machine through `HTTP_PROXY`),
//! no redirects, no cookies, no compression.
//!
//! A request that a pooled connection could not even start to send (the
//! handler closed the connection while it sat idle) is sent again once on a
//! new connection; one that may have reached the handler never is, as a
//! POST must not run twice. The deadline is the caller's business
//! (`handler::run`): dropping the call closes its connection.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::http::uri::PathAndQuery;
use hyper::{Method, Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

use super::handler::HandlerError;
use crate::manifest::HttpHandler;

/// How much of a non-2xx answer is quoted back, as main_server quotes.
const STATUS_BODY_CHARS: usize = 200;
/// Idle pooled connections are closed after this.
pub const POOL_IDLE: Duration = Duration::from_secs(60);
/// The most idle connections kept per endpoint and worker; more than the
/// concurrency a tool sees in practice, fewer than the descriptor limit.
const MAX_IDLE_PER_ENDPOINT: usize = 256;

/// Where and how to reach one http handler, worked out once per reload.
#[derive(Debug)]
pub struct Endpoint {
    /// The handler as messages name it (URL, and the socket if any).
    target: String,
    /// The pool this endpoint's connections live in: one per address, so
    /// tools sharing a plugin share its connections.
    pool_key: String,
    connect: Connect,
    path: PathAndQuery,
    host: HeaderValue,
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
        let host_str = url
            .host_str()
            .ok_or_else(|| format!("{target}: the URL has no host"))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let host = match url.port() {
            Some(p) => HeaderValue::from_str(&format!("{host_str}:{p}")),
            None => HeaderValue::from_str(host_str),
        }
        .map_err(|e| format!("{target}: the host cannot be a Host header: {e}"))?;
        let mut path = url.path().to_string();
        if let Some(q) = url.query() {
            path.push('?');
            path.push_str(q);
        }
        let path = PathAndQuery::try_from(path)
            .map_err(|e| format!("{target}: the path cannot be sent: {e}"))?;
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
            path,
            host,
        })
    }

    fn request(&self, body: Bytes) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = Uri::from(self.path.clone());
        let headers = req.headers_mut();
        headers.insert(HOST, self.host.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        req
    }
}

/// One worker thread's keep-alive connections, by endpoint address.
#[derive(Debug, Default)]
pub struct Upstreams {
    pools: Mutex<Pools>,
}

#[derive(Debug, Default)]
struct Pools {
    idle: HashMap<String, Vec<Idle>>,
    /// A task closing connections idle past `POOL_IDLE` runs while any
    /// connection is idle, and only then (no timer in an idle daemon).
    sweeping: bool,
}

#[derive(Debug)]
struct Idle {
    sender: SendRequest<Full<Bytes>>,
    since: Instant,
}

impl Upstreams {
    /// A live idle connection to `e`, most recently used first.
    fn checkout(&self, e: &Endpoint) -> Option<SendRequest<Full<Bytes>>> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let list = pools.idle.get_mut(&e.pool_key)?;
        while let Some(c) = list.pop() {
            if !c.sender.is_closed() && c.since.elapsed() < POOL_IDLE {
                return Some(c.sender);
            }
        }
        None
    }

    /// Keeps a connection whose answer was read in full for the next call.
    fn give_back(self: &Arc<Self>, e: &Endpoint, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let list = pools.idle.entry(e.pool_key.clone()).or_default();
        if list.len() >= MAX_IDLE_PER_ENDPOINT {
            return;
        }
        list.push(Idle {
            sender,
            since: Instant::now(),
        });
        if !pools.sweeping {
            pools.sweeping = true;
            let me = self.clone();
            tokio::spawn(async move { me.sweep().await });
        }
    }

    /// Closes (drops) connections idle past `POOL_IDLE`, until none is idle.
    async fn sweep(self: Arc<Self>) {
        loop {
            tokio::time::sleep(POOL_IDLE / 2).await;
            let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
            for list in pools.idle.values_mut() {
                list.retain(|c| !c.sender.is_closed() && c.since.elapsed() < POOL_IDLE);
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
    let (mut sender, mut resp) = send(upstreams, e, body).await?;
    let status = resp.status();
    if !status.is_success() {
        // Only the start is quoted; a little more is read so a multi-byte
        // character at the cut is not lost. The rest is not read, so this
        // connection is not reused.
        let start = read_at_most(resp.body_mut(), STATUS_BODY_CHARS * 4)
            .await
            .map_or_else(|_| Bytes::new(), |(b, _)| b);
        let text: String = String::from_utf8_lossy(&start)
            .chars()
            .take(STATUS_BODY_CHARS)
            .collect();
        return Err(HandlerError::Status {
            target: e.target.clone(),
            status: status.as_u16(),
            body_start: text.trim().to_string(),
        });
    }
    // `size_hint` is the Content-Length, when there is one.
    if resp
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n > max_output_bytes as u64)
    {
        return Err(HandlerError::OutputTooLarge {
            limit: max_output_bytes,
        });
    }
    match read_at_most(resp.body_mut(), max_output_bytes).await {
        Ok((b, false)) => {
            // The answer was read to its end: the connection may serve the
            // next call once hyper has seen that too.
            if sender.ready().await.is_ok() {
                upstreams.give_back(e, sender);
            }
            Ok(b.into())
        }
        Ok((_, true)) => Err(HandlerError::OutputTooLarge {
            limit: max_output_bytes,
        }),
        Err(err) => Err(HandlerError::Failed {
            detail: format!("reading the answer of {}: {}", e.target, chain(&err)),
        }),
    }
}

/// Sends the request on a pooled connection, or a new one, and waits for
/// the answer's head.
async fn send(
    upstreams: &Arc<Upstreams>,
    e: &Endpoint,
    body: Bytes,
) -> Result<(SendRequest<Full<Bytes>>, Response<Incoming>), HandlerError> {
    let mut req = e.request(body);
    // Pooled connections first; one the handler has closed meanwhile hands
    // the request back unsent, and the next is tried.
    while let Some(mut sender) = upstreams.checkout(e) {
        if sender.ready().await.is_err() {
            continue;
        }
        match sender.try_send_request(req).await {
            Ok(resp) => return Ok((sender, resp)),
            Err(mut err) => match err.take_message() {
                Some(unsent) => req = unsent,
                None => return Err(send_failed(e, err.error())),
            },
        }
    }
    let mut sender = connect(e).await?;
    match sender.send_request(req).await {
        Ok(resp) => Ok((sender, resp)),
        Err(err) => Err(send_failed(e, &err)),
    }
}

fn send_failed(e: &Endpoint, err: &hyper::Error) -> HandlerError {
    HandlerError::Failed {
        detail: format!("{}: {}", e.target, chain(err)),
    }
}

/// Opens a new connection and starts driving it on this worker's runtime.
async fn connect(e: &Endpoint) -> Result<SendRequest<Full<Bytes>>, HandlerError> {
    let opened = match &e.connect {
        Connect::Tcp { host, port } => match TcpStream::connect((host.as_str(), *port)).await {
            Ok(s) => {
                // One write per request already; no Nagle delay on top.
                let _ = s.set_nodelay(true);
                Ok(handshake(s).await)
            }
            Err(io) => Err(io),
        },
        Connect::Unix(path) => match UnixStream::connect(path).await {
            Ok(s) => Ok(handshake(s).await),
            Err(io) => Err(io),
        },
    };
    match opened {
        Ok(h) => h.map_err(|err| HandlerError::Failed {
            detail: format!("{}: {}", e.target, chain(&err)),
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

async fn handshake<S>(stream: S) -> hyper::Result<SendRequest<Full<Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    // Ends when the handler closes the connection or the last sender is
    // dropped (the pool dropping an expired one, a call past its deadline).
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// EMFILE/ENFILE.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(24 | 23))
}

/// Reads a body, at most `limit` bytes of it; the flag says there was more
/// (what was read up to the limit is returned). A body that came in one
/// piece (the usual call and answer) is that piece, not a copy. The server
/// reads calls with it too.
pub async fn read_at_most(
    body: &mut Incoming,
    limit: usize,
) -> Result<(Bytes, bool), hyper::Error> {
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame?.into_data() else {
            continue; // trailers
        };
        let so_far = first.as_ref().map_or(0, Bytes::len) + rest.len();
        let over = so_far + chunk.len() > limit;
        let chunk = if over {
            chunk.slice(..limit - so_far)
        } else {
            chunk
        };
        if first.is_none() && rest.is_empty() {
            first = Some(chunk);
        } else {
            if let Some(f) = first.take() {
                rest.extend_from_slice(&f);
            }
            rest.extend_from_slice(&chunk);
        }
        if over {
            return Ok((first.unwrap_or_else(|| Bytes::from(rest)), true));
        }
    }
    Ok((first.unwrap_or_else(|| Bytes::from(rest)), false))
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e;
    while let Some(next) = cur.source() {
        let s = next.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = next;
    }
    parts.join(": ")
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
        let e = endpoint("http://127.0.0.1:9876/tools/w?x=1", None);
        assert_eq!(e.path.as_str(), "/tools/w?x=1");
        assert_eq!(e.host, "127.0.0.1:9876");
        assert_eq!(e.pool_key, "tcp:127.0.0.1:9876");
        assert!(matches!(&e.connect, Connect::Tcp { host, port: 9876 } if host == "127.0.0.1"));

        let e = endpoint("http://[::1]/", None);
        assert_eq!(e.host, "[::1]");
        assert!(matches!(&e.connect, Connect::Tcp { host, port: 80 } if host == "::1"));

        let e = endpoint("http://localhost/w", Some("/run/p.sock"));
        assert_eq!(e.pool_key, "unix:/run/p.sock");
        assert_eq!(e.target, "http://localhost/w (unix socket /run/p.sock)");
        assert!(matches!(&e.connect, Connect::Unix(p) if p == &PathBuf::from("/run/p.sock")));
    }

    /// A plain HTTP/1.1 server counting its connections; with `close`, it
    /// closes each connection after one answer, without saying so first.
    async fn counting_server(close: bool) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
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
                    let mut chunk = [0u8; 4096];
                    loop {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        // Every test request is `{}`: the head, then 2 bytes.
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        if buf.len() < end + 4 + 2 {
                            continue;
                        }
                        buf.drain(..end + 6);
                        let body = r#"{"output":1,"is_error":false}"#;
                        let head =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                        s.write_all(format!("{head}{body}").as_bytes())
                            .await
                            .unwrap();
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        (url, count)
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

    #[test]
    fn the_request_carries_host_and_content_type() {
        let e = endpoint("http://localhost:8080/w", None);
        let req = e.request(Bytes::from_static(b"{}"));
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri(), "/w");
        assert_eq!(req.headers()[HOST], "localhost:8080");
        assert_eq!(req.headers()[CONTENT_TYPE], "application/json");
    }
}
