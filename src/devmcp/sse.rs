//! The stand-in over the legacy HTTP+SSE transport (MCP 2024-11-05), which
//! rmcp 3.11 no longer serves: `GET /sse` opens a session's event stream,
//! whose first event, `endpoint`, names `/messages?session_id=ID`; each
//! POST there is one message of that session (answered 202), and each
//! message of the server is a `message` event on the stream. A POST to
//! `/sse` is 405, as with the Python SDK, which is what sends a client of
//! Streamable HTTP to this transport.
//!
//! rmcp runs each session over a pair of channels; the events are written
//! by `sse-stream` and the messages are rmcp's types through serde: nothing
//! here frames either. For tests it misbehaves as some servers do when
//! asked: no `endpoint` event, or one of another origin ([`SseEndpoint`]);
//! and [`DevMcp::cut_streams`] ends every open stream while the server
//! stays up, as a dropped connection does.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::RoleServer;
use rmcp::ServiceExt as _;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use sse_stream::{Sse, SseBody};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{DevMcp, DevMcpError, HTTP_DRAIN};

/// Where the event stream is served.
pub const SSE_PATH: &str = "/sse";
/// Where a session's messages are POSTed (`?session_id=ID`).
const MESSAGES_PATH: &str = "/messages";

/// Messages queued for one session, each way, before the sender waits.
const QUEUE: usize = 64;

/// What the `endpoint` event says, for tests of clients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SseEndpoint {
    /// `/messages?session_id=ID`, a path of the stream's origin (as the
    /// Python SDK sends it).
    #[default]
    Relative,
    /// No `endpoint` event: the stream stays open, silent.
    Missing,
    /// A URL on another origin (`http://example.invalid/...`), which a
    /// client must not follow.
    OtherOrigin,
}

/// The state of the routes.
struct Served {
    server: DevMcp,
    endpoint: SseEndpoint,
    /// Each session's way in, by its id.
    sessions: Mutex<HashMap<String, mpsc::Sender<ClientJsonRpcMessage>>>,
    shutdown: CancellationToken,
}

impl DevMcp {
    /// Serves the HTTP+SSE transport at [`SSE_PATH`] on `listener` until
    /// `shutdown` is cancelled, with the `endpoint` event `endpoint` says;
    /// the listener is closed when this returns.
    pub async fn serve_sse(
        self,
        listener: TcpListener,
        endpoint: SseEndpoint,
        shutdown: CancellationToken,
    ) -> Result<(), DevMcpError> {
        if !self.start_slowly(&shutdown).await {
            return Ok(());
        }
        let served = Arc::new(Served {
            server: self,
            endpoint,
            sessions: Mutex::new(HashMap::new()),
            shutdown: shutdown.clone(),
        });
        let router = axum::Router::new()
            .route(SSE_PATH, axum::routing::get(open_stream))
            .route(MESSAGES_PATH, axum::routing::post(take_message))
            .with_state(served);
        let serve = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned());
        tokio::select! {
            served = serve => served.map_err(DevMcpError::Http),
            () = async {
                shutdown.cancelled().await;
                tokio::time::sleep(HTTP_DRAIN).await;
            } => Ok(()),
        }
    }
}

/// `GET /sse`: a new session, served by rmcp until its stream is dropped
/// (the client left), cut, or the server shuts down.
async fn open_stream(State(served): State<Arc<Served>>) -> Response {
    let id = format!("{:016x}", fastrand::u64(..));
    let (to_server, from_client) = mpsc::channel(QUEUE);
    let (to_client, outgoing) = mpsc::channel(QUEUE);
    lock(&served.sessions).insert(id.clone(), to_server);
    let session = served.shutdown.child_token();
    let transport = Channels {
        to_client,
        from_client,
    };
    let server = served.server.clone();
    let ct = session.clone();
    tokio::spawn(async move {
        match server.serve_with_ct(transport, ct).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::debug!("dev-mcp: an SSE session did not start: {e}"),
        }
    });

    let first = match served.endpoint {
        SseEndpoint::Relative => Some(format!("{MESSAGES_PATH}?session_id={id}")),
        SseEndpoint::OtherOrigin => Some(format!(
            "http://example.invalid{MESSAGES_PATH}?session_id={id}"
        )),
        SseEndpoint::Missing => None,
    }
    .map(|url| Sse::default().event("endpoint").data(url));
    let mut cut = served.server.streams_cut();
    cut.mark_unchanged();
    let stream = Stream {
        first,
        outgoing,
        cut,
        ended: Ended {
            served: served.clone(),
            id,
            session,
        },
    };
    let events = futures_util::stream::unfold(stream, |mut st| async move {
        if let Some(event) = st.first.take() {
            return Some((Ok::<_, Infallible>(event), st));
        }
        let message = tokio::select! {
            m = st.outgoing.recv() => m,
            _ = st.cut.changed() => None,
            () = st.ended.session.cancelled() => None,
        }?;
        // rmcp's messages always serialise; one that did not would end
        // the stream, as a broken connection does.
        let data = serde_json::to_string(&message).ok()?;
        Some((Ok(Sse::default().event("message").data(data)), st))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::new(SseBody::new(events)))
        .unwrap_or_else(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot answer: {e}"),
            )
                .into_response()
        })
}

/// One event stream's state: the `endpoint` event still to send, the
/// session's messages, the test's cut, and the session it ends when dropped.
struct Stream {
    first: Option<Sse>,
    outgoing: mpsc::Receiver<ServerJsonRpcMessage>,
    cut: watch::Receiver<u64>,
    ended: Ended,
}

/// `POST /messages?session_id=ID`: one message of that session.
async fn take_message(
    State(served): State<Arc<Served>>,
    Query(q): Query<SessionQuery>,
    body: Bytes,
) -> Response {
    let Some(session) = lock(&served.sessions).get(&q.session_id).cloned() else {
        return (StatusCode::NOT_FOUND, "no such session").into_response();
    };
    let message: ClientJsonRpcMessage = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("not a JSON-RPC message: {e}"),
            )
                .into_response();
        }
    };
    let is_reply = matches!(
        message,
        rmcp::model::JsonRpcMessage::Response(_) | rmcp::model::JsonRpcMessage::Error(_)
    );
    if is_reply
        && matches!(
            served.server.options().fault,
            Some(super::Fault::PingFlood | super::Fault::PingFloodStream)
        )
    {
        // A server that stalls the client's replies: the POST is held
        // until the server shuts down or the client goes away.
        served.shutdown.cancelled().await;
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    if session.send(message).await.is_err() {
        return (StatusCode::NOT_FOUND, "the session has ended").into_response();
    }
    (StatusCode::ACCEPTED, "Accepted").into_response()
}

#[derive(Deserialize)]
struct SessionQuery {
    session_id: String,
}

/// Ends a session when its stream is dropped.
struct Ended {
    served: Arc<Served>,
    id: String,
    session: CancellationToken,
}

impl Drop for Ended {
    fn drop(&mut self) {
        lock(&self.served.sessions).remove(&self.id);
        self.session.cancel();
    }
}

/// A session's side of rmcp: what it sends goes out as events, what it
/// receives came in by POST.
struct Channels {
    to_client: mpsc::Sender<ServerJsonRpcMessage>,
    from_client: mpsc::Receiver<ClientJsonRpcMessage>,
}

impl Transport<RoleServer> for Channels {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let to_client = self.to_client.clone();
        async move {
            to_client.send(item).await.map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the event stream is closed")
            })
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.from_client.recv()
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.from_client.close();
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
