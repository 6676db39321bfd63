//! The registration planner: from what we want (`DesiredState`), what
//! main_server shows (`Observed`, one `GET /api/tools`) and what this process
//! remembers doing (`Memory`), decide per tool what is true and what to send.
//!
//! Pure: the planner never does I/O, never sleeps, never reads the clock
//! (`now` is given) and never draws randomness. It is level-triggered: the
//! same inputs give the same plan, whatever happened before, so a lost
//! answer, a main_server restart or an eviction is simply a new observation.
//!
//! Ownership is judged by `source`, never by comparing whole callback URLs:
//! our URLs carry a token that changes at every start (and with an
//! ephemeral callback port, the port changes too). An entry with our source
//! but another URL is therefore **our own stale registration** from an
//! earlier run, and is overwritten, unless there is evidence that another
//! live agent holds it (see `classify_ours`): then it is a conflict and we
//! do not fight.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::client::{FieldError, Observed, ObservedTool};
use crate::config::ConflictPolicy;
use crate::desired::{DesiredState, Fingerprint};

pub(crate) use crate::contract::BUILTIN_SOURCE;

/// What this process last registered for a tool with an `ok:true` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub fingerprint: Fingerprint,
    pub callback_url: String,
}

/// A body main_server refused with 422: not sent again until it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub fingerprint: Fingerprint,
    pub callback_url: String,
    pub errors: Vec<FieldError>,
}

/// What the engine remembers about one tool name (desired or not). The
/// planner reads it; only the engine writes it, from answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolMemory {
    /// Set from an `ok:true` register answer. GET cannot show parameters or
    /// timeouts, so this is the only way to know the server holds our latest
    /// schema; presence and URL are still judged by every GET.
    pub registered: Option<Registered>,
    pub rejected: Option<Rejection>,
    /// A transient failure: nothing is sent for this tool before this instant.
    pub retry_at: Option<Instant>,
    /// Under `reclaim`, when we last took the name back from another owner.
    pub last_reclaim: Option<Instant>,
    /// An action for this name was accepted (`ok:true`) since the last GET;
    /// the next GET must show its effect, else it counts as a failure (this
    /// is what keeps a server that accepts but does not apply from turning
    /// the engine into a busy loop).
    pub awaiting_confirmation: bool,
    /// For a name we do not want: the callback URL of the entry with our
    /// source that we unregistered. If the name is listed again with our
    /// source after that, someone re-registered it: another agent.
    pub removed_url: Option<String>,
}

pub type Memory = BTreeMap<String, ToolMemory>;

/// Everything the planner needs besides the three states.
pub struct PlanContext<'a> {
    /// Our `source` tag.
    pub source: &'a str,
    /// Our callback URL for a tool name (from the callback server).
    pub url_for: &'a dyn Fn(&str) -> String,
    pub policy: ConflictPolicy,
    /// Under `reclaim`, the least time between two reclaims of one tool.
    pub reclaim_interval: Duration,
    pub now: Instant,
}

/// Why a tool is registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterReason {
    /// Not listed in these roles (never registered, main_server restarted,
    /// evicted, or a role appeared).
    Missing { roles: Vec<String> },
    /// Listed with our source but an old callback URL (an earlier run).
    StaleUrl { url: String },
    /// Listed with our URL, but what we last registered is not what we want
    /// now (or this process never got an `ok` for it).
    Changed,
    /// Under `reclaim`: another owner holds the name.
    Reclaim { owner: String },
}

/// Why a name is unregistered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnregisterReason {
    /// Ours, but no longer desired (e.g. removed while the sidecar was down).
    NotDesired,
    /// Ours in a role the tool is no longer scoped to.
    LeftoverInRole,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Register {
        name: String,
        reason: RegisterReason,
    },
    Unregister {
        name: String,
        /// `None`: every role.
        role: Option<String>,
        reason: UnregisterReason,
    },
}

/// Another holder of one of our tool names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The holder's source.
    pub owner: String,
    pub callback_url: Option<String>,
    /// The holder uses our own source from another host:port: a second
    /// agent configured with our source.
    pub same_source: bool,
    /// Under `reclaim`: when the next reclaim is allowed.
    pub next_reclaim_at: Option<Instant>,
}

/// The planner's judgement of one desired tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Listed in every target role with our source and URL, and what we last
    /// registered is what we want.
    InSync,
    /// A register action is in the plan.
    Register(RegisterReason),
    /// Someone else holds the name; nothing is sent.
    Conflict(Conflict),
    /// main_server refused this exact body; not retried until it changes.
    Rejected,
    /// The tool's role is not listed (`None`: a global tool and no role at all).
    WaitingForRole(Option<String>),
    /// Needs an action but is backing off after a failure.
    Retrying,
    /// Our last action for it was accepted but the GET does not show its
    /// effect: the engine counts a failure and backs off.
    Unconfirmed,
}

/// An entry with our source for a name we do not want, left alone because
/// it came back after we removed it: another agent with our source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stray {
    pub name: String,
    pub callback_url: Option<String>,
}

/// The result of one planning pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// One verdict per desired tool; empty when nothing was observed.
    pub verdicts: BTreeMap<String, Verdict>,
    /// Undesired names with our source that we leave alone, with the reason
    /// in `Stray`; undesired names we unregister are in `actions`.
    pub strays: Vec<Stray>,
    /// Undesired names whose unregister was accepted but that are still
    /// listed (the engine backs them off like `Verdict::Unconfirmed`).
    pub unconfirmed_removals: Vec<String>,
}

/// How one listed entry with a desired name relates to us.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Missing,
    Current,
    Stale(String),
    OtherAgent(Option<String>),
    Foreign(String, Option<String>),
}

/// Plans one pass. `observed: None` (the GET failed) plans nothing: we
/// never act blind, because an answer alone cannot tell what took effect and
/// registering over a name we cannot see could overwrite another owner.
pub fn plan(
    desired: &DesiredState,
    observed: Option<&Observed>,
    memory: &Memory,
    ctx: &PlanContext<'_>,
) -> Plan {
    let Some(observed) = observed else {
        return Plan::default();
    };
    let empty = ToolMemory::default();
    let mut out = Plan::default();

    for (name, tool) in &desired.tools {
        let mem = memory.get(name).unwrap_or(&empty);
        let ours = (ctx.url_for)(name);
        let (verdict, leftovers) = judge(
            name,
            tool.fingerprint,
            tool.spec.role.as_deref(),
            &ours,
            observed,
            mem,
            ctx,
        );
        // Leftovers still listed after an accepted unregister: the server
        // did not apply it; back off instead of sending it again at once.
        let verdict = if !leftovers.is_empty()
            && mem.awaiting_confirmation
            && matches!(verdict, Verdict::InSync | Verdict::Register(_))
        {
            Verdict::Unconfirmed
        } else {
            verdict
        };
        let gated = gate(verdict, mem, ctx.now);
        if let Verdict::Register(reason) = &gated {
            out.actions.push(Action::Register {
                name: name.clone(),
                reason: reason.clone(),
            });
        }
        // Leftover copies wait for the same backoff as the tool itself.
        if !matches!(gated, Verdict::Retrying | Verdict::Unconfirmed) {
            out.actions
                .extend(leftovers.into_iter().map(|role| Action::Unregister {
                    name: name.clone(),
                    role: Some(role),
                    reason: UnregisterReason::LeftoverInRole,
                }));
        }
        out.verdicts.insert(name.clone(), gated);
    }

    plan_removals(desired, observed, memory, ctx, &mut out);
    out
}

/// The verdict for one desired tool before backoff gating, and the roles
/// holding leftover copies of ours to unregister.
fn judge(
    name: &str,
    fingerprint: Fingerprint,
    role: Option<&str>,
    ours: &str,
    observed: &Observed,
    mem: &ToolMemory,
    ctx: &PlanContext<'_>,
) -> (Verdict, Vec<String>) {
    // A refused body stays refused: sending it again cannot help.
    if let Some(r) = &mem.rejected
        && r.fingerprint == fingerprint
        && r.callback_url == ours
    {
        return (Verdict::Rejected, Vec::new());
    }

    let targets: Vec<&str> = match role {
        Some(r) if observed.has_role(r) => vec![r],
        Some(r) => return (Verdict::WaitingForRole(Some(r.to_string())), Vec::new()),
        None => observed.roles().collect(),
    };
    if targets.is_empty() {
        return (Verdict::WaitingForRole(None), Vec::new());
    }

    let seen: Vec<(&str, Seen)> = targets
        .iter()
        .map(|&r| (r, classify(observed.find(r, name), ours, mem, ctx.source)))
        .collect();

    // Copies of ours in roles the tool is no longer scoped to (it was global
    // or scoped to another role before). Another agent's are not ours to remove.
    let leftovers: Vec<String> = match role {
        None => Vec::new(),
        Some(r) => observed
            .roles()
            .filter(|&other| other != r)
            .filter(|&other| {
                matches!(
                    classify(observed.find(other, name), ours, mem, ctx.source),
                    Seen::Current | Seen::Stale(_)
                )
            })
            .map(str::to_string)
            .collect(),
    };

    // Foreign owners first: a global registration would replace their copy
    // in every role, so even one foreign role blocks us under `yield`.
    if let Some((owner, url)) = seen.iter().find_map(|(_, s)| match s {
        Seen::Foreign(o, u) => Some((o.clone(), u.clone())),
        _ => None,
    }) {
        return (conflict(owner, url, false, mem, ctx), leftovers);
    }
    if let Some(url) = seen.iter().find_map(|(_, s)| match s {
        Seen::OtherAgent(u) => Some(u.clone()),
        _ => None,
    }) {
        return (
            conflict(ctx.source.to_string(), url, true, mem, ctx),
            leftovers,
        );
    }

    let missing: Vec<String> = seen
        .iter()
        .filter(|(_, s)| *s == Seen::Missing)
        .map(|(r, _)| r.to_string())
        .collect();
    if !missing.is_empty() {
        let v = if mem.awaiting_confirmation {
            Verdict::Unconfirmed
        } else {
            Verdict::Register(RegisterReason::Missing { roles: missing })
        };
        return (v, leftovers);
    }
    if let Some(url) = seen.iter().find_map(|(_, s)| match s {
        Seen::Stale(u) => Some(u.clone()),
        _ => None,
    }) {
        let v = if mem.awaiting_confirmation {
            Verdict::Unconfirmed
        } else {
            Verdict::Register(RegisterReason::StaleUrl { url })
        };
        return (v, leftovers);
    }

    // Listed everywhere with our URL: in sync only if we know the server
    // holds this exact fingerprint.
    let v = match &mem.registered {
        Some(reg) if reg.fingerprint == fingerprint && reg.callback_url == ours => Verdict::InSync,
        _ => Verdict::Register(RegisterReason::Changed),
    };
    (v, leftovers)
}

/// How one listed entry relates to us.
fn classify(entry: Option<&ObservedTool>, ours: &str, mem: &ToolMemory, source: &str) -> Seen {
    let Some(e) = entry else {
        return Seen::Missing;
    };
    if e.source != source {
        return Seen::Foreign(e.source.clone(), e.callback_url.clone());
    }
    match e.callback_url.as_deref() {
        Some(url) if url == ours => Seen::Current,
        url => classify_ours(url, ours, mem),
    }
}

/// Our source, another URL: our stale registration, or another agent?
///
/// The rule:
/// 1. Same callback host:port as ours → stale. Only one process can listen
///    there, and it is us; the URL is from an earlier run (new token).
/// 2. Another host:port, and this process has had a register for the name
///    accepted (with a URL other than the one listed) → another agent. We
///    wrote our URL; someone wrote theirs after us: it is alive and
///    registering with our source. A dead earlier run never writes again.
/// 3. Otherwise → stale. A sidecar restarted with an ephemeral callback port
///    finds its old entries on an old port; it cannot tell them from a live
///    agent's until one of them re-registers, so it takes them over once.
///    If a live agent holds them, it re-registers (or we see rule 2 next
///    time), and one of the two settles as `conflict` instead of flapping.
fn classify_ours(listed: Option<&str>, ours: &str, mem: &ToolMemory) -> Seen {
    let Some(listed) = listed else {
        // Our source with no callback URL: not something we would write.
        return Seen::OtherAgent(None);
    };
    if same_authority(listed, ours) {
        return Seen::Stale(listed.to_string());
    }
    match &mem.registered {
        Some(reg) if reg.callback_url != listed => Seen::OtherAgent(Some(listed.to_string())),
        _ => Seen::Stale(listed.to_string()),
    }
}

/// Same scheme, host and port (the part main_server's eviction counts by).
pub(crate) fn same_authority(a: &str, b: &str) -> bool {
    fn authority(u: &str) -> Option<(String, String, Option<u16>)> {
        let u = url::Url::parse(u).ok()?;
        Some((
            u.scheme().to_string(),
            u.host_str()?.to_ascii_lowercase(),
            u.port_or_known_default(),
        ))
    }
    match (authority(a), authority(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// A conflict verdict, or a reclaim when the policy and the rate allow it.
/// Built-in tools are never reclaimed: overwriting main_server's own tool
/// would break it, whatever the policy says.
fn conflict(
    owner: String,
    callback_url: Option<String>,
    same_source: bool,
    mem: &ToolMemory,
    ctx: &PlanContext<'_>,
) -> Verdict {
    let next = match (ctx.policy, owner.as_str()) {
        (ConflictPolicy::Yield, _) | (_, BUILTIN_SOURCE) => None,
        (ConflictPolicy::Reclaim, _) => Some(
            mem.last_reclaim
                .map_or(ctx.now, |at| at + ctx.reclaim_interval),
        ),
    };
    match next {
        Some(at) if at <= ctx.now => Verdict::Register(RegisterReason::Reclaim { owner }),
        next_reclaim_at => Verdict::Conflict(Conflict {
            owner,
            callback_url,
            same_source,
            next_reclaim_at,
        }),
    }
}

/// An action-needing verdict waits while the tool is backing off.
fn gate(v: Verdict, mem: &ToolMemory, now: Instant) -> Verdict {
    let backing_off = mem.retry_at.is_some_and(|at| at > now);
    match v {
        Verdict::Register(_) if backing_off => Verdict::Retrying,
        Verdict::Unconfirmed if backing_off => Verdict::Retrying,
        v => v,
    }
}

/// Names listed with our source that we do not want: unregister them, once.
fn plan_removals(
    desired: &DesiredState,
    observed: &Observed,
    memory: &Memory,
    ctx: &PlanContext<'_>,
    out: &mut Plan,
) {
    // name → a listed URL (the first role's) and the roles listing it with
    // our source, deduplicated across roles.
    let mut ours_undesired: BTreeMap<&str, (Option<&str>, Vec<&str>)> = BTreeMap::new();
    for (role, tools) in &observed.tools_by_role {
        for t in tools {
            if t.source == ctx.source && !desired.tools.contains_key(&t.name) {
                ours_undesired
                    .entry(t.name.as_str())
                    .or_insert((t.callback_url.as_deref(), Vec::new()))
                    .1
                    .push(role);
            }
        }
    }
    let mut seen_strays = BTreeSet::new();
    let empty = ToolMemory::default();
    for (name, (url, roles)) in ours_undesired {
        let mem = memory.get(name).unwrap_or(&empty);
        if mem.retry_at.is_some_and(|at| at > ctx.now) {
            continue;
        }
        if mem.awaiting_confirmation {
            out.unconfirmed_removals.push(name.to_string());
            continue;
        }
        let ours = (ctx.url_for)(name);
        let on_our_port = url.is_some_and(|u| same_authority(u, &ours));
        // Removed once already and back again from another host:port:
        // someone re-registered it. Leave it to them and say so.
        if mem.removed_url.is_some() && !on_our_port {
            if seen_strays.insert(name) {
                out.strays.push(Stray {
                    name: name.to_string(),
                    callback_url: url.map(str::to_string),
                });
            }
            continue;
        }
        // A global unregister removes the name from every role whoever
        // holds it: where another source holds the name in some role, ours
        // go role by role so theirs stays.
        let shared = observed
            .tools_by_role
            .values()
            .flatten()
            .any(|t| t.name == name && t.source != ctx.source);
        let scopes = if shared {
            roles.into_iter().map(|r| Some(r.to_string())).collect()
        } else {
            vec![None]
        };
        out.actions
            .extend(scopes.into_iter().map(|role| Action::Unregister {
                name: name.to_string(),
                role,
                reason: UnregisterReason::NotDesired,
            }));
    }
}

#[cfg(test)]
mod tests;
