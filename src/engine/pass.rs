//! One reconcile pass: GET, plan, record the verdicts, carry out the actions
//! (concurrently, at most `max_in_flight` at once), record the answers.
//!
//! This is where answers turn into memory (what the planner reads next time)
//! and into the registration store. It never decides what to send (the planner does) and
//! never waits for a next pass (the loop in `mod.rs` does).

use std::time::{Instant, SystemTime};

use serde_json::Value as Json;
use tokio::task::JoinSet;

use super::{Engine, Next};

/// Of the names we unregistered that main_server no longer lists, the
/// evidence of this many (the newest) is kept (`Engine::removed_order`):
/// about 600 bytes each, so at most about 2.5 MB.
pub(crate) const MAX_REMOVED_KEPT: usize = 4096;
use crate::client::{CallError, CallErrorKind, Client, Observed, Reply};
use crate::desired::{Fingerprint, register_body};
use crate::planner::{
    self, Action, PlanContext, RegisterReason, Registered, Rejection, UnregisterReason, Verdict,
};
use crate::registration::{RegistrationOutcome, ToolState};

/// One request to carry out, with what is needed to record its answer.
enum Request {
    Register {
        name: String,
        body: Json,
        fingerprint: Fingerprint,
        callback_url: String,
        reclaim: bool,
    },
    Unregister {
        name: String,
        role: Option<String>,
        /// The name is not desired at all (not a leftover copy in one role).
        not_desired: bool,
        /// The listed URL of a name we do not want (see `ToolMemory::removed_url`).
        removed_url: Option<String>,
    },
}

impl Request {
    fn name(&self) -> &str {
        match self {
            Request::Register { name, .. } | Request::Unregister { name, .. } => name,
        }
    }

    async fn send(&self, client: &Client) -> Result<Reply, CallError> {
        match self {
            Request::Register { body, .. } => client.register(body).await,
            Request::Unregister { name, role, .. } => {
                client.unregister(name, role.as_deref()).await
            }
        }
    }
}

impl Engine {
    /// One pass. Cancellation-safe in the sense that matters: dropping it
    /// (shutdown) loses only answers, which the next run's GET re-judges.
    pub(super) async fn pass(&mut self) -> Next {
        // One random unit per pass: tools failing together retry together,
        // so a burst of failures costs one GET per retry round, not one per tool.
        self.pass_unit = self.jitter.unit();
        let observed = match self.client.list().await {
            Ok(o) => o,
            Err(e) => {
                let delay = self.server_retry.failed(&self.policy, self.pass_unit);
                self.registration.main_server_failed(&e.to_string(), delay);
                return Next::Unreachable(delay);
            }
        };
        if self.server_retry.attempt() > 0 {
            // Tool retries scheduled during the outage were failures of the
            // outage, not of the tools: everything may go at once now.
            for m in self.memory.values_mut() {
                m.retry_at = None;
            }
        }
        self.server_retry.reset();

        let now = Instant::now();
        let plan = {
            let url_for = &*self.url_for;
            let ctx = PlanContext {
                source: &self.source,
                url_for,
                policy: self.reg.conflict_policy,
                reclaim_interval: self.reg.reclaim_interval,
                now,
            };
            planner::plan(&self.desired, Some(&observed), &self.memory, &ctx)
        };
        // This GET has judged every accepted action of the last pass.
        for m in self.memory.values_mut() {
            m.awaiting_confirmation = false;
        }

        let mut settled = true;
        for (name, verdict) in &plan.verdicts {
            settled &= self.record_verdict(name, verdict, now);
        }
        // Reachable only once the tools' states say what this GET showed:
        // otherwise a reader (readiness) could see main_server back and every
        // tool still `registered` from before a restart it has not judged.
        self.registration.main_server_ok();
        for name in &plan.unconfirmed_removals {
            settled = false;
            self.failed(
                name,
                "main_server accepted the unregister but still lists the tool".into(),
                now,
            );
        }
        for stray in &plan.strays {
            if self.warned_strays.insert(stray.name.clone()) {
                tracing::warn!(
                    tool = %stray.name,
                    callback_url = stray.callback_url.as_deref().unwrap_or("none"),
                    "a tool we do not declare came back with OUR source after we removed it: another agent uses this sidecar's source; leaving it alone"
                );
            }
        }
        self.forget_unlisted(&observed);

        let requests = self.requests(&plan.actions, &observed);
        let sent = !requests.is_empty();
        if sent {
            self.execute(requests).await;
        }
        self.registration.pass_done(settled && !sent);

        if sent {
            Next::Confirm
        } else {
            Next::Idle {
                retry_at: self
                    .memory
                    .values()
                    .filter_map(|m| m.retry_at)
                    .filter(|&at| at > now)
                    .min()
                    .map(tokio::time::Instant::from_std),
            }
        }
    }

    /// The registration state (and retry bookkeeping) for one verdict; true when settled.
    fn record_verdict(&mut self, name: &str, verdict: &Verdict, now: Instant) -> bool {
        if matches!(
            verdict,
            Verdict::Conflict(_) | Verdict::Rejected | Verdict::WaitingForRole(_)
        ) {
            // Settled for another reason than a failure: a later need to
            // register starts a fresh backoff (and shows as pending).
            self.tool_retries.remove(name);
        }
        match verdict {
            Verdict::InSync => {
                self.tool_retries.remove(name);
                if let Some(m) = self.memory.get_mut(name) {
                    m.retry_at = None;
                }
                self.registration.set_tool(name, ToolState::Registered);
                true
            }
            Verdict::Register(reason) => {
                if matches!(reason, RegisterReason::Missing { .. }) {
                    self.registration.tool_missing(name);
                }
                // A due retry stays `retrying` (with its attempt count) until
                // it succeeds or fails again, instead of flipping to pending.
                if !self.tool_retries.contains_key(name) {
                    self.registration.set_tool(name, ToolState::Pending);
                }
                false
            }
            Verdict::Conflict(c) => {
                self.registration.set_tool(
                    name,
                    ToolState::Conflict {
                        owner: c.owner.clone(),
                        callback_url: c.callback_url.clone(),
                        same_source: c.same_source,
                    },
                );
                true
            }
            Verdict::Rejected => {
                let errors = self
                    .memory
                    .get(name)
                    .and_then(|m| m.rejected.as_ref())
                    .map(|r| r.errors.clone())
                    .unwrap_or_default();
                self.registration
                    .set_tool(name, ToolState::Rejected { errors });
                true
            }
            Verdict::WaitingForRole(role) => {
                self.registration
                    .set_tool(name, ToolState::WaitingForRole { role: role.clone() });
                true
            }
            // The tool's state already says why (retrying, or waiting after a 404).
            Verdict::Retrying => false,
            Verdict::Unconfirmed => {
                self.failed(
                    name,
                    "main_server accepted the registration but its tool list does not show it"
                        .into(),
                    now,
                );
                false
            }
        }
    }

    /// Counts a failure for a tool and schedules its next try.
    fn failed(&mut self, name: &str, error: String, now: Instant) {
        let retry = self.tool_retries.entry(name.to_string()).or_default();
        let delay = retry.failed(&self.policy, self.pass_unit);
        let attempt = retry.attempt();
        self.memory.entry(name.to_string()).or_default().retry_at = Some(now + delay);
        if self.desired.tools.contains_key(name) {
            self.registration.set_tool(
                name,
                ToolState::Retrying {
                    last_error: error,
                    attempt,
                    next_attempt_at: SystemTime::now() + delay,
                },
            );
        } else {
            tracing::debug!(tool = %name, %error, attempt, "removal will be retried");
        }
    }

    /// Drops memory of names neither desired nor listed anywhere, except the
    /// evidence that we removed a name (see `ToolMemory::removed_url`), of
    /// which the newest [`MAX_REMOVED_KEPT`] unlisted are kept.
    fn forget_unlisted(&mut self, observed: &Observed) {
        let listed_names: std::collections::HashSet<&str> = observed
            .tools_by_role
            .values()
            .flatten()
            .map(|t| t.name.as_str())
            .collect();
        let listed = |name: &str| listed_names.contains(name);
        let desired = &self.desired.tools;
        self.memory.retain(|name, m| {
            desired.contains_key(name) || m.removed_url.is_some() || listed(name)
        });
        // The evidence of removals main_server no longer lists, newest
        // kept: an old one is of a name long gone, which another agent
        // taking it would have shown by now.
        let order = std::mem::take(&mut self.removed_order);
        self.removed_order = prune_removed(
            order,
            &mut self.memory,
            |name| !desired.contains_key(name) && !listed(name),
            MAX_REMOVED_KEPT,
        );
        let memory = &self.memory;
        self.tool_retries
            .retain(|name, _| desired.contains_key(name) || memory.contains_key(name));
        self.warned_strays.retain(|name| listed(name));
    }

    /// Turns planned actions into requests with their bodies.
    fn requests(&self, actions: &[Action], observed: &Observed) -> Vec<Request> {
        let mut out = Vec::with_capacity(actions.len());
        for action in actions {
            match action {
                Action::Register { name, reason } => {
                    let Some(tool) = self.desired.tools.get(name) else {
                        continue;
                    };
                    let callback_url = (self.url_for)(name);
                    out.push(Request::Register {
                        name: name.clone(),
                        body: register_body(&tool.spec, &self.source, &callback_url),
                        fingerprint: tool.fingerprint,
                        callback_url,
                        reclaim: matches!(reason, RegisterReason::Reclaim { .. }),
                    });
                }
                Action::Unregister { name, role, reason } => {
                    let removed_url = match reason {
                        UnregisterReason::NotDesired => observed
                            .tools_by_role
                            .values()
                            .flatten()
                            .find(|t| t.name == *name && t.source == self.source)
                            .and_then(|t| t.callback_url.clone()),
                        UnregisterReason::LeftoverInRole => None,
                    };
                    out.push(Request::Unregister {
                        name: name.clone(),
                        role: role.clone(),
                        not_desired: *reason == UnregisterReason::NotDesired,
                        removed_url,
                    });
                }
            }
        }
        out
    }

    /// Sends the requests, at most `max_in_flight` at once, and records
    /// every answer.
    async fn execute(&mut self, requests: Vec<Request>) {
        let total = requests.len();
        let mut in_flight = JoinSet::new();
        let mut answers = Vec::with_capacity(total);
        let client = self.client.clone();
        for request in requests {
            if in_flight.len() >= self.reg.max_in_flight
                && let Some(done) = in_flight.join_next().await
            {
                answers.push(done);
            }
            let client = client.clone();
            in_flight.spawn(async move {
                let result = request.send(&client).await;
                (request, result)
            });
        }
        while let Some(done) = in_flight.join_next().await {
            answers.push(done);
        }

        let now = Instant::now();
        let mut failures = 0usize;
        let mut first_failure = None;
        for answer in answers {
            let (request, result) = match answer {
                Ok(a) => a,
                Err(e) => {
                    // Only a panic lands here; the next pass re-plans the tool.
                    tracing::error!(error = %e, "a registration request task failed");
                    continue;
                }
            };
            if let Err(e) = &result
                && e.kind.is_transient()
            {
                failures += 1;
                first_failure.get_or_insert_with(|| format!("{} ({e})", request.name()));
            }
            self.record_answer(request, result, now);
        }
        if let Some(first) = first_failure {
            tracing::warn!(
                failed = failures,
                sent = total,
                first = %first,
                "some main_server requests failed; retrying them with backoff"
            );
        }
    }

    fn record_answer(&mut self, request: Request, result: Result<Reply, CallError>, now: Instant) {
        match (request, result) {
            (
                Request::Register {
                    name,
                    fingerprint,
                    callback_url,
                    reclaim,
                    ..
                },
                result,
            ) => {
                let m = self.memory.entry(name.clone()).or_default();
                if reclaim {
                    // Counted on the attempt, so a failing reclaim cannot
                    // bypass the rate limit.
                    m.last_reclaim = Some(now);
                }
                self.registration.count_registration(match &result {
                    Ok(_) => RegistrationOutcome::Accepted,
                    Err(CallError {
                        kind: CallErrorKind::Rejected(_),
                        ..
                    }) => RegistrationOutcome::Rejected,
                    Err(CallError {
                        kind: CallErrorKind::UnknownRole(_),
                        ..
                    }) => RegistrationOutcome::UnknownRole,
                    Err(_) => RegistrationOutcome::Failed,
                });
                match result {
                    Ok(reply) => {
                        if !reply.failed_roles.is_empty() {
                            tracing::info!(tool = %name, failed_roles = ?reply.failed_roles, "registration accepted but some roles failed to sync; the next GET judges");
                        }
                        m.registered = Some(Registered {
                            fingerprint,
                            callback_url,
                        });
                        m.rejected = None;
                        m.awaiting_confirmation = true;
                    }
                    Err(CallError {
                        kind: CallErrorKind::Rejected(errors),
                        ..
                    }) => {
                        m.rejected = Some(Rejection {
                            fingerprint,
                            callback_url,
                            errors: errors.clone(),
                        });
                        self.registration
                            .set_tool(&name, ToolState::Rejected { errors });
                    }
                    Err(CallError {
                        kind: CallErrorKind::UnknownRole(role),
                        ..
                    }) => {
                        // The role vanished between GET and POST. The next
                        // GET will not list it; back off in case it does.
                        let retry = self.tool_retries.entry(name.clone()).or_default();
                        let delay = retry.failed(&self.policy, self.pass_unit);
                        m.retry_at = Some(now + delay);
                        self.registration
                            .set_tool(&name, ToolState::WaitingForRole { role: Some(role) });
                    }
                    Err(e) => self.failed(&name, e.to_string(), now),
                }
            }
            (
                Request::Unregister {
                    name,
                    role,
                    not_desired,
                    removed_url,
                },
                Ok(_),
            ) => {
                let m = self.memory.entry(name.clone()).or_default();
                m.awaiting_confirmation = true;
                if not_desired {
                    m.registered = None;
                    // Evidence for the next passes: if it comes back from
                    // another host:port, another agent registered it.
                    m.removed_url = Some(removed_url.unwrap_or_default());
                    self.removed_order.push_back(name.clone());
                    tracing::info!(tool = %name, "unregistered a tool of ours that is no longer declared");
                } else {
                    tracing::info!(tool = %name, role = role.as_deref().unwrap_or("(all)"), "unregistered a copy of ours from a role the tool is no longer scoped to");
                }
            }
            (Request::Unregister { name, .. }, Err(e)) => self.failed(&name, e.to_string(), now),
        }
    }
}

/// `order` (names we unregistered, oldest first) without repeats and names
/// whose evidence is gone, and with the evidence of only the newest `max`
/// names that are `gone` (neither desired nor listed) kept in `memory`.
fn prune_removed(
    order: std::collections::VecDeque<String>,
    memory: &mut crate::planner::Memory,
    gone: impl Fn(&str) -> bool,
    max: usize,
) -> std::collections::VecDeque<String> {
    let mut seen = std::collections::HashSet::new();
    let mut kept = std::collections::VecDeque::new();
    let mut gone_kept = 0;
    for name in order.into_iter().rev() {
        let evidence = memory.get(&name).is_some_and(|m| m.removed_url.is_some());
        if !evidence || !seen.insert(name.clone()) {
            continue;
        }
        if gone(&name) {
            if gone_kept >= max {
                memory.remove(&name);
                continue;
            }
            gone_kept += 1;
        }
        kept.push_front(name);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::{Memory, ToolMemory};

    #[test]
    fn only_the_newest_evidence_of_names_gone_is_kept() {
        let mut memory = Memory::new();
        let mut order = std::collections::VecDeque::new();
        // A server renaming its tools: a0, a1, ... each removed in turn.
        for i in 0..10 {
            let name = format!("a{i}");
            memory.insert(
                name.clone(),
                ToolMemory {
                    removed_url: Some(String::new()),
                    ..ToolMemory::default()
                },
            );
            order.push_back(name);
        }
        order.push_back("a9".into());
        // a1 is still listed: its evidence is needed, whatever its age.
        let order = prune_removed(order, &mut memory, |n| n != "a1", 3);
        assert_eq!(order, ["a1", "a7", "a8", "a9"]);
        let mut left: Vec<&String> = memory.keys().collect();
        left.sort();
        assert_eq!(left, ["a1", "a7", "a8", "a9"]);
    }
}
