//! The legacy HTTP+SSE transport of MCP (protocol 2024-11-05, "Transports",
//! "HTTP with SSE") as an rmcp client transport, which rmcp 3.11 no longer
//! has: a GET opens an event stream whose first event, `endpoint`, names
//! where to POST; every message to the server is a POST there, every
//! message from it a `message` event on the stream.
//!
//! The events are parsed by `sse-stream` and the messages are rmcp's types
//! through serde: nothing here frames either. The first `send` (the
//! handshake's) opens the stream and waits for its `endpoint`, so that the
//! whole connection is inside the handshake's budget and its stop; the
//! stream is then read by `receive`, which rmcp polls for as long as the
//! session lives.
//!
//! One transport is one connection. When the stream ends or breaks,
//! `receive` ends, the session sees its server close the session and starts
//! it again with the registration backoff: a new GET, a new endpoint, a new
//! handshake, since a 2024-11-05 server forgets a session with its stream.
//! It never reconnects by itself, never follows an endpoint to another
//! origin (the messages, and the headers with their secrets, would go to a
//! host nobody configured), and never writes a URL's path or query, or a
//! header value, into an error or a log line: API keys travel there.
//!
//! A `401` to the GET or a POST hands its `WWW-Authenticate` challenge to
//! the server's sign-in (`oauth`), as the Streamable HTTP client does, so
//! that discovery starts from the challenge's `resource_metadata` and
//! `scope` (RFC 9728, 5.1), not from the well-known URIs.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, WWW_AUTHENTICATE};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::{Sse, SseStream};
use tokio::sync::OnceCell;

use super::oauth::ServerAuth;

/// The media type of an event stream.
const EVENT_STREAM: &str = "text/event-stream";
/// The most one event may take (rmcp's own bound on Streamable HTTP): a
/// server that streams without ever ending an event must not take the
/// sidecar's memory.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// Of the body of an answer to a POST, this much is read: the start of an
/// error's reason, and enough for the "Accepted" of a success, whose
/// connection then goes back to the pool.
const BODY_READ: usize = 64 * 1024;
/// Of an error's body, this much is quoted in its reason.
const BODY_QUOTED: usize = 200;

/// The event stream, as `sse-stream` parses it.
type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// Why the transport failed, in words an operator can act on; never a URL's
/// path or query, never a header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseError {
    #[error("the GET for the event stream failed: {0}")]
    Get(String),
    #[error("the GET for the event stream was answered HTTP {0}")]
    GetStatus(String),
    #[error(
        "the GET was answered with {0:?}, not an event stream (text/event-stream): the URL is not the SSE endpoint of a server of the HTTP+SSE transport (such URLs often end in /sse)"
    )]
    NotEventStream(String),
    #[error(
        "the event stream ended before its `endpoint` event, which MCP 2024-11-05 requires first: the URL is not the SSE endpoint of a server of the HTTP+SSE transport, or the server failed"
    )]
    EndedWithoutEndpoint,
    #[error(
        "the event stream sent no `endpoint` event in {0}, which MCP 2024-11-05 requires first: the URL is not the SSE endpoint of a server of the HTTP+SSE transport, or the server is stuck"
    )]
    NoEndpointInTime(String),
    #[error("the event stream broke before its `endpoint` event: {0}")]
    BrokeBeforeEndpoint(String),
    #[error("the `endpoint` event does not name a URL: {0}")]
    BadEndpoint(String),
    #[error(
        "the `endpoint` event names a URL of another origin ({endpoint}) than the event stream's ({stream}): refused, since the messages and their headers would go to a server nobody configured"
    )]
    OffOrigin { endpoint: String, stream: String },
    #[error("the POST of a message failed: {0}")]
    Post(String),
    #[error("the POST of a message was answered HTTP {status}: {body}")]
    PostStatus { status: String, body: String },
}

/// The client side of one HTTP+SSE connection.
pub(crate) struct SseTransport {
    shared: Arc<Shared>,
    /// The stream `receive` reads, taken from `Shared::opened` at its
    /// first call; `None` again once it ended.
    events: Option<Events>,
}

/// What the sends, which rmcp runs concurrently, and `receive` share.
struct Shared {
    /// For logs.
    server: String,
    http: reqwest::Client,
    url: Url,
    /// The configured headers, sent with the GET and every POST.
    headers: HeaderMap,
    /// How long the stream may take to name its endpoint.
    endpoint_wait: Duration,
    /// Where messages go, or why there is nowhere: set once, by the first
    /// send or receive, and final for this connection.
    endpoint: OnceCell<Result<Url, SseError>>,
    /// The stream, from its opening to `receive`'s first call.
    opened: Mutex<Option<Events>>,
    /// Bytes read since the last event (see `MAX_EVENT_BYTES`).
    since_event: Arc<AtomicUsize>,
    /// The server's sign-in, told each `401`'s challenge.
    auth: Option<Arc<ServerAuth>>,
}

impl SseTransport {
    /// A connection to the server `server` whose event stream is at `url`,
    /// made with `http` and sending `headers`; nothing is sent before the
    /// first message. `endpoint_wait` bounds the wait for the `endpoint`
    /// event; `auth`, the server's sign-in, is told the challenge of a
    /// `401`.
    pub(crate) fn new(
        server: &str,
        http: reqwest::Client,
        url: &str,
        headers: HeaderMap,
        endpoint_wait: Duration,
        auth: Option<Arc<ServerAuth>>,
    ) -> Result<Self, String> {
        let url = Url::parse(url).map_err(|e| format!("the URL is not a URL: {e}"))?;
        Ok(Self {
            shared: Arc::new(Shared {
                server: server.to_string(),
                http,
                url,
                headers,
                endpoint_wait,
                endpoint: OnceCell::new(),
                opened: Mutex::new(None),
                since_event: Arc::new(AtomicUsize::new(0)),
                auth,
            }),
            events: None,
        })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "HTTP+SSE".into()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            let endpoint = shared.endpoint().await?;
            let response = shared
                .http
                .post(endpoint)
                .headers(shared.headers.clone())
                .json(&item)
                .send()
                .await
                .map_err(|e| SseError::Post(reason(e)))?;
            shared.challenged(&response);
            let status = response.status();
            // Read, so that the connection can serve the next POST.
            let body = read_some(response, BODY_READ).await;
            if status.is_success() {
                Ok(())
            } else {
                Err(SseError::PostStatus {
                    status: status.to_string(),
                    body: quoted(&body),
                })
            }
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        if self.events.is_none() {
            self.shared.endpoint().await.ok()?;
            self.events = Some(lock(&self.shared.opened).take()?);
        }
        let events = self.events.as_mut()?;
        loop {
            match events.next().await {
                Some(Ok(sse)) => {
                    self.shared.since_event.store(0, Ordering::Relaxed);
                    match sse.event.as_deref() {
                        // An event without a type is a `message` (the SSE
                        // standard's default).
                        None | Some("message") => {
                            let Some(data) = sse.data else { continue };
                            match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                                Ok(message) => return Some(message),
                                Err(e) => tracing::warn!(
                                    mcp_server = %self.shared.server,
                                    "a message on the event stream is not a JSON-RPC message ({e}): skipped"
                                ),
                            }
                        }
                        Some("endpoint") => tracing::debug!(
                            mcp_server = %self.shared.server,
                            "a second `endpoint` event: the first is kept"
                        ),
                        Some(other) => tracing::debug!(
                            mcp_server = %self.shared.server,
                            event = other,
                            "an event of another type on the event stream: skipped"
                        ),
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(mcp_server = %self.shared.server, "the event stream broke: {e}");
                    self.events = None;
                    return None;
                }
                None => {
                    tracing::info!(mcp_server = %self.shared.server, "the event stream ended");
                    self.events = None;
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), SseError> {
        // Dropping the stream closes its connection: the server's sign
        // that the session is over.
        self.events = None;
        lock(&self.shared.opened).take();
        Ok(())
    }
}

impl Shared {
    /// Hands a `401`'s `WWW-Authenticate` to the sign-in, which starts its
    /// discovery from it (an absent header is an empty challenge: the
    /// well-known URIs then).
    fn challenged(&self, response: &reqwest::Response) {
        if response.status() != StatusCode::UNAUTHORIZED {
            return;
        }
        if let Some(auth) = &self.auth {
            let header = response
                .headers()
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect::<Vec<_>>()
                .join(", ");
            auth.challenged(&header);
        }
    }

    /// Where to POST: the stream is opened by the first caller, the
    /// others wait for it.
    async fn endpoint(&self) -> Result<Url, SseError> {
        self.endpoint.get_or_init(|| self.open()).await.clone()
    }

    /// Opens the event stream and reads it up to its `endpoint` event,
    /// keeping the rest for `receive`.
    async fn open(&self) -> Result<Url, SseError> {
        let response = self
            .http
            .get(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, EVENT_STREAM)
            .send()
            .await
            .map_err(|e| SseError::Get(reason(e)))?;
        self.challenged(&response);
        let status = response.status();
        if !status.is_success() {
            return Err(SseError::GetStatus(status.to_string()));
        }
        let media = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        if !is_event_stream(&media) {
            return Err(SseError::NotEventStream(media));
        }
        let since = self.since_event.clone();
        let body = response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(|e| BodyError::Read(reason(e)))?;
            let read = since.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len();
            if read > MAX_EVENT_BYTES {
                Err(BodyError::TooLarge)
            } else {
                Ok(chunk)
            }
        });
        let mut events: Events = Box::pin(SseStream::from_bytes_stream(body));
        let endpoint = tokio::time::timeout(self.endpoint_wait, self.first_endpoint(&mut events))
            .await
            .map_err(|_| SseError::NoEndpointInTime(seconds(self.endpoint_wait)))??;
        tracing::debug!(mcp_server = %self.server, "the event stream is open");
        *lock(&self.opened) = Some(events);
        Ok(endpoint)
    }

    async fn first_endpoint(&self, events: &mut Events) -> Result<Url, SseError> {
        loop {
            match events.next().await {
                Some(Ok(sse)) => {
                    self.since_event.store(0, Ordering::Relaxed);
                    if sse.event.as_deref() == Some("endpoint") {
                        return endpoint_of(&self.url, sse.data.as_deref().unwrap_or(""));
                    }
                    tracing::debug!(
                        mcp_server = %self.server,
                        event = sse.event.as_deref().unwrap_or("message"),
                        "an event before `endpoint` on the event stream: skipped"
                    );
                }
                Some(Err(e)) => return Err(SseError::BrokeBeforeEndpoint(e.to_string())),
                None => return Err(SseError::EndedWithoutEndpoint),
            }
        }
    }
}

/// The URL an `endpoint` event's `data` names, resolved against the event
/// stream's URL `stream` as the standard resolves a reference (a path, or
/// a whole URL); only one of `stream`'s origin is taken.
fn endpoint_of(stream: &Url, data: &str) -> Result<Url, SseError> {
    let data = data.trim();
    if data.is_empty() {
        return Err(SseError::BadEndpoint("its data is empty".into()));
    }
    let url = stream
        .join(data)
        .map_err(|e| SseError::BadEndpoint(e.to_string()))?;
    if url.origin() != stream.origin() {
        return Err(SseError::OffOrigin {
            endpoint: url.origin().ascii_serialization(),
            stream: stream.origin().ascii_serialization(),
        });
    }
    Ok(url)
}

/// Whether a `Content-Type` is `text/event-stream` (parameters and case
/// aside).
fn is_event_stream(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case(EVENT_STREAM))
}

/// Why the event stream's body could not be read on.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("{0}")]
    Read(String),
    #[error("an event passed {MAX_EVENT_BYTES} bytes")]
    TooLarge,
}

/// A reqwest error with its causes, never its URL (its query may hold a
/// key).
fn reason(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Up to `limit` bytes of a response's body.
async fn read_some(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(limit);
    body
}

/// The start of a body, as text on one line.
fn quoted(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    // One line, and a byte that is no text shown as its escape: the body
    // is the server's to choose, and the reason reaches the log and status.
    let one_line: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if one_line.is_empty() {
        return "(no body)".to_string();
    }
    match one_line.char_indices().nth(BODY_QUOTED) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

/// "20 s", "1.5 s".
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn an_endpoint_is_resolved_against_the_stream_url_as_a_reference() {
        let stream = url("http://127.0.0.1:8000/sse?key=k");
        // The Python SDK's shape: a path with the session in the query.
        assert_eq!(
            endpoint_of(&stream, "/messages/?session_id=ab12").unwrap(),
            url("http://127.0.0.1:8000/messages/?session_id=ab12")
        );
        // Relative to the stream's folder, and whole URLs of its origin.
        assert_eq!(
            endpoint_of(&url("http://h:1/mcp/sse"), "message?s=1").unwrap(),
            url("http://h:1/mcp/message?s=1")
        );
        assert_eq!(
            endpoint_of(&stream, " http://127.0.0.1:8000/m \n").unwrap(),
            url("http://127.0.0.1:8000/m")
        );
        // The default port is the same origin, spelt or not.
        assert_eq!(
            endpoint_of(&url("http://h/sse"), "http://h:80/m").unwrap(),
            url("http://h/m")
        );
    }

    #[test]
    fn an_endpoint_of_another_origin_is_refused_naming_both_origins_only() {
        let stream = url("http://127.0.0.1:8000/sse?key=secret");
        for other in [
            "http://example.com/messages?session_id=1",
            "http://127.0.0.1:8001/messages",
            "https://127.0.0.1:8000/messages",
            "http://localhost:8000/messages",
            "//evil.example/messages",
        ] {
            let e = endpoint_of(&stream, other).unwrap_err();
            assert!(matches!(e, SseError::OffOrigin { .. }), "{other}: {e}");
            let text = e.to_string();
            assert!(text.contains("http://127.0.0.1:8000)"), "{text}");
            assert!(
                !text.contains("secret") && !text.contains("/messages"),
                "{text}"
            );
        }
    }

    #[test]
    fn an_empty_or_unreadable_endpoint_is_refused() {
        let stream = url("http://127.0.0.1:8000/sse");
        assert!(matches!(
            endpoint_of(&stream, "  "),
            Err(SseError::BadEndpoint(_))
        ));
        assert!(matches!(
            endpoint_of(&stream, "http://[::1"),
            Err(SseError::BadEndpoint(_))
        ));
    }

    #[test]
    fn an_event_stream_is_known_by_its_media_type_whatever_its_parameters() {
        assert!(is_event_stream("text/event-stream"));
        assert!(is_event_stream("Text/Event-Stream; charset=utf-8"));
        assert!(!is_event_stream("application/json"));
        assert!(!is_event_stream(""));
    }

    #[test]
    fn a_quoted_body_is_one_short_line() {
        assert_eq!(quoted(b"Method\r\nNot  Allowed\n"), "Method Not Allowed");
        assert_eq!(quoted(b""), "(no body)");
        assert_eq!(
            quoted(b"bad\x00\x1b[2J\xff"),
            "bad\\u{0}\\u{1b}[2J\u{fffd}",
            "bytes that are no text are shown escaped"
        );
        let long = "x".repeat(500);
        assert_eq!(quoted(long.as_bytes()).chars().count(), BODY_QUOTED + 1);
    }
}
