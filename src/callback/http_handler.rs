//! The http handler: POST the callback body, untouched, to the plugin's
//! endpoint over loopback TCP or a unix socket, and read its answer within
//! `max_output_bytes`.
//!
//! The client is reqwest (hyper underneath), pooled and kept alive: one
//! client for every TCP endpoint and one per unix socket (reqwest binds a
//! client to one socket), made when a reload first names it and shared by
//! every tool that names it. Redirects are never followed and no proxy is
//! ever used, so a call cannot leave the machine through the environment's
//! `HTTP_PROXY`. hyper's pool sends a request again only when it was never
//! written (a connection the handler closed while idle), so a POST never
//! runs twice. The deadline is the caller's business (`handler::run`):
//! dropping the call drops its request and closes its connection.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Bytes;
use reqwest::{Client, Url};

use super::handler::HandlerError;
use crate::diag::{root_cause, with_causes};
use crate::manifest::HttpHandler;
use crate::manifest::remote::redact_url;

/// How much of a non-2xx answer is quoted back, as main_server quotes.
const STATUS_BODY_CHARS: usize = 200;
/// Idle pooled connections are closed after this.
const POOL_IDLE: Duration = Duration::from_secs(60);
/// The most idle connections kept per handler address: more than the
/// concurrency a tool sees in practice, far fewer than the descriptor limit.
const MAX_IDLE_PER_ENDPOINT: usize = 256;

/// The pooled clients, shared by every call of one callback server: by
/// unix socket, and `None` for TCP.
#[derive(Debug, Default)]
pub(crate) struct HttpClients(Mutex<HashMap<Option<PathBuf>, Client>>);

impl HttpClients {
    fn client(&self, socket: Option<&Path>) -> Result<Client, String> {
        let mut clients = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = socket.map(Path::to_path_buf);
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let mut builder = crate::tls::plain_http()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(MAX_IDLE_PER_ENDPOINT);
        if let Some(s) = socket {
            builder = crate::os::unix_socket_client(builder, s)?;
        }
        let c = builder.build().map_err(|e| with_causes(&e))?;
        clients.insert(key, c.clone());
        Ok(c)
    }
}

/// Where and how to reach one http handler, worked out once per reload.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// The handler as messages name it (URL, and the socket if any).
    target: String,
    url: Url,
    client: Client,
}

impl Endpoint {
    /// The endpoint of `h`. The manifest loader checked the URL already, so
    /// an error here is a URL it let through; the call reports it.
    pub(crate) fn new(h: &HttpHandler, clients: &HttpClients) -> Result<Self, String> {
        // The URL as every message shows it: a password or query values
        // never reach the model, `/status` or the log.
        let shown = redact_url(&h.url);
        let target = match &h.unix_socket {
            Some(s) => format!("{shown} (unix socket {})", s.display()),
            None => shown,
        };
        let url = Url::parse(&h.url).map_err(|e| format!("{target}: not a URL: {e}"))?;
        if url.scheme() != "http" || !url.has_host() {
            return Err(format!(
                "{target}: only http:// URLs with a host can be called"
            ));
        }
        let client = clients
            .client(h.unix_socket.as_deref())
            .map_err(|e| format!("{target}: cannot set up a client: {e}"))?;
        Ok(Self {
            target,
            url,
            client,
        })
    }
}

/// POSTs `body` to the endpoint and returns the 2xx answer's body.
pub(crate) async fn call(
    endpoint: &Result<Endpoint, String>,
    body: Bytes,
    max_output_bytes: usize,
) -> Result<Vec<u8>, HandlerError> {
    let e = endpoint.as_ref().map_err(|detail| HandlerError::Failed {
        detail: detail.clone(),
    })?;
    let mut resp = e
        .client
        .post(e.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|err| {
            // reqwest's text names the URL whole; `target` says it redacted.
            let err = err.without_url();
            if out_of_descriptors(&err) {
                // The sidecar's own limit, not the plugin: say so, or the
                // operator goes looking for a plugin that is running fine.
                HandlerError::Failed {
                    detail: format!(
                        "the sidecar has no file descriptor left to reach {} ({}): raise its open-files limit (LimitNOFILE)",
                        e.target,
                        with_causes(&err)
                    ),
                }
            } else if err.is_connect() {
                HandlerError::Unreachable {
                    target: e.target.clone(),
                    detail: root_cause(&err),
                }
            } else {
                HandlerError::Failed {
                    detail: format!("{}: {}", e.target, with_causes(&err)),
                }
            }
        })?;
    let status = resp.status();
    if !status.is_success() {
        // Only the start is quoted; a little more is read so a multi-byte
        // character at the cut is not lost.
        let start = read_bounded(&mut resp, STATUS_BODY_CHARS * 4)
            .await
            .map_or_else(|_| Vec::new(), |(b, _)| b);
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
    let too_large = HandlerError::OutputTooLarge {
        limit: max_output_bytes,
    };
    if resp
        .content_length()
        .is_some_and(|n| n > max_output_bytes as u64)
    {
        return Err(too_large);
    }
    match read_bounded(&mut resp, max_output_bytes).await {
        Ok((b, false)) => Ok(b),
        Ok((_, true)) => Err(too_large),
        Err(err) => Err(HandlerError::Failed {
            detail: format!(
                "reading the answer of {}: {}",
                e.target,
                with_causes(&err.without_url())
            ),
        }),
    }
}

/// Reads the body up to `limit` bytes; `true` when there was more.
async fn read_bounded(
    resp: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if out.len() + chunk.len() > limit {
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, false))
}

/// EMFILE/ENFILE anywhere in the error's causes.
fn out_of_descriptors(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(24 | 23)) {
                return true;
            }
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn endpoint(url: &str, socket: Option<&str>) -> Result<Endpoint, String> {
        let h = HttpHandler {
            url: url.into(),
            unix_socket: socket.map(PathBuf::from),
        };
        Endpoint::new(&h, &HttpClients::default())
    }

    #[test]
    fn running_out_of_descriptors_is_told_apart_from_a_plugin_that_is_down() {
        assert!(out_of_descriptors(&std::io::Error::from_raw_os_error(24)));
        assert!(!out_of_descriptors(&std::io::Error::from_raw_os_error(111)));
    }

    #[test]
    fn only_http_urls_with_a_host_are_called() {
        assert!(endpoint("https://127.0.0.1/w", None).is_err());
        assert!(endpoint("file:///tmp/w", None).is_err());
        assert!(endpoint("http://127.0.0.1/a%20b", None).is_ok());
    }

    // Handlers on unix sockets exist on Unix only (`check` refuses them
    // elsewhere, tested in manifest).
    #[cfg(unix)]
    #[test]
    fn messages_name_the_socket() {
        let e = endpoint("http://localhost/w", Some("/run/p.sock")).unwrap();
        assert_eq!(e.target, "http://localhost/w (unix socket /run/p.sock)");
    }

    #[cfg(unix)]
    #[test]
    fn tools_naming_one_socket_share_one_client() {
        let clients = HttpClients::default();
        let h = |s: &str| HttpHandler {
            url: "http://localhost/w".into(),
            unix_socket: Some(PathBuf::from(s)),
        };
        Endpoint::new(&h("/run/a.sock"), &clients).unwrap();
        Endpoint::new(&h("/run/a.sock"), &clients).unwrap();
        Endpoint::new(&h("/run/b.sock"), &clients).unwrap();
        assert_eq!(clients.0.lock().unwrap().len(), 2);
    }

    /// A server answering each request with `reply(body)`, closing the
    /// connection after it when `close`; it counts its connections.
    async fn scripted_server(
        reply: fn(&[u8]) -> Vec<u8>,
        close: bool,
    ) -> (String, Arc<AtomicUsize>) {
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
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
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

    /// Two calls of `body` to a `scripted_server(reply, close)`: the first
    /// one's result, and how many connections the two took.
    async fn two_calls(
        reply: fn(&[u8]) -> Vec<u8>,
        close: bool,
        body: Bytes,
    ) -> (Result<Vec<u8>, HandlerError>, usize) {
        let (url, connections) = scripted_server(reply, close).await;
        let e = endpoint(&url, None);
        let r = call(&e, body.clone(), 1024 * 1024).await;
        let _ = call(&e, body, 1024 * 1024).await;
        (r, connections.load(Ordering::SeqCst))
    }

    fn ok_reply(_: &[u8]) -> Vec<u8> {
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec()
    }

    #[tokio::test]
    async fn a_connection_serves_call_after_call() {
        let (r, connections) = two_calls(ok_reply, false, Bytes::from_static(b"{}")).await;
        assert_eq!(r.unwrap(), b"{}");
        assert_eq!(connections, 1);
    }

    /// The handler closing an idle kept-alive connection is no failure:
    /// the request, not yet sent, goes on a new connection.
    #[tokio::test]
    async fn a_connection_the_handler_closed_meanwhile_is_replaced() {
        let (url, connections) = scripted_server(ok_reply, true).await;
        let e = endpoint(&url, None);
        for i in 0..20 {
            let r = call(&e, Bytes::from_static(b"{}"), 1024).await;
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
        let r = call(&endpoint(&url, None), Bytes::from_static(b"{}"), 1024).await;
        let Err(HandlerError::Unreachable { detail, .. }) = &r else {
            panic!("{r:?}")
        };
        assert!(detail.contains("refused"), "{detail}");
    }

    #[tokio::test]
    async fn a_chunked_answer_is_decoded_and_its_connection_kept() {
        let (r, connections) = two_calls(
            |_| b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n".to_vec(),
            false,
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(r.unwrap(), br#"{"a":1}"#);
        assert_eq!(connections, 1);
    }

    #[tokio::test]
    async fn an_answer_without_a_length_ends_with_its_connection() {
        let (r, connections) = two_calls(
            |_| b"HTTP/1.1 200 OK\r\n\r\n{\"until\":\"close\"}".to_vec(),
            true,
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(r.unwrap(), br#"{"until":"close"}"#);
        assert_eq!(connections, 2, "a connection read to its end is not kept");
    }

    #[tokio::test]
    async fn an_interim_answer_is_skipped() {
        let (r, _) = two_calls(
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
    async fn a_large_body_arrives_whole_and_a_large_answer_is_refused() {
        let mut big = vec![b' '; 300 * 1024];
        *big.last_mut().unwrap() = b'!';
        // The handler answers with the length and the last byte it got.
        let (r, _) = two_calls(
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

        let (url, _) = scripted_server(
            |_| b"HTTP/1.1 200 OK\r\n\r\n[1,2,3,4,5,6,7,8,9]".to_vec(),
            true,
        )
        .await;
        let r = call(&endpoint(&url, None), Bytes::from_static(b"{}"), 8).await;
        assert!(
            matches!(r, Err(HandlerError::OutputTooLarge { limit: 8 })),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn an_answer_cut_short_is_a_failure_that_says_so() {
        let (r, _) = two_calls(
            |_| b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}".to_vec(),
            true,
            Bytes::from_static(b"{}"),
        )
        .await;
        let Err(HandlerError::Failed { detail }) = r else {
            panic!("{r:?}")
        };
        assert!(
            detail.starts_with("reading the answer of http://"),
            "{detail}"
        );
    }

    #[tokio::test]
    async fn a_non_2xx_answer_is_quoted() {
        let (r, _) = two_calls(
            |_| b"HTTP/1.1 503 Busy\r\ncontent-length: 9\r\n\r\n  later  ".to_vec(),
            false,
            Bytes::from_static(b"{}"),
        )
        .await;
        let Err(HandlerError::Status {
            status, body_start, ..
        }) = r
        else {
            panic!("{r:?}")
        };
        assert_eq!((status, body_start.as_str()), (503, "later"));
    }
}
