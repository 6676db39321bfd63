//! Call statistics: per tool, how many calls, how each ended, how many run
//! now, and how long they took; plus the requests turned away before any
//! tool was chosen.
//!
//! Plain atomic counters, written on every call and read as snapshots by the
//! operator surface (which renders them as Prometheus metrics). Nothing here
//! decides anything about a call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How a call to a tool ended. The code goes into error envelopes; the
/// label names the outcome in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The handler answered and did not report a failure.
    Ok,
    /// The handler answered with `is_error` true.
    ToolError,
    /// The callback body could not be read as a call.
    BadBody,
    /// The arguments failed the tool's schema; the handler was not run.
    InvalidArguments,
    /// No concurrency slot freed before the deadline.
    TooManyCalls,
    /// The handler did not answer before the deadline.
    Timeout,
    /// An http handler could not be connected to.
    Unreachable,
    /// An http handler answered with a non-2xx status.
    HandlerStatus,
    /// An exec handler exited non-zero or was killed by a signal.
    HandlerExit,
    /// The handler's answer was larger than `max_output_bytes`.
    OutputTooLarge,
    /// An exec handler's program could not be started.
    SpawnFailed,
    /// Any other failure talking to the handler (I/O error, bad response).
    HandlerFailed,
    /// The sidecar was shutting down.
    ShuttingDown,
    /// The call's task ended without an answer (a bug, or the runtime
    /// stopping); counted so it cannot go unnoticed.
    Abandoned,
}

impl Outcome {
    pub const ALL: [Outcome; 14] = [
        Outcome::Ok,
        Outcome::ToolError,
        Outcome::BadBody,
        Outcome::InvalidArguments,
        Outcome::TooManyCalls,
        Outcome::Timeout,
        Outcome::Unreachable,
        Outcome::HandlerStatus,
        Outcome::HandlerExit,
        Outcome::OutputTooLarge,
        Outcome::SpawnFailed,
        Outcome::HandlerFailed,
        Outcome::ShuttingDown,
        Outcome::Abandoned,
    ];

    /// The tag in the `code` of the sidecar's error envelopes.
    pub fn code(self) -> &'static str {
        match self {
            Outcome::Ok => "OK",
            Outcome::ToolError => "TOOL_ERROR",
            Outcome::BadBody => "BAD_CALLBACK_BODY",
            Outcome::InvalidArguments => "INVALID_ARGUMENTS",
            Outcome::TooManyCalls => "TOO_MANY_CALLS",
            Outcome::Timeout => "TOOL_TIMEOUT",
            Outcome::Unreachable => "HANDLER_UNREACHABLE",
            Outcome::HandlerStatus => "HANDLER_HTTP_ERROR",
            Outcome::HandlerExit => "HANDLER_EXIT",
            Outcome::OutputTooLarge => "OUTPUT_TOO_LARGE",
            Outcome::SpawnFailed => "HANDLER_NOT_STARTED",
            Outcome::HandlerFailed => "HANDLER_FAILED",
            Outcome::ShuttingDown => "SIDECAR_SHUTTING_DOWN",
            Outcome::Abandoned => "ABANDONED",
        }
    }

    /// The metric label, lower snake case.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::BadBody => "bad_body",
            Outcome::InvalidArguments => "invalid_arguments",
            Outcome::TooManyCalls => "too_many_calls",
            Outcome::Timeout => "timeout",
            Outcome::Unreachable => "unreachable",
            Outcome::HandlerStatus => "handler_status",
            Outcome::HandlerExit => "handler_exit",
            Outcome::OutputTooLarge => "output_too_large",
            Outcome::SpawnFailed => "spawn_failed",
            Outcome::HandlerFailed => "handler_failed",
            Outcome::ShuttingDown => "shutting_down",
            Outcome::Abandoned => "abandoned",
        }
    }

    fn index(self) -> usize {
        Outcome::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Upper bounds (seconds) of the latency histogram buckets; a last,
/// unbounded bucket follows. Spans a fast local handler to the 300 s cap.
pub(crate) const LATENCY_BOUNDS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

/// The live counters of one tool. Kept across reloads by tool name, so a
/// reload never resets them.
#[derive(Debug, Default)]
pub(crate) struct ToolStats {
    outcomes: [AtomicU64; Outcome::ALL.len()],
    in_flight: AtomicU64,
    /// Per bucket, not cumulative; the last is the unbounded one.
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    latency_sum_micros: AtomicU64,
    /// The last finished call, for the inspector page: a person debugging a
    /// tool asks "what happened when it was last called" before any rate.
    /// One short lock per call, next to a handler that takes milliseconds.
    last: Mutex<Option<LastCall>>,
    /// Images main_server would have refused that the sidecar repaired.
    images_repaired: AtomicU64,
    /// Images the sidecar could not repair and did not send.
    images_refused: AtomicU64,
}

/// How the last finished call of a tool went.
#[derive(Debug, Clone, PartialEq)]
pub struct LastCall {
    /// When it finished (wall clock, shown to people).
    pub at: SystemTime,
    pub took: Duration,
    pub outcome: Outcome,
    /// The envelope's `error` when it failed, cut to [`LAST_ERROR_CHARS`].
    pub error: Option<String>,
}

/// How much of a failed call's error text is kept for the last call.
const LAST_ERROR_CHARS: usize = 500;

/// A call in progress: counted in flight until finished or dropped.
#[derive(Debug)]
pub(crate) struct CallRecord {
    stats: Arc<ToolStats>,
    started: tokio::time::Instant,
    done: bool,
}

impl ToolStats {
    #[cfg(test)]
    pub(crate) fn begin(self: &Arc<Self>) -> CallRecord {
        self.begin_at(tokio::time::Instant::now())
    }

    /// A call that started at `started` (when it arrived: its latency is
    /// the caller's, and the clock was read once for it already).
    pub(crate) fn begin_at(self: &Arc<Self>, started: tokio::time::Instant) -> CallRecord {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        CallRecord {
            stats: self.clone(),
            started,
            done: false,
        }
    }

    fn record(&self, outcome: Outcome, elapsed: Duration, error: Option<&str>) {
        let last = LastCall {
            at: SystemTime::now(),
            took: elapsed,
            outcome,
            error: error.map(|e| e.chars().take(LAST_ERROR_CHARS).collect()),
        };
        // A panic while holding the lock leaves plain data behind.
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(last);
        self.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.latency_sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts what the image check did to one answer.
    pub(crate) fn count_images(&self, repaired: usize, refused: usize) {
        self.images_repaired
            .fetch_add(repaired as u64, Ordering::Relaxed);
        self.images_refused
            .fetch_add(refused as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ToolStatsSnapshot {
        let outcomes: Vec<(Outcome, u64)> = Outcome::ALL
            .iter()
            .map(|o| (*o, self.outcomes[o.index()].load(Ordering::Relaxed)))
            .collect();
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        ToolStatsSnapshot {
            calls: outcomes.iter().map(|(_, n)| n).sum(),
            outcomes,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            latency_buckets: buckets,
            latency_sum: Duration::from_micros(self.latency_sum_micros.load(Ordering::Relaxed)),
            last: self.last.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            images_repaired: self.images_repaired.load(Ordering::Relaxed),
            images_refused: self.images_refused.load(Ordering::Relaxed),
        }
    }
}

impl CallRecord {
    /// Records how the call ended, how long it took and, for a failure,
    /// the error the envelope carries.
    pub(crate) fn finish(mut self, outcome: Outcome, error: Option<&str>) {
        self.done = true;
        self.stats.record(outcome, self.started.elapsed(), error);
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        if !self.done {
            self.stats
                .record(Outcome::Abandoned, self.started.elapsed(), None);
        }
    }
}

/// One tool's counters at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolStatsSnapshot {
    /// Finished calls, every outcome.
    pub calls: u64,
    /// Finished calls by outcome, every outcome listed (zeros included).
    pub outcomes: Vec<(Outcome, u64)>,
    pub in_flight: u64,
    /// Calls per latency bucket (bounds in `LATENCY_BOUNDS`, then +Inf),
    /// not cumulative.
    pub latency_buckets: Vec<u64>,
    pub latency_sum: Duration,
    /// The last finished call; `None` before the first.
    pub last: Option<LastCall>,
    /// Images repaired so that main_server takes them.
    pub images_repaired: u64,
    /// Images not sent: main_server would refuse them and they could not
    /// be repaired.
    pub images_refused: u64,
}

impl ToolStatsSnapshot {
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.outcomes
            .iter()
            .find(|(o, _)| *o == outcome)
            .map_or(0, |(_, n)| *n)
    }

    /// Calls that did not end `Ok`.
    pub(crate) fn failures(&self) -> u64 {
        self.calls - self.count(Outcome::Ok)
    }
}

/// Requests turned away before a tool was chosen.
#[derive(Debug, Default)]
pub(crate) struct Rejections {
    pub forbidden_peer: AtomicU64,
    pub body_too_large: AtomicU64,
    pub unknown_token: AtomicU64,
    pub unknown_tool: AtomicU64,
    pub busy: AtomicU64,
}

/// Snapshot of `Rejections`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RejectionCounts {
    pub forbidden_peer: u64,
    pub body_too_large: u64,
    pub unknown_token: u64,
    pub unknown_tool: u64,
    /// 503 `SIDECAR_BUSY`: no body memory freed within `read_timeout`.
    pub busy: u64,
}

impl Rejections {
    pub(crate) fn count_forbidden(&self) {
        self.forbidden_peer.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_too_large(&self) {
        self.body_too_large.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_unknown_token(&self) {
        self.unknown_token.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_busy(&self) {
        self.busy.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_unknown_tool(&self) {
        self.unknown_tool.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RejectionCounts {
        RejectionCounts {
            forbidden_peer: self.forbidden_peer.load(Ordering::Relaxed),
            body_too_large: self.body_too_large.load(Ordering::Relaxed),
            unknown_token: self.unknown_token.load(Ordering::Relaxed),
            unknown_tool: self.unknown_tool.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_outcome_and_latency() {
        let s = Arc::new(ToolStats::default());
        let a = s.begin();
        let b = s.begin();
        assert_eq!(s.snapshot().in_flight, 2);
        a.finish(Outcome::Ok, None);
        b.finish(Outcome::Timeout, Some("too slow"));
        let last = s.snapshot().last.unwrap();
        assert_eq!(last.outcome, Outcome::Timeout);
        assert_eq!(last.error.as_deref(), Some("too slow"));
        drop(s.begin());
        let snap = s.snapshot();
        assert_eq!(snap.in_flight, 0);
        assert_eq!(snap.calls, 3);
        assert_eq!(snap.count(Outcome::Ok), 1);
        assert_eq!(snap.count(Outcome::Timeout), 1);
        assert_eq!(snap.count(Outcome::Abandoned), 1);
        assert_eq!(snap.failures(), 2);
        assert_eq!(snap.latency_buckets.iter().sum::<u64>(), 3);
        assert_eq!(snap.last.unwrap().outcome, Outcome::Abandoned);
    }

    #[test]
    fn codes_and_labels_are_distinct() {
        let mut codes: Vec<_> = Outcome::ALL.iter().map(|o| o.code()).collect();
        let mut labels: Vec<_> = Outcome::ALL.iter().map(|o| o.label()).collect();
        codes.sort();
        codes.dedup();
        labels.sort();
        labels.dedup();
        assert_eq!(codes.len(), Outcome::ALL.len());
        assert_eq!(labels.len(), Outcome::ALL.len());
    }
}
