//! The handshake with one MCP server: which protocol generation to try
//! first, how long to wait for it, what to try when the server turns out to
//! be older, and what is remembered for its next start.
//!
//! rmcp's `ClientLifecycleMode::Auto` gives `server/discover` a fixed 10 s
//! and then sends `initialize` on the same connection; a server that answers
//! its first message later than that answers the abandoned discover, and
//! rmcp takes that answer for the answer to `initialize` and fails, at every
//! start. So the session never uses `Auto`: it sends `server/discover`
//! (`Discover` mode) with the whole budget, and when the server answers as
//! a server of 2025-11-25 and earlier (a JSON-RPC error that is not one of
//! 2026-07-28's own refusals), it opens a fresh connection (a new process,
//! a new HTTP session) and sends `initialize` there (`Initialize` mode),
//! with a whole budget again. Nothing that was abandoned can answer on the
//! new connection.
//!
//! What was learnt ([`Generation`]) is kept by the session for the
//! server's later starts and forgotten with its table, so a known older
//! server gets `initialize` at once: a restart costs one start of the
//! server, never two. A server never heard from that answers nothing to
//! `server/discover` within the budget (or closes the connection without
//! answering: some older servers drop or die on a method they do not know)
//! is started afresh for `initialize` too, and keeps getting `initialize`
//! first if that works; if `initialize` gets no answer either, the next
//! start begins with `server/discover` again.
//!
//! Over Streamable HTTP, a POST of the handshake answered with an HTTP 4xx
//! status ends the handshake at once ([`Handshake::HttpClientError`]): for
//! a URL whose transport was not given, that is the MCP specification's
//! sign to try the legacy HTTP+SSE transport instead (2025-03-26 and later,
//! "Transports", "Backwards Compatibility": "Attempt to POST an
//! InitializeRequest to the server URL [...] If it fails with an HTTP 4xx
//! status code (e.g., 405 Method Not Allowed or 404 Not Found): Issue a GET
//! request to the server URL, expecting that this will open an SSE
//! stream"). A 4xx to `server/discover` does not end it: rmcp reads one as
//! a server of 2025-11-25 and earlier (the Python SDK answers 400 to a
//! request outside a session), so `initialize` is POSTed next, and a 4xx to
//! that one is the spec's sign.
//!
//! Nothing here starts a process or knows a URL: the caller opens and
//! closes connections.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ErrorCode, ProtocolVersion};
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use rmcp::transport::{DynamicTransportError, IntoTransport};
use rmcp::{ClientHandler, RoleClient};
use tokio_util::sync::CancellationToken;

use super::guard::{Guard, Guarded};

/// What the session knows of the protocol generation its server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Generation {
    /// Nothing yet: `server/discover` first.
    #[default]
    Unknown,
    /// `server/discover` got no answer at all: `initialize` next.
    SilentToDiscover,
    /// Answered `server/discover` (2026-07-28 and later).
    Current,
    /// Said it does not know `server/discover`, or answered `initialize`.
    Older,
}

/// The handshake one connection is opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Try {
    Discover,
    Initialize,
}

/// How one try ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Connected,
    /// `server/discover` answered as a server of 2025-11-25 and earlier.
    OlderAnswer,
    /// An answer that refused the handshake (a JSON-RPC error to
    /// `initialize`, a 2026-07-28 refusal, no common version).
    Refused,
    /// No answer within the budget, or the connection closed before one.
    NoAnswer,
    /// The transport failed (the message could not be sent, HTTP refused).
    Broken,
    /// A POST of the handshake was answered with an HTTP 4xx status
    /// (Streamable HTTP only).
    HttpClientError,
}

impl Generation {
    /// The handshake a start begins with.
    pub(crate) fn first_try(self) -> Try {
        match self {
            Self::Unknown | Self::Current => Try::Discover,
            Self::SilentToDiscover | Self::Older => Try::Initialize,
        }
    }

    /// What is known after `tried` ended with `outcome`.
    pub(crate) fn after(self, tried: Try, outcome: Outcome) -> Self {
        match (tried, outcome) {
            (Try::Discover, Outcome::Connected) => Self::Current,
            (Try::Initialize, Outcome::Connected) => Self::Older,
            (Try::Discover, Outcome::OlderAnswer) => Self::Older,
            // Silence from a server never heard: perhaps an older one that
            // ignores what it does not know.
            (Try::Discover, Outcome::NoAnswer) if self == Self::Unknown => Self::SilentToDiscover,
            // The guess was wrong, or the server changed (a newer package
            // that refuses `initialize`): ask it afresh.
            (Try::Initialize, Outcome::NoAnswer) if self == Self::SilentToDiscover => Self::Unknown,
            (Try::Initialize, Outcome::Refused) => Self::Unknown,
            // A known server that is slow, down or refusing stays known.
            _ => self,
        }
    }
}

impl Try {
    fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Self::Discover => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            Self::Initialize => ClientLifecycleMode::Initialize,
        }
    }

    fn method(self) -> &'static str {
        match self {
            Self::Discover => "server/discover",
            Self::Initialize => "initialize",
        }
    }
}

/// What a failed try says of the server.
fn classify(tried: Try, error: &ClientInitializeError) -> Outcome {
    match error {
        // 2026-07-28's own refusals come from a current server; any other
        // error answer to discover is how an older server says it does not
        // know the method (-32601, or -32602 from the Python SDK). This is
        // rmcp's own reading of such an answer in `Auto` mode.
        ClientInitializeError::JsonRpcError(e)
            if tried == Try::Discover
                && !matches!(
                    e.code,
                    ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY | ErrorCode::HEADER_MISMATCH
                ) =>
        {
            Outcome::OlderAnswer
        }
        ClientInitializeError::ConnectionClosed(_) => Outcome::NoAnswer,
        ClientInitializeError::TransportError { error, .. } if http_client_error(error) => {
            Outcome::HttpClientError
        }
        ClientInitializeError::TransportError { .. } => Outcome::Broken,
        _ => Outcome::Refused,
    }
}

/// Whether a transport error is a Streamable HTTP POST answered with an
/// HTTP 4xx status. rmcp keeps such a status only in the text of
/// `UnexpectedServerResponse` ("HTTP 405 Method Not Allowed: …") for one
/// without a JSON-RPC error in its body (with one, it is an answer), as
/// `AuthRequired`/`InsufficientScope` for a 401/403 with a challenge, and
/// as `HttpStatus` for a 429. Pinned by the tests of the SSE fallback
/// against rmcp itself.
fn http_client_error(error: &DynamicTransportError) -> bool {
    match error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        Some(StreamableHttpError::UnexpectedServerResponse(text)) => text
            .strip_prefix("HTTP ")
            .and_then(|t| t.get(..3))
            .and_then(|code| code.parse::<u16>().ok())
            .is_some_and(|code| (400..500).contains(&code)),
        Some(StreamableHttpError::HttpStatus(s)) => (400..500).contains(&s.status),
        Some(StreamableHttpError::AuthRequired(_) | StreamableHttpError::InsufficientScope(_)) => {
            true
        }
        _ => false,
    }
}

/// How a handshake ended.
pub(crate) enum Handshake<H: ClientHandler, C> {
    /// Connected, on the connection `conn` opened for it.
    Ready {
        running: RunningService<RoleClient, H>,
        conn: C,
    },
    /// Why not, in words; the connections opened were closed.
    Failed(String),
    /// A POST was answered with an HTTP 4xx status (see the module's
    /// comment), in words; the connections opened were closed.
    HttpClientError(String),
    /// `stop` came first; the connection in hand was closed.
    Stopped,
}

/// The handshake with the server named `server`: each try on a connection of its own from
/// `open` (a transport, and what `close` needs to end it), each with
/// `budget`, until connected, refused, out of time, or `stop`; every
/// transport wrapped to keep to `guard`. `known` is
/// what the session knows of the server, updated with what was learnt;
/// `close` returns how the connection ended, for the error ("" if
/// nothing is worth saying).
#[allow(clippy::too_many_arguments)] // reason: one try's inputs, each named where it is called
pub(crate) async fn handshake<H, C, T, E, A, Open, OpenFut, Close, CloseFut>(
    server: &str,
    known: &mut Generation,
    budget: Duration,
    stop: &CancellationToken,
    guard: &Arc<Guard>,
    handler: impl Fn() -> H,
    mut open: Open,
    mut close: Close,
) -> Handshake<H, C>
where
    H: ClientHandler,
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
    Open: FnMut() -> OpenFut,
    OpenFut: Future<Output = Result<(T, C), String>>,
    Close: FnMut(C) -> CloseFut,
    CloseFut: Future<Output = String>,
{
    let at_start = *known;
    let mut tried = known.first_try();
    let mut earlier: Option<String> = None;
    loop {
        let (transport, conn) = match open().await {
            Ok(opened) => opened,
            Err(e) => return Handshake::Failed(with_earlier(earlier, e)),
        };
        // Every transport keeps to the session's budget of the server's
        // requests and the replies to them (`guard`).
        let transport = Guarded::new(transport.into_transport(), guard.clone());
        let attempt = handler().serve_with_lifecycle(transport, tried.lifecycle());
        let answer = tokio::select! {
            () = stop.cancelled() => None,
            answer = tokio::time::timeout(budget, attempt) => Some(answer),
        };
        let (outcome, why) = match answer {
            None => {
                close(conn).await;
                return Handshake::Stopped;
            }
            Some(Ok(Ok(running))) => {
                *known = known.after(tried, Outcome::Connected);
                return Handshake::Ready { running, conn };
            }
            Some(Ok(Err(e))) => (classify(tried, &e), format!("{}: {e}", tried.method())),
            Some(Err(_)) => (
                Outcome::NoAnswer,
                format!("no answer to {} in {}", tried.method(), seconds(budget)),
            ),
        };
        *known = known.after(tried, outcome);
        let how = close(conn).await;
        let why = format!("{why}{how}");
        if outcome == Outcome::HttpClientError {
            return Handshake::HttpClientError(with_earlier(earlier, why));
        }
        if tried == Try::Discover && known.first_try() == Try::Initialize {
            // At once, on a fresh connection (see the module's comment),
            // within this start, so that `check --probe` sees what `run`
            // would make of the server.
            if outcome == Outcome::OlderAnswer {
                tracing::info!(
                    mcp_server = %server,
                    "the MCP server does not know server/discover (it speaks 2025-11-25 or earlier): starting it again for initialize"
                );
            } else {
                tracing::info!(
                    mcp_server = %server,
                    "the MCP server did not answer server/discover ({why}): starting it again for initialize"
                );
            }
            earlier = Some(why);
            tried = Try::Initialize;
            continue;
        }
        let next = match (at_start.first_try() == known.first_try(), known.first_try()) {
            (false, Try::Initialize) => "; the next start tries initialize",
            (false, Try::Discover) => "; the next start tries server/discover",
            (true, _) => "",
        };
        return Handshake::Failed(with_earlier(earlier, format!("{why}{next}")));
    }
}

fn with_earlier(earlier: Option<String>, last: String) -> String {
    match earlier {
        Some(e) => format!("{e}; then {last}"),
        None => last,
    }
}

/// "120 s", "2.5 s".
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests;
