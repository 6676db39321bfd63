//! Property tests of the registration planner (`planner::plan`) over
//! generated worlds: a desired state, what main_server lists, and what the
//! engine remembers. The rules pinned here are the planner's promises in
//! ARCHITECTURE.md: it converges (carrying a plan out and planning again
//! asks for nothing more), an idle converged state plans nothing, it never
//! fights another owner under `yield`, it never removes what is not ours,
//! and a desired tool missing from a role it belongs in is registered.
//!
//! main_server is modelled as CONTRACT.md describes it: a global register
//! writes every role (replacing any copy), a role-scoped one writes its
//! role, and an unregister removes the name from its role or, global, from
//! every role, whoever registered it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use neko_sidecar::client::{Observed, ObservedTool};
use neko_sidecar::config::ConflictPolicy;
use neko_sidecar::desired::{DesiredState, Fingerprint};
use neko_sidecar::planner::{
    Action, Conflict, Memory, Plan, PlanContext, RegisterReason, Registered, ToolMemory, Verdict,
    plan,
};
use proptest::prelude::*;

use crate::support::{self, http_tool, proptest_config};

const SRC: &str = "plugin:w";
const FOREIGN: &str = "plugin:other";
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const ROLES: [&str; 3] = ["A", "B", "C"];
const PORT: u16 = 40001;
const RECLAIM_INTERVAL: Duration = Duration::from_secs(60);

fn url_of(port: u16, token: &str, name: &str) -> String {
    format!("http://127.0.0.1:{port}/cb/{token}/{name}")
}

fn ours(name: &str) -> String {
    url_of(PORT, "tok", name)
}

/// Who holds a listed entry.
#[derive(Debug, Clone, Copy)]
enum Holder {
    /// Our source and our current URL.
    Current,
    /// Our source, an earlier run's URL on our port.
    Stale,
    /// Our source on another port: an earlier run, or another agent.
    OtherPort,
    /// Our source without a callback URL.
    NoUrl,
    Foreign,
    Builtin,
}

fn entry(name: &str, holder: Holder) -> ObservedTool {
    let (source, url) = match holder {
        Holder::Current => (SRC, Some(ours(name))),
        Holder::Stale => (SRC, Some(url_of(PORT, "old", name))),
        Holder::OtherPort => (SRC, Some(url_of(40002, "tok", name))),
        Holder::NoUrl => (SRC, None),
        Holder::Foreign => (FOREIGN, Some(url_of(50000, "x", name))),
        Holder::Builtin => ("builtin", None),
    };
    ObservedTool {
        name: name.into(),
        description: String::new(),
        source: source.into(),
        is_remote: url.is_some(),
        callback_url: url,
    }
}

/// What the engine may remember about one name.
#[derive(Debug, Clone)]
struct MemorySpec {
    /// 0: nothing; 1: our current fingerprint and URL; 2: an older
    /// fingerprint; 3: our fingerprint with another port's URL.
    registered: u8,
    awaiting_confirmation: bool,
    /// 0: none; 1: in the past; 2: in the future (backing off).
    retry_at: u8,
    reclaimed_just_now: bool,
    removed_url: Option<bool>,
}

#[derive(Debug, Clone)]
struct World {
    /// name index → (role index or global, description variant).
    desired: BTreeMap<usize, (Option<usize>, u8)>,
    roles: [bool; 3],
    /// (role, name, holder): later entries of the same (role, name) lose.
    listed: Vec<(usize, usize, Holder)>,
    memory: BTreeMap<usize, MemorySpec>,
    reclaim: bool,
}

fn holder() -> impl Strategy<Value = Holder> {
    prop_oneof![
        4 => Just(Holder::Current),
        2 => Just(Holder::Stale),
        1 => Just(Holder::OtherPort),
        1 => Just(Holder::NoUrl),
        2 => Just(Holder::Foreign),
        1 => Just(Holder::Builtin),
    ]
}

fn memory_spec() -> impl Strategy<Value = MemorySpec> {
    (
        0u8..4,
        any::<bool>(),
        0u8..3,
        any::<bool>(),
        prop::option::of(any::<bool>()),
    )
        .prop_map(
            |(registered, awaiting_confirmation, retry_at, reclaimed_just_now, removed_url)| {
                MemorySpec {
                    registered,
                    awaiting_confirmation,
                    retry_at,
                    reclaimed_just_now,
                    removed_url,
                }
            },
        )
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::btree_map(
            0..NAMES.len(),
            (prop::option::of(0..ROLES.len()), 0u8..2),
            0..=NAMES.len(),
        ),
        any::<[bool; 3]>(),
        prop::collection::vec((0..ROLES.len(), 0..NAMES.len() + 1, holder()), 0..10),
        prop::collection::btree_map(0..NAMES.len() + 1, memory_spec(), 0..4),
        any::<bool>(),
    )
        .prop_map(|(desired, roles, listed, memory, reclaim)| World {
            desired,
            roles,
            listed,
            memory,
            reclaim,
        })
}

/// Name index `NAMES.len()` is a name never desired ("e").
fn name(i: usize) -> &'static str {
    NAMES.get(i).copied().unwrap_or("e")
}

/// The desired state of a world, built through the manifest loader as the
/// daemon builds it.
fn desired_state(w: &World) -> DesiredState {
    if w.desired.is_empty() {
        return DesiredState {
            source: SRC.into(),
            tools: Default::default(),
            mcp_servers: Default::default(),
        };
    }
    let mut text = String::new();
    for (&n, &(role, variant)) in &w.desired {
        let n = name(n);
        let role = role.map(|r| format!("role = \"{}\"", ROLES[r]));
        text.push_str(&http_tool(
            n,
            &format!("tool {n}, version {variant}"),
            &format!("http://127.0.0.1:9/{n}"),
            &role.unwrap_or_default(),
        ));
    }
    support::desired_state(SRC, Path::new(""), &text)
}

fn observed(w: &World) -> Observed {
    let mut o = Observed::default();
    for (r, present) in ROLES.iter().zip(w.roles) {
        if present {
            o.tools_by_role.insert(r.to_string(), Vec::new());
        }
    }
    for &(r, n, h) in &w.listed {
        if let Some(tools) = o.tools_by_role.get_mut(ROLES[r])
            && !tools.iter().any(|t| t.name == name(n))
        {
            tools.push(entry(name(n), h));
        }
    }
    o
}

/// A fingerprint that is not any desired tool's: the same tool from
/// another source.
fn older_fingerprint(d: &DesiredState, n: &str) -> Option<Fingerprint> {
    d.tools
        .get(n)
        .map(|t| Fingerprint::of(&t.spec, "plugin:older"))
}

fn memory(w: &World, d: &DesiredState, now: Instant) -> Memory {
    let mut m = Memory::new();
    for (&n, spec) in &w.memory {
        let n = name(n);
        let fp = d.tools.get(n).map(|t| t.fingerprint);
        let registered = match (spec.registered, fp) {
            (1, Some(fp)) => Some(Registered {
                fingerprint: fp,
                callback_url: ours(n),
            }),
            (2, Some(_)) => older_fingerprint(d, n).map(|fp| Registered {
                fingerprint: fp,
                callback_url: ours(n),
            }),
            (3, Some(fp)) => Some(Registered {
                fingerprint: fp,
                callback_url: url_of(40002, "tok", n),
            }),
            _ => None,
        };
        let retry_at = match spec.retry_at {
            1 => now.checked_sub(Duration::from_secs(1)),
            2 => Some(now + Duration::from_secs(5)),
            _ => None,
        };
        m.insert(
            n.to_string(),
            ToolMemory {
                registered,
                rejected: None,
                retry_at,
                last_reclaim: spec.reclaimed_just_now.then_some(now),
                awaiting_confirmation: spec.awaiting_confirmation,
                removed_url: spec.removed_url.map(|same_port| {
                    if same_port {
                        url_of(PORT, "old", n)
                    } else {
                        url_of(40002, "tok", n)
                    }
                }),
            },
        );
    }
    m
}

fn run(w: &World, d: &DesiredState, o: &Observed, m: &Memory, now: Instant) -> Plan {
    let url_for = |n: &str| ours(n);
    let ctx = PlanContext {
        source: SRC,
        url_for: &url_for,
        policy: if w.reclaim {
            ConflictPolicy::Reclaim
        } else {
            ConflictPolicy::Yield
        },
        reclaim_interval: RECLAIM_INTERVAL,
        now,
    };
    plan(d, Some(o), m, &ctx)
}

/// The roles a desired tool belongs in, as listed now.
fn target_roles(d: &DesiredState, o: &Observed, n: &str) -> Vec<String> {
    match d.tools[n].spec.role.as_deref() {
        Some(r) if o.has_role(r) => vec![r.to_string()],
        Some(_) => Vec::new(),
        None => o.roles().map(str::to_string).collect(),
    }
}

/// main_server and the engine carrying out a plan whose every request is
/// accepted and applied, as the engine records answers (`engine::pass`).
fn apply(plan: &Plan, d: &DesiredState, o: &mut Observed, m: &mut Memory, now: Instant) {
    for action in &plan.actions {
        match action {
            Action::Register { name, reason } => {
                let spec = &d.tools[name].spec;
                let roles: Vec<String> = match &spec.role {
                    Some(r) => vec![r.clone()],
                    None => o.roles().map(str::to_string).collect(),
                };
                for r in roles {
                    let tools = o.tools_by_role.get_mut(&r).expect("a listed role");
                    let e = entry(name, Holder::Current);
                    match tools.iter_mut().find(|t| t.name == *name) {
                        Some(t) => *t = e,
                        None => tools.push(e),
                    }
                }
                let mem = m.entry(name.clone()).or_default();
                if matches!(reason, RegisterReason::Reclaim { .. }) {
                    mem.last_reclaim = Some(now);
                }
                mem.registered = Some(Registered {
                    fingerprint: d.tools[name].fingerprint,
                    callback_url: ours(name),
                });
                mem.awaiting_confirmation = true;
            }
            Action::Unregister { name, role, reason } => {
                let removed_url = o
                    .tools_by_role
                    .values()
                    .flatten()
                    .find(|t| t.name == *name && t.source == SRC)
                    .and_then(|t| t.callback_url.clone());
                for (r, tools) in o.tools_by_role.iter_mut() {
                    if role.as_ref().is_none_or(|want| want == r) {
                        tools.retain(|t| t.name != *name);
                    }
                }
                let mem = m.entry(name.clone()).or_default();
                mem.awaiting_confirmation = true;
                if *reason == neko_sidecar::planner::UnregisterReason::NotDesired {
                    mem.registered = None;
                    mem.removed_url = Some(removed_url.unwrap_or_default());
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Carrying out a plan and planning again (the confirming GET, then the
    /// next idle one) asks for nothing more.
    #[test]
    fn a_carried_out_plan_converges(w in world()) {
        let now = Instant::now();
        let d = desired_state(&w);
        let mut o = observed(&w);
        // A fresh pass: nothing backing off, nothing awaiting confirmation.
        let mut m = memory(&w, &d, now);
        for mem in m.values_mut() {
            mem.retry_at = None;
            mem.awaiting_confirmation = false;
        }
        let first = run(&w, &d, &o, &m, now);
        apply(&first, &d, &mut o, &mut m, now);
        let confirm = run(&w, &d, &o, &m, now);
        prop_assert_eq!(&confirm.actions, &[], "first plan {:?}\nthen {:?}", first, confirm);
        prop_assert!(confirm.unconfirmed_removals.is_empty(), "{:?}", confirm);
        for v in confirm.verdicts.values() {
            prop_assert!(
                matches!(v, Verdict::InSync | Verdict::Conflict(_) | Verdict::WaitingForRole(_)),
                "{:?}", confirm
            );
        }
        for mem in m.values_mut() {
            mem.awaiting_confirmation = false;
        }
        let idle = run(&w, &d, &o, &m, now);
        prop_assert_eq!(&idle.actions, &[], "{:?}", idle);
    }

    /// Every desired tool listed with our URL wherever it belongs, and
    /// remembered as registered: nothing to send, whatever else is listed.
    #[test]
    fn an_idle_converged_state_plans_nothing(w in world()) {
        let now = Instant::now();
        let d = desired_state(&w);
        let mut o = observed(&w);
        // Our copies only where they belong; other names keep their holders
        // except ours (which would be undesired and removed).
        for tools in o.tools_by_role.values_mut() {
            tools.retain(|t| !d.tools.contains_key(&t.name) && t.source != SRC);
        }
        let mut m = Memory::new();
        for (n, tool) in &d.tools {
            for r in target_roles(&d, &o, n) {
                o.tools_by_role.get_mut(&r).expect("listed").push(entry(n, Holder::Current));
            }
            m.insert(n.clone(), ToolMemory {
                registered: Some(Registered { fingerprint: tool.fingerprint, callback_url: ours(n) }),
                ..ToolMemory::default()
            });
        }
        let p = run(&w, &d, &o, &m, now);
        prop_assert_eq!(&p.actions, &[], "{:?}", p);
        for (n, v) in &p.verdicts {
            let waiting = target_roles(&d, &o, n).is_empty();
            prop_assert_eq!(
                v,
                &if waiting {
                    Verdict::WaitingForRole(d.tools[n].spec.role.clone())
                } else {
                    Verdict::InSync
                }
            );
        }
    }

    /// Under `yield`, a name another source holds in a role the tool
    /// belongs in is never registered over.
    #[test]
    fn yield_never_registers_over_another_owner(mut w in world()) {
        w.reclaim = false;
        let now = Instant::now();
        let d = desired_state(&w);
        let o = observed(&w);
        let m = memory(&w, &d, now);
        let p = run(&w, &d, &o, &m, now);
        for action in &p.actions {
            if let Action::Register { name, .. } = action {
                for r in target_roles(&d, &o, name) {
                    let holder = o.find(&r, name).map(|t| t.source.as_str());
                    prop_assert!(
                        holder.is_none_or(|s| s == SRC),
                        "registered {} over {:?} in role {}: {:?}", name, holder, r, p
                    );
                }
            }
        }
    }

    /// An unregister only ever removes entries with our source: in its role,
    /// or (global) in every role.
    #[test]
    fn never_unregisters_what_is_not_ours(w in world()) {
        let now = Instant::now();
        let d = desired_state(&w);
        let o = observed(&w);
        let m = memory(&w, &d, now);
        let p = run(&w, &d, &o, &m, now);
        for action in &p.actions {
            if let Action::Unregister { name, role, .. } = action {
                for (r, tools) in &o.tools_by_role {
                    if role.as_ref().is_some_and(|want| want != r) {
                        continue;
                    }
                    if let Some(t) = tools.iter().find(|t| t.name == *name) {
                        prop_assert_eq!(
                            &t.source, SRC,
                            "{:?} would remove {:?}'s {} in role {}: {:?}", action, t.source, name, r, p
                        );
                    }
                }
            }
        }
    }

    /// With nothing backing off or awaiting confirmation, a desired tool
    /// absent from a role it belongs in is registered for exactly those
    /// roles, unless another holder of the name blocks it (a conflict).
    #[test]
    fn a_tool_missing_from_a_target_role_is_registered(w in world()) {
        let now = Instant::now();
        let d = desired_state(&w);
        let o = observed(&w);
        let mut m = memory(&w, &d, now);
        for mem in m.values_mut() {
            mem.retry_at = None;
            mem.awaiting_confirmation = false;
        }
        let p = run(&w, &d, &o, &m, now);
        for n in d.tools.keys() {
            let targets = target_roles(&d, &o, n);
            let missing: Vec<String> = targets
                .iter()
                .filter(|r| o.find(r, n).is_none())
                .cloned()
                .collect();
            if missing.is_empty() {
                continue;
            }
            match &p.verdicts[n] {
                Verdict::Conflict(Conflict { owner, .. })
                | Verdict::Register(RegisterReason::Reclaim { owner }) => {
                    let held = targets.iter().any(|r| {
                        o.find(r, n).is_some_and(|t| t.source == *owner)
                    });
                    prop_assert!(held, "{} blocks {}, but holds none of {:?}", owner, n, targets);
                }
                v => {
                    let want = RegisterReason::Missing { roles: missing.clone() };
                    prop_assert_eq!(v, &Verdict::Register(want.clone()));
                    prop_assert!(
                        p.actions.contains(&Action::Register { name: n.clone(), reason: want }),
                        "{:?}", p
                    );
                }
            }
        }
    }
}
