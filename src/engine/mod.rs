//! The registration engine: the loop that keeps main_server's tool registry
//! in line with the desired state, whatever main_server does (restarts that
//! forget everything, evictions, storage-startup 409s, 5xx, slow answers).
//!
//! Level-triggered, like Consul's anti-entropy or a Kubernetes controller:
//! every trigger (start, a desired-state change, the poll tick, a retry
//! timer) runs the same pass: `GET /api/tools` → `planner::plan` → carry the
//! plan out → wait for the next trigger. Nothing is remembered as "done"
//! from an answer alone; the next GET judges.
//!
//! This module owns the timing (when a pass runs) and the trigger wiring;
//! `pass` owns one pass (memory, registration states, concurrent requests); `clear` owns
//! the shutdown clear. It never decides what to send (the planner does) and
//! never parses HTTP (the client does).

mod clear;
mod pass;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::{BackoffError, BackoffPolicy, Jitter, Retry};
use crate::client::Client;
use crate::config::{AgentConfig, RegistrationConfig};
use crate::desired::DesiredState;
use crate::planner::Memory;
use crate::registration::RegistrationStore;
use crate::systemd::Heartbeat;

pub use clear::{ClearError, ClearMethod, ClearReport, clear_source};

/// Our callback URL for a tool name; provided by the callback server.
pub type UrlFor = Arc<dyn Fn(&str) -> String + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid backoff in [registration] of the agent config: {0}")]
    Backoff(#[from] BackoffError),
}

/// What one pass asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The GET failed: try again after this delay (main_server's backoff).
    Unreachable(Duration),
    /// Requests were sent: GET again at once to judge their effect.
    Confirm,
    /// Nothing sent: wait for the poll tick, or the earliest tool retry.
    Idle { retry_at: Option<Instant> },
}

/// The engine. Owned by one task: `run`, then `clear_all` at shutdown.
pub struct Engine {
    source: String,
    reg: RegistrationConfig,
    client: Client,
    url_for: UrlFor,
    registration: Arc<RegistrationStore>,
    policy: BackoffPolicy,
    jitter: Jitter,
    desired: Arc<DesiredState>,
    /// What this process did and learnt per tool name; the planner's input.
    memory: Memory,
    /// Attempt counters of tools backing off (reset when a GET shows them in sync).
    tool_retries: std::collections::BTreeMap<String, Retry>,
    /// main_server's own backoff: consecutive failed GETs.
    server_retry: Retry,
    /// Strays already warned about, so each is reported once (only those
    /// still listed are kept: see `pass::forget_unlisted`).
    warned_strays: BTreeSet<String>,
    /// The names we unregistered as no longer wanted, oldest first: the
    /// evidence (`ToolMemory::removed_url`) of at most
    /// [`pass::MAX_REMOVED_KEPT`] of them that main_server no longer lists
    /// is kept, so a server that renames its tools without end cannot
    /// grow the engine.
    removed_order: std::collections::VecDeque<String>,
    /// The random unit of the current pass (see `Retry::failed`).
    pass_unit: f64,
    /// Beaten at every loop turn (and at least every `beat_every` while
    /// waiting), so the systemd watchdog pings only while this loop runs.
    heartbeat: Option<(Heartbeat, Duration)>,
}

impl Engine {
    /// Builds an engine; the backoff settings are validated here.
    pub fn new(
        config: &AgentConfig,
        client: Client,
        url_for: UrlFor,
        registration: Arc<RegistrationStore>,
    ) -> Result<Self, EngineError> {
        let reg = config.registration.clone();
        let policy = BackoffPolicy::new(reg.backoff_initial, reg.backoff_max)?;
        Ok(Self {
            source: config.source.clone(),
            reg,
            client,
            url_for,
            registration,
            policy,
            jitter: Jitter::random(),
            desired: Arc::new(DesiredState {
                source: config.source.clone(),
                ..DesiredState::default()
            }),
            memory: Memory::new(),
            tool_retries: Default::default(),
            server_retry: Retry::default(),
            warned_strays: BTreeSet::new(),
            removed_order: Default::default(),
            pass_unit: 1.0,
            heartbeat: None,
        })
    }

    /// Proves this loop alive to the watchdog: a beat at every turn, and at
    /// least every `every` while waiting (a backoff can be longer than the
    /// watchdog's patience).
    pub(crate) fn with_heartbeat(mut self, heartbeat: Heartbeat, every: Duration) -> Self {
        self.heartbeat = Some((heartbeat, every.max(Duration::from_millis(10))));
        self
    }

    fn beat(&self) {
        if let Some((hb, _)) = &self.heartbeat {
            hb.beat();
        }
    }

    /// Replaces the random jitter, e.g. with `Jitter::fixed(1.0)` in tests
    /// that bound request counts by the worst case.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Runs until `shutdown` is cancelled; returns at once when it is, even
    /// in the middle of a pass or a backoff (in-flight requests are dropped).
    pub async fn run(
        &mut self,
        mut desired_rx: watch::Receiver<Arc<DesiredState>>,
        shutdown: CancellationToken,
    ) {
        let first = desired_rx.borrow_and_update().clone();
        self.set_desired(first);
        // A closed channel (the manifest watcher is gone) keeps the last
        // desired state; `changed()` on it would return at once forever.
        let mut desired_open = true;
        loop {
            self.beat();
            let started = Instant::now();
            let next = tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                next = self.pass() => next,
            };
            let wake_at = match next {
                Next::Unreachable(delay) => Instant::now() + delay,
                Next::Confirm => Instant::now(),
                Next::Idle { retry_at } => {
                    let poll = started + self.reg.poll_interval;
                    retry_at.map_or(poll, |r| r.min(poll))
                }
            };
            // While main_server is unreachable a desired-state change waits
            // for the next try: it cannot be carried out before anyway.
            let unreachable = matches!(next, Next::Unreachable(_));
            // Waiting is cut into heartbeat-sized slices when a watchdog
            // listens; a slice that ends early only beats.
            let beat_every = self.heartbeat.as_ref().map(|(_, every)| *every);
            loop {
                let listen = desired_open && !unreachable;
                let slice_end = beat_every.map_or(wake_at, |e| wake_at.min(Instant::now() + e));
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => return,
                    changed = desired_rx.changed(), if listen => {
                        match changed {
                            Ok(()) => {
                                let d = desired_rx.borrow_and_update().clone();
                                self.set_desired(d);
                            }
                            Err(_) => {
                                tracing::debug!("the desired-state channel closed; keeping the last desired state");
                                desired_open = false;
                            }
                        }
                        break;
                    }
                    () = tokio::time::sleep_until(slice_end) => {
                        if slice_end >= wake_at {
                            break;
                        }
                        self.beat();
                    }
                }
            }
        }
    }

    fn set_desired(&mut self, desired: Arc<DesiredState>) {
        if desired.source != self.source {
            // Fingerprints include the source; a state built for another
            // source would never match what we register. Say so loudly.
            tracing::error!(
                desired_source = %desired.source,
                source = %self.source,
                "the desired state was built for another source; its fingerprints will not match"
            );
        }
        self.registration.track(desired.tools.keys());
        for name in desired.tools.keys() {
            if let Some(m) = self.memory.get_mut(name) {
                m.removed_url = None;
            }
        }
        self.desired = desired;
    }

    /// Removes every tool of ours from main_server: one `clear` round trip,
    /// falling back to per-name unregister; bounded by `deadline`.
    pub async fn clear_all(&self, deadline: Duration) -> Result<ClearReport, ClearError> {
        let mut names: BTreeSet<String> = self.desired.tools.keys().cloned().collect();
        names.extend(
            self.memory
                .iter()
                .filter(|(_, m)| m.registered.is_some())
                .map(|(n, _)| n.clone()),
        );
        clear_source(
            &self.client,
            &self.source,
            &names,
            self.reg.max_in_flight,
            deadline,
        )
        .await
    }
}
