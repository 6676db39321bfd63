//! The limits a call runs under: who may call, how long a call may take, and
//! how many calls of one tool may run at once.
//!
//! The peer rule and the deadline rule are pure functions; the concurrency
//! slot is a thin wrapper over a semaphore. Nothing here answers a call.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::contract::is_loopback_ip;

/// Only loopback peers may call: main_server itself only accepts loopback
/// callback URLs, so anything else reaching the listener is not main_server.
pub(crate) fn peer_allowed(peer: SocketAddr) -> bool {
    is_loopback_ip(peer.ip())
}

/// The most the sidecar keeps back from main_server's timeout.
const MAX_MARGIN: Duration = Duration::from_secs(1);

/// How long the sidecar gives a call: the tool's `timeout_seconds` less a
/// margin of min(1 s, 10 % of it), so the sidecar's own clear message reaches
/// main_server before main_server's HTTP timeout turns the call into a bare
/// ReadTimeout. 30 s gives 29 s; 5 s gives 4.5 s; 2 s gives 1.8 s.
pub(crate) fn call_budget(timeout: Duration) -> Duration {
    let margin = (timeout / 10).min(MAX_MARGIN);
    timeout.saturating_sub(margin)
}

/// A duration as the model reads it: "29 s", "1.8 s", "0.45 s".
pub(crate) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    let text = format!("{s:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

/// The concurrency bound of one tool; shared across reloads while the tool's
/// `max_concurrency` stays the same.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    limit: Option<NonZeroUsize>,
    semaphore: Option<Arc<Semaphore>>,
}

/// A held slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct Slot(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Slots {
    pub(crate) fn new(limit: Option<NonZeroUsize>) -> Self {
        Self {
            limit,
            semaphore: limit.map(|n| Arc::new(Semaphore::new(n.get()))),
        }
    }

    pub(crate) fn limit(&self) -> Option<NonZeroUsize> {
        self.limit
    }

    /// A slot if one is free now (always, without a limit).
    pub(crate) fn try_acquire(&self) -> Option<Slot> {
        match &self.semaphore {
            None => Some(Slot(None)),
            Some(sem) => sem.clone().try_acquire_owned().ok().map(|p| Slot(Some(p))),
        }
    }

    /// Waits for a slot until `deadline`; `None` when none freed in time.
    pub(crate) async fn acquire(&self, deadline: Instant) -> Option<Slot> {
        let Some(sem) = &self.semaphore else {
            return Some(Slot(None));
        };
        match tokio::time::timeout_at(deadline, sem.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Some(Slot(Some(permit))),
            // The semaphore is never closed; treat it like no slot.
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_a_margin_of_a_tenth_up_to_a_second() {
        let s = Duration::from_secs_f64;
        assert_eq!(call_budget(s(30.0)), s(29.0));
        assert_eq!(call_budget(s(300.0)), s(299.0));
        assert_eq!(call_budget(s(10.0)), s(9.0));
        assert_eq!(call_budget(s(5.0)), s(4.5));
        assert_eq!(call_budget(s(2.0)), s(1.8));
        assert!(call_budget(s(0.1)) < s(0.1));
    }

    #[test]
    fn seconds_read_naturally() {
        assert_eq!(seconds(Duration::from_secs(29)), "29 s");
        assert_eq!(seconds(Duration::from_millis(1800)), "1.8 s");
        assert_eq!(seconds(Duration::from_millis(450)), "0.45 s");
    }

    #[tokio::test]
    async fn a_full_tool_gives_no_slot_before_the_deadline() {
        let slots = Slots::new(NonZeroUsize::new(1));
        let first = slots.acquire(Instant::now()).await;
        assert!(first.is_some());
        assert!(
            slots
                .acquire(Instant::now() + Duration::from_millis(20))
                .await
                .is_none()
        );
        drop(first);
        assert!(slots.acquire(Instant::now()).await.is_some());
        let unbounded = Slots::new(None);
        let _a = unbounded.acquire(Instant::now()).await.unwrap();
        assert!(unbounded.acquire(Instant::now()).await.is_some());
    }
}
