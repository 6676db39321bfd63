//! The budget of what an MCP server may ask of the sidecar on one session:
//! a transport around every transport (stdio, Streamable HTTP, HTTP+SSE)
//! that bounds the server's own requests (`ping`, `roots/list`, ...) and
//! the sidecar's replies to them.
//!
//! rmcp answers each request a server sends in a task of its own and sends
//! each reply in another, without a bound; a server that sends requests
//! faster than it takes their replies (or never takes them) grew the
//! sidecar without end and took its descriptors (issue 49). Here:
//!
//! - at most [`MAX_OUTSTANDING`] of the server's requests are in hand at
//!   once (received, their reply not yet delivered); past that, a request
//!   is dropped unanswered, and a server that has [`FLOOD_DROPS`] dropped
//!   on one session floods: the session is ended and started again;
//! - a reply has [`REPLY_TIMEOUT`] to be delivered; one that is not is
//!   given up, and [`UNDELIVERED_IN_A_ROW`] given up in a row mean the
//!   session cannot deliver its replies: it is ended (so not `ready`) and
//!   started again;
//! - a reply that failed is counted here, not handed back to rmcp, which
//!   would log each one.
//!
//! Why the session ended is kept ([`Guard::reason`]) for its status.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::Notify;

/// The server's requests in hand at once on one session.
pub(crate) const MAX_OUTSTANDING: usize = 32;
/// Requests dropped over [`MAX_OUTSTANDING`] on one session before the
/// server is taken as flooding and its session started again.
pub(crate) const FLOOD_DROPS: u64 = 100;
/// How long one reply may take to be delivered.
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Replies not delivered in a row before the session is ended.
pub(crate) const UNDELIVERED_IN_A_ROW: u32 = 8;

/// One session's budget, shared by its transport and the session.
#[derive(Debug)]
pub(crate) struct Guard {
    state: Mutex<State>,
    tripped: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// The server's requests received whose reply is not delivered yet.
    outstanding: HashSet<RequestId>,
    dropped: u64,
    undelivered_in_a_row: u32,
    /// Why the session must end, once it must.
    reason: Option<String>,
}

impl Guard {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            tripped: Notify::new(),
        })
    }

    /// Why the session must end, if it must.
    pub(crate) fn reason(&self) -> Option<String> {
        self.lock().reason.clone()
    }

    /// Resolves once the session must end.
    pub(crate) async fn tripped(&self) {
        loop {
            let notified = self.tripped.notified();
            if self.lock().reason.is_some() {
                return;
            }
            notified.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn trip(&self, state: &mut State, why: String) {
        if state.reason.is_none() {
            state.reason = Some(why);
            self.tripped.notify_waiters();
        }
    }

    /// Whether a request of the server's with `id` may be handed on.
    fn admit(&self, id: &RequestId) -> bool {
        let mut state = self.lock();
        if state.reason.is_some() {
            return false;
        }
        if state.outstanding.len() < MAX_OUTSTANDING {
            state.outstanding.insert(id.clone());
            return true;
        }
        state.dropped += 1;
        if state.dropped >= FLOOD_DROPS {
            let why = format!(
                "the server sent requests faster than the sidecar answers them (more than {MAX_OUTSTANDING} at a time; {} dropped unanswered): it floods, so its session was ended",
                state.dropped
            );
            self.trip(&mut state, why);
        }
        false
    }

    /// A reply to `id` was delivered (`Ok`) or given up (`Err`, why).
    fn replied(&self, id: &RequestId, outcome: Result<(), String>) {
        let mut state = self.lock();
        state.outstanding.remove(id);
        match outcome {
            Ok(()) => state.undelivered_in_a_row = 0,
            Err(why) => {
                state.undelivered_in_a_row += 1;
                if state.undelivered_in_a_row >= UNDELIVERED_IN_A_ROW {
                    let why = format!(
                        "the server does not take the sidecar's replies to its requests ({} in a row not delivered, the last: {why}), so its session was ended",
                        state.undelivered_in_a_row
                    );
                    self.trip(&mut state, why);
                }
            }
        }
    }

    /// The count of requests dropped so far (for tests and the log).
    #[cfg(test)]
    fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

/// A transport whose server's requests and replies keep to a [`Guard`].
pub(crate) struct Guarded<T> {
    inner: T,
    guard: Arc<Guard>,
}

impl<T> Guarded<T> {
    pub(crate) fn new(inner: T, guard: Arc<Guard>) -> Self {
        Self { inner, guard }
    }
}

/// The id a reply answers, if `item` is a reply.
fn reply_id(item: &ClientJsonRpcMessage) -> Option<RequestId> {
    match item {
        JsonRpcMessage::Response(r) => Some(r.id.clone()),
        JsonRpcMessage::Error(e) => e.id.clone(),
        _ => None,
    }
}

impl<T> Transport<RoleClient> for Guarded<T>
where
    T: Transport<RoleClient> + 'static,
{
    type Error = T::Error;

    /// Named in rmcp's errors ("Transport [NAME] error: ..."), which reach
    /// the status: a transport's own name when it has one in words
    /// ("HTTP+SSE"), never a Rust type name, which is rmcp's default.
    fn name() -> Cow<'static, str> {
        let name = T::name();
        if name.contains("::") || name.contains('<') {
            "connection".into()
        } else {
            name
        }
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), T::Error>> + Send + 'static {
        let id = reply_id(&item);
        let guard = self.guard.clone();
        let send = self.inner.send(item);
        async move {
            let Some(id) = id else {
                return send.await;
            };
            let outcome = match tokio::time::timeout(REPLY_TIMEOUT, send).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("not taken within {} s", REPLY_TIMEOUT.as_secs())),
            };
            // Counted here: handed back to rmcp, each failed reply would
            // be a log line of its own.
            guard.replied(&id, outcome);
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let message = tokio::select! {
                biased;
                () = self.guard.tripped() => return None,
                m = self.inner.receive() => m?,
            };
            if let JsonRpcMessage::Request(r) = &message {
                if !self.guard.admit(&r.id) {
                    if self.guard.reason().is_some() {
                        return None;
                    }
                    continue;
                }
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), T::Error> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    #[test]
    fn requests_past_the_bound_are_dropped_and_a_flood_ends_the_session() {
        let g = Guard::new();
        for n in 0..MAX_OUTSTANDING as i64 {
            assert!(g.admit(&id(n)));
        }
        assert!(!g.admit(&id(1000)), "one over the bound is dropped");
        assert_eq!(
            g.reason(),
            None,
            "a burst just over the bound is not a flood"
        );
        // A reply delivered frees its place.
        g.replied(&id(0), Ok(()));
        assert!(g.admit(&id(1001)));
        for n in 0..FLOOD_DROPS as i64 {
            g.admit(&id(2000 + n));
        }
        assert_eq!(g.dropped(), FLOOD_DROPS);
        let why = g.reason().expect("a flood ends the session");
        assert!(why.starts_with("the server sent requests faster than the sidecar answers them (more than 32 at a time; 100 dropped unanswered)"), "{why}");
        assert!(!g.admit(&id(5000)), "nothing more once tripped");
    }

    /// A transport with rmcp's default name (its Rust type name).
    struct Unnamed;

    impl Transport<RoleClient> for Unnamed {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _item: ClientJsonRpcMessage,
        ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
            None
        }

        async fn close(&mut self) -> Result<(), std::io::Error> {
            Ok(())
        }
    }

    #[test]
    fn a_transport_is_named_in_words_never_by_its_rust_type() {
        assert!(<Unnamed as Transport<RoleClient>>::name().contains("::"));
        assert_eq!(
            <Guarded<Unnamed> as Transport<RoleClient>>::name(),
            "connection"
        );
        assert_eq!(
            <Guarded<crate::mcp::sse::SseTransport> as Transport<RoleClient>>::name(),
            "HTTP+SSE"
        );
    }

    #[test]
    fn replies_not_delivered_in_a_row_end_the_session_and_one_delivered_resets_the_count() {
        let g = Guard::new();
        for n in 0..20 {
            assert!(g.admit(&id(n)));
        }
        for n in 0..i64::from(UNDELIVERED_IN_A_ROW) - 1 {
            g.replied(&id(n), Err("not taken within 10 s".into()));
        }
        g.replied(&id(10), Ok(()));
        assert_eq!(g.reason(), None);
        for n in 11..11 + i64::from(UNDELIVERED_IN_A_ROW) {
            g.replied(&id(n), Err("HTTP 500".into()));
        }
        assert_eq!(
            g.reason().as_deref(),
            Some(
                "the server does not take the sidecar's replies to its requests (8 in a row not delivered, the last: HTTP 500), so its session was ended"
            )
        );
    }
}
