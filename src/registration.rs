//! The registration state of every desired tool (`ToolState`, with its
//! times in `ToolRegistration`) and main_server's reachability
//! (`Reachability`), in one place: for the logs, for the operator's view
//! (`/status`, `/metrics`, the systemd `STATUS=` line) and for tests that
//! wait for convergence.
//!
//! The engine is the only writer; anyone may read a `snapshot()` or wait on
//! `wait_until`. The store logs each state change once, when it happens, so
//! the logs say what changed and never repeat a steady state every poll. It
//! never decides anything and never talks to main_server.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::client::FieldError;

/// How often a still-unreachable main_server is mentioned again.
pub(crate) const UNREACHABLE_REMINDER: Duration = Duration::from_secs(60);

/// Where one tool stands.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolState {
    /// Wanted, not yet confirmed by a GET (first start, change, re-register).
    Pending,
    /// Listed with our source and URL, and the server holds our latest schema.
    Registered,
    /// Someone else holds the name (`owner` is their source).
    Conflict {
        owner: String,
        callback_url: Option<String>,
        /// Their source is ours: a second agent configured like this one.
        same_source: bool,
    },
    /// main_server refused it (422); not retried until the manifest changes.
    Rejected { errors: Vec<FieldError> },
    /// Its role is not listed by main_server (`None`: no role at all).
    WaitingForRole { role: Option<String> },
    /// A transient failure; the next try is scheduled.
    Retrying {
        last_error: String,
        attempt: u32,
        next_attempt_at: SystemTime,
    },
}

impl ToolState {
    /// States that need nothing more from us until the world changes.
    pub(crate) fn is_settled(&self) -> bool {
        !matches!(self, ToolState::Pending | ToolState::Retrying { .. })
    }

    /// The state's name: `pending`, `registered`, `conflict`, `rejected`,
    /// `waiting_for_role` or `retrying`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ToolState::Pending => "pending",
            ToolState::Registered => "registered",
            ToolState::Conflict { .. } => "conflict",
            ToolState::Rejected { .. } => "rejected",
            ToolState::WaitingForRole { .. } => "waiting_for_role",
            ToolState::Retrying { .. } => "retrying",
        }
    }

    /// Equal for logging purposes: a new retry attempt of the same failure
    /// is not a new state worth a line.
    fn same_for_log(&self, other: &ToolState) -> bool {
        match (self, other) {
            (ToolState::Retrying { .. }, ToolState::Retrying { .. }) => true,
            (a, b) => a == b,
        }
    }
}

impl std::fmt::Display for ToolState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

/// One tool's registration: its state and since when.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRegistration {
    pub state: ToolState,
    /// When the tool entered this state.
    pub since: SystemTime,
    /// When a GET last confirmed it registered by us (this process).
    pub last_registered: Option<SystemTime>,
}

/// main_server's reachability, as the engine last saw it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reachability {
    /// `None` until the first GET finished.
    pub reachable: Option<bool>,
    /// The last failed GET's error, kept after recovery for diagnosis.
    pub last_error: Option<String>,
    /// Consecutive failed GETs (0 while reachable).
    pub failed_attempts: u32,
    /// When the last GET succeeded.
    pub last_contact: Option<SystemTime>,
    /// While unreachable: when the next GET is due.
    pub next_attempt_at: Option<SystemTime>,
}

/// How register requests ended, counted since start (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegistrationCounts {
    /// main_server answered 200 (the next GET still judges the effect).
    pub accepted: u64,
    /// 422: main_server refused the body.
    pub rejected: u64,
    /// 404: the tool's role vanished between the GET and the register.
    pub unknown_role: u64,
    /// Anything transient: refused, timed out, 409, 5xx.
    pub failed: u64,
}

/// How one register request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RegistrationOutcome {
    Accepted,
    Rejected,
    UnknownRole,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct RegistrationSnapshot {
    pub tools: BTreeMap<String, ToolRegistration>,
    pub main_server: Reachability,
    /// Reconcile passes completed (a GET that answered, then its plan carried out).
    pub passes: u64,
    /// The last pass sent nothing and every tool is settled.
    pub converged: bool,
    pub registrations: RegistrationCounts,
    /// Registered tools later found missing from main_server's list: a
    /// main_server restart, an eviction, someone's unregister, or a new role
    /// without them. The GET cannot tell these apart (an eviction removes
    /// every tool of our host:port, just as a restart does).
    pub tools_lost: u64,
    /// Passes that found at least one registered tool missing: each one is
    /// a restart, an eviction or an outside removal, however many tools
    /// it took.
    pub loss_events: u64,
    /// When the last such pass was: what an operator reads as "main_server
    /// restarted (or evicted us) at".
    pub last_loss_at: Option<SystemTime>,
}

impl RegistrationSnapshot {
    pub fn state(&self, name: &str) -> Option<&ToolState> {
        self.tools.get(name).map(|t| &t.state)
    }

    /// Every tool is `Registered`.
    pub fn all_registered(&self) -> bool {
        self.tools
            .values()
            .all(|t| t.state == ToolState::Registered)
    }
}

#[derive(Debug, Default)]
struct Inner {
    snap: RegistrationSnapshot,
    /// When main_server was first seen down in the current outage.
    down_since: Option<Instant>,
    last_reminder: Option<Instant>,
    /// Registered tools found missing during the current pass.
    lost_this_pass: u64,
}

/// The shared store; hand out `Arc<RegistrationStore>`.
#[derive(Debug, Default)]
pub struct RegistrationStore {
    inner: Mutex<Inner>,
    /// Bumped on every published change; waiters re-check on it.
    changes: watch::Sender<u64>,
}

impl RegistrationStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; reading
        // it is still better than failing every reader.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn snapshot(&self) -> RegistrationSnapshot {
        self.lock().snap.clone()
    }

    /// A receiver that changes whenever the snapshot does.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Waits until `pred` holds for a snapshot, re-checking at every change.
    /// Returns the last snapshot as `Err` when `timeout` passes first.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&RegistrationSnapshot) -> bool,
    ) -> Result<RegistrationSnapshot, RegistrationSnapshot> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.subscribe();
        loop {
            rx.mark_unchanged();
            let snap = self.snapshot();
            if pred(&snap) {
                return Ok(snap);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                // The sender lives in `self`: it cannot close while we are
                // borrowed, but a closed channel must not spin.
                Ok(Err(_)) | Err(_) => {
                    let snap = self.snapshot();
                    return if pred(&snap) { Ok(snap) } else { Err(snap) };
                }
            }
        }
    }

    fn publish(&self) {
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Sets a tool's state, logging the change once.
    pub(crate) fn set_tool(&self, name: &str, state: ToolState) {
        let now = SystemTime::now();
        let mut inner = self.lock();
        let prev = inner.snap.tools.get(name).cloned();
        if let Some(p) = &prev
            && p.state == state
        {
            return;
        }
        if prev.as_ref().is_none_or(|p| !p.state.same_for_log(&state)) {
            log_change(name, prev.as_ref().map(|p| &p.state), &state);
        }
        let last_registered = match state {
            ToolState::Registered => Some(now),
            _ => prev.as_ref().and_then(|p| p.last_registered),
        };
        let since = match &prev {
            Some(p) if p.state.kind() == state.kind() => p.since,
            _ => now,
        };
        inner.snap.tools.insert(
            name.to_string(),
            ToolRegistration {
                state,
                since,
                last_registered,
            },
        );
    }

    /// Makes sure a newly desired tool is listed (as pending) and forgets
    /// tools no longer desired.
    pub(crate) fn track<'a>(&self, names: impl IntoIterator<Item = &'a String>) {
        let now = SystemTime::now();
        let mut inner = self.lock();
        let mut keep = BTreeMap::new();
        for name in names {
            let tool = inner.snap.tools.remove(name).unwrap_or(ToolRegistration {
                state: ToolState::Pending,
                since: now,
                last_registered: None,
            });
            keep.insert(name.clone(), tool);
        }
        for gone in inner.snap.tools.keys() {
            tracing::info!(tool = %gone, "tool is no longer desired");
        }
        inner.snap.tools = keep;
    }

    /// A GET answered.
    pub(crate) fn main_server_ok(&self) {
        let mut inner = self.lock();
        match inner.snap.main_server.reachable {
            Some(false) => {
                let down_for = inner.down_since.map(|t| t.elapsed()).unwrap_or_default();
                tracing::info!(
                    failed_attempts = inner.snap.main_server.failed_attempts,
                    down_for = ?down_for,
                    "main_server is reachable again"
                );
            }
            None => tracing::info!("main_server is reachable"),
            Some(true) => {}
        }
        let ms = &mut inner.snap.main_server;
        ms.reachable = Some(true);
        ms.failed_attempts = 0;
        ms.last_contact = Some(SystemTime::now());
        ms.next_attempt_at = None;
        inner.down_since = None;
        inner.last_reminder = None;
        drop(inner);
        self.publish();
    }

    /// A GET failed: one warning at the start of an outage, then a reminder
    /// with the count every `UNREACHABLE_REMINDER`, never a line per retry.
    pub(crate) fn main_server_failed(&self, error: &str, retry_in: Duration) {
        let now = Instant::now();
        let mut inner = self.lock();
        let first = inner.snap.main_server.reachable != Some(false);
        let ms = &mut inner.snap.main_server;
        ms.reachable = Some(false);
        ms.failed_attempts = ms.failed_attempts.saturating_add(1);
        ms.last_error = Some(error.to_string());
        ms.next_attempt_at = Some(SystemTime::now() + retry_in);
        let attempts = ms.failed_attempts;
        if first {
            inner.down_since = Some(now);
            inner.last_reminder = Some(now);
            tracing::warn!(%error, retry_in = ?retry_in, "cannot read main_server's tool list; retrying with backoff until it answers");
        } else if inner
            .last_reminder
            .is_none_or(|t| now.duration_since(t) >= UNREACHABLE_REMINDER)
        {
            inner.last_reminder = Some(now);
            let down_for = inner
                .down_since
                .map(|t| now.duration_since(t))
                .unwrap_or_default();
            tracing::warn!(%error, failed_attempts = attempts, down_for = ?down_for, "main_server is still unreachable; still retrying");
        } else {
            tracing::debug!(%error, failed_attempts = attempts, retry_in = ?retry_in, "main_server still unreachable");
        }
        drop(inner);
        self.publish();
    }

    /// Counts how a register request ended; published with the pass.
    pub(crate) fn count_registration(&self, outcome: RegistrationOutcome) {
        let mut inner = self.lock();
        let c = &mut inner.snap.registrations;
        let n = match outcome {
            RegistrationOutcome::Accepted => &mut c.accepted,
            RegistrationOutcome::Rejected => &mut c.rejected,
            RegistrationOutcome::UnknownRole => &mut c.unknown_role,
            RegistrationOutcome::Failed => &mut c.failed,
        };
        *n = n.saturating_add(1);
    }

    /// The GET does not list a tool where it should be. Counted as lost
    /// only when it was registered; call before its state is changed.
    pub(crate) fn tool_missing(&self, name: &str) {
        let mut inner = self.lock();
        if inner.snap.state(name) == Some(&ToolState::Registered) {
            inner.snap.tools_lost = inner.snap.tools_lost.saturating_add(1);
            inner.lost_this_pass += 1;
        }
    }

    /// A pass is done; publish everything it set.
    pub(crate) fn pass_done(&self, converged: bool) {
        let mut inner = self.lock();
        let lost = std::mem::take(&mut inner.lost_this_pass);
        if lost > 0 {
            inner.snap.loss_events = inner.snap.loss_events.saturating_add(1);
            inner.snap.last_loss_at = Some(SystemTime::now());
            // One line per event, not per tool: a restart over 1,000 tools
            // is one thing that happened.
            tracing::info!(
                lost,
                "registered tools are missing from main_server's list (a main_server restart, an eviction or an outside unregister); registering them again"
            );
        }
        inner.snap.passes = inner.snap.passes.wrapping_add(1);
        inner.snap.converged = converged && inner.snap.tools.values().all(|t| t.state.is_settled());
        drop(inner);
        self.publish();
    }
}

fn log_change(name: &str, prev: Option<&ToolState>, state: &ToolState) {
    let from = prev.map_or("new", ToolState::kind);
    match state {
        ToolState::Registered => tracing::info!(tool = %name, from, "tool registered"),
        ToolState::Pending => tracing::debug!(tool = %name, from, "tool pending"),
        ToolState::Conflict {
            owner,
            callback_url,
            same_source,
        } => {
            let what = if *same_source {
                "another agent registers this tool with OUR source from another address: two sidecars share one `source`; give each its own. Not fighting over it"
            } else {
                "tool name is registered by another owner; leaving it alone (conflict_policy decides)"
            };
            // Shown as every URL is (`redact_url`): userinfo and query values out.
            let callback_url = callback_url
                .as_deref()
                .map_or_else(|| "none".to_string(), crate::manifest::remote::redact_url);
            tracing::warn!(tool = %name, owner = %owner, callback_url = %callback_url, "{what}");
        }
        ToolState::Rejected { errors } => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            tracing::warn!(tool = %name, errors = %errors.join("; "), "main_server rejected the tool; not retrying until its manifest changes")
        }
        ToolState::WaitingForRole { role } => tracing::info!(
            tool = %name,
            role = role.as_deref().unwrap_or("(any)"),
            "tool waits for its role to appear in main_server"
        ),
        // Failures are summarised per pass by the engine: a burst of 500s
        // over 1,000 tools must not print 1,000 lines.
        ToolState::Retrying {
            last_error,
            attempt,
            ..
        } => {
            tracing::debug!(tool = %name, attempt, error = %last_error, "tool registration will be retried")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_moves_only_when_the_kind_changes() {
        let s = RegistrationStore::new();
        s.track([&"t".to_string()]);
        assert_eq!(s.snapshot().state("t"), Some(&ToolState::Pending));
        let retry = |attempt| ToolState::Retrying {
            last_error: "e".into(),
            attempt,
            next_attempt_at: SystemTime::UNIX_EPOCH,
        };
        s.set_tool("t", retry(1));
        let since = s.snapshot().tools["t"].since;
        s.set_tool("t", retry(2));
        let snap = s.snapshot();
        assert_eq!(snap.tools["t"].since, since);
        assert!(matches!(
            snap.state("t"),
            Some(ToolState::Retrying { attempt: 2, .. })
        ));
        assert_eq!(snap.tools["t"].last_registered, None);
        s.set_tool("t", ToolState::Registered);
        assert!(s.snapshot().tools["t"].last_registered.is_some());
        s.set_tool("t", ToolState::Pending);
        assert!(s.snapshot().tools["t"].last_registered.is_some());
    }

    #[test]
    fn track_adds_pending_and_forgets_the_undesired() {
        let s = RegistrationStore::new();
        s.track([&"a".to_string(), &"b".to_string()]);
        s.set_tool("a", ToolState::Registered);
        s.track([&"a".to_string(), &"c".to_string()]);
        let snap = s.snapshot();
        assert_eq!(snap.tools.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(snap.state("a"), Some(&ToolState::Registered));
        assert_eq!(snap.state("c"), Some(&ToolState::Pending));
    }

    #[test]
    fn reachability_counts_failures_and_resets() {
        let s = RegistrationStore::new();
        s.main_server_failed("refused", Duration::from_millis(1));
        s.main_server_failed("refused", Duration::from_millis(1));
        let ms = s.snapshot().main_server;
        assert_eq!(ms.reachable, Some(false));
        assert_eq!(ms.failed_attempts, 2);
        s.main_server_ok();
        let ms = s.snapshot().main_server;
        assert_eq!(ms.reachable, Some(true));
        assert_eq!(ms.failed_attempts, 0);
        assert_eq!(ms.last_error.as_deref(), Some("refused"));
    }

    #[test]
    fn converged_needs_every_tool_settled() {
        let s = RegistrationStore::new();
        s.track([&"a".to_string()]);
        s.pass_done(true);
        assert!(!s.snapshot().converged);
        s.set_tool("a", ToolState::WaitingForRole { role: None });
        s.pass_done(true);
        assert!(s.snapshot().converged);
        s.pass_done(false);
        assert!(!s.snapshot().converged);
    }

    #[test]
    fn losses_count_registered_tools_and_one_event_per_pass() {
        let s = RegistrationStore::new();
        s.track([&"a".to_string(), &"b".to_string(), &"c".to_string()]);
        s.set_tool("a", ToolState::Registered);
        s.set_tool("b", ToolState::Registered);
        // `c` was never registered: missing is not a loss.
        for name in ["a", "b", "c"] {
            s.tool_missing(name);
            s.set_tool(name, ToolState::Pending);
        }
        s.pass_done(false);
        s.tool_missing("a");
        s.pass_done(false);
        let snap = s.snapshot();
        assert_eq!((snap.tools_lost, snap.loss_events), (2, 1));
    }

    #[test]
    fn registrations_are_counted_by_outcome() {
        let s = RegistrationStore::new();
        s.count_registration(RegistrationOutcome::Accepted);
        s.count_registration(RegistrationOutcome::Accepted);
        s.count_registration(RegistrationOutcome::Failed);
        let c = s.snapshot().registrations;
        assert_eq!(
            (c.accepted, c.rejected, c.unknown_role, c.failed),
            (2, 0, 0, 1)
        );
    }

    #[tokio::test]
    async fn wait_until_wakes_on_a_change_and_times_out_otherwise() {
        let s = std::sync::Arc::new(RegistrationStore::new());
        let s2 = s.clone();
        let waiter = tokio::spawn(async move {
            s2.wait_until(Duration::from_secs(10), |snap| snap.passes >= 1)
                .await
        });
        s.pass_done(true);
        assert_eq!(waiter.await.unwrap().unwrap().passes, 1);
        let r = s
            .wait_until(Duration::from_millis(20), |snap| snap.passes >= 5)
            .await;
        assert_eq!(r.unwrap_err().passes, 1);
    }
}
