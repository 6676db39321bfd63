//! Unit tests of the planner, one per rule, on plain data.

use std::path::Path;

use super::*;
use crate::client::ObservedTool;
use crate::desired::DesiredState;
use crate::manifest::{LoadContext, parse_manifest};

const SRC: &str = "plugin:w";
const PORT: u16 = 40001;

fn url_of(port: u16, token: &str, name: &str) -> String {
    format!("http://127.0.0.1:{port}/cb/{token}/{name}")
}

fn ours(name: &str) -> String {
    url_of(PORT, "tok", name)
}

/// A desired state from (name, role, description) triples.
fn desired(tools: &[(&str, Option<&str>, &str)]) -> DesiredState {
    if tools.is_empty() {
        return DesiredState {
            source: SRC.into(),
            ..DesiredState::default()
        };
    }
    let mut text = String::new();
    for (name, role, desc) in tools {
        text.push_str(&format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"{desc}\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/{name}\" }}\n"
        ));
        if let Some(r) = role {
            text.push_str(&format!("role = \"{r}\"\n"));
        }
    }
    let f = parse_manifest(Path::new("t.toml"), &text, &LoadContext::default());
    assert!(!f.has_errors(), "{:?}", f.diagnostics);
    DesiredState::assemble(SRC, &[f]).0
}

fn entry(name: &str, source: &str, url: Option<String>) -> ObservedTool {
    ObservedTool {
        name: name.into(),
        description: String::new(),
        source: source.into(),
        is_remote: url.is_some(),
        callback_url: url,
    }
}

fn observed(roles: &[(&str, Vec<ObservedTool>)]) -> Observed {
    Observed {
        tools_by_role: roles
            .iter()
            .map(|(r, t)| (r.to_string(), t.clone()))
            .collect(),
    }
}

/// Both roles hold `name` with our source and current URL.
fn everywhere(name: &str) -> Observed {
    observed(&[
        ("A", vec![entry(name, SRC, Some(ours(name)))]),
        ("B", vec![entry(name, SRC, Some(ours(name)))]),
    ])
}

fn remembered(d: &DesiredState, name: &str) -> ToolMemory {
    ToolMemory {
        registered: Some(Registered {
            fingerprint: d.tools[name].fingerprint,
            callback_url: ours(name),
        }),
        ..Default::default()
    }
}

struct Ctx {
    policy: ConflictPolicy,
    now: Instant,
}

impl Ctx {
    fn new() -> Self {
        Self {
            policy: ConflictPolicy::Yield,
            now: Instant::now(),
        }
    }

    fn plan(&self, d: &DesiredState, o: Option<&Observed>, m: &Memory) -> Plan {
        let url_for = |n: &str| ours(n);
        let ctx = PlanContext {
            source: SRC,
            url_for: &url_for,
            policy: self.policy,
            reclaim_interval: Duration::from_secs(60),
            now: self.now,
        };
        plan(d, o, m, &ctx)
    }
}

fn mem(entries: Vec<(&str, ToolMemory)>) -> Memory {
    entries
        .into_iter()
        .map(|(n, m)| (n.to_string(), m))
        .collect()
}

fn register(name: &str, reason: RegisterReason) -> Action {
    Action::Register {
        name: name.into(),
        reason,
    }
}

#[test]
fn nothing_observed_plans_nothing() {
    let d = desired(&[("t", None, "d")]);
    assert_eq!(Ctx::new().plan(&d, None, &Memory::new()), Plan::default());
}

#[test]
fn a_global_tool_missing_from_any_role_is_registered() {
    let d = desired(&[("t", None, "d")]);
    let o = observed(&[
        ("A", vec![entry("t", SRC, Some(ours("t")))]),
        ("B", vec![entry("other", "builtin", None)]),
    ]);
    let m = mem(vec![("t", remembered(&d, "t"))]);
    let p = Ctx::new().plan(&d, Some(&o), &m);
    let reason = RegisterReason::Missing {
        roles: vec!["B".into()],
    };
    assert_eq!(p.actions, [register("t", reason.clone())]);
    assert_eq!(p.verdicts["t"], Verdict::Register(reason));
}

#[test]
fn a_role_scoped_tool_is_judged_by_its_role_only() {
    let d = desired(&[("t", Some("B"), "d")]);
    let m = mem(vec![("t", remembered(&d, "t"))]);
    let present = observed(&[("A", vec![]), ("B", vec![entry("t", SRC, Some(ours("t")))])]);
    let p = Ctx::new().plan(&d, Some(&present), &m);
    assert_eq!(p.actions, []);
    assert_eq!(p.verdicts["t"], Verdict::InSync);
    let missing = observed(&[("A", vec![]), ("B", vec![])]);
    let p = Ctx::new().plan(&d, Some(&missing), &m);
    assert_eq!(
        p.actions,
        [register(
            "t",
            RegisterReason::Missing {
                roles: vec!["B".into()]
            }
        )]
    );
}

#[test]
fn a_role_that_is_not_listed_waits_and_nothing_is_sent() {
    let d = desired(&[("t", Some("Later"), "d")]);
    let o = observed(&[("A", vec![])]);
    let p = Ctx::new().plan(&d, Some(&o), &Memory::new());
    assert_eq!(p.actions, []);
    assert_eq!(
        p.verdicts["t"],
        Verdict::WaitingForRole(Some("Later".into()))
    );
    let none = observed(&[]);
    let g = desired(&[("g", None, "d")]);
    assert_eq!(
        Ctx::new().plan(&g, Some(&none), &Memory::new()).verdicts["g"],
        Verdict::WaitingForRole(None)
    );
}

#[test]
fn in_sync_and_remembered_sends_nothing() {
    let d = desired(&[("t", None, "d")]);
    let m = mem(vec![("t", remembered(&d, "t"))]);
    let p = Ctx::new().plan(&d, Some(&everywhere("t")), &m);
    assert_eq!(p.actions, []);
    assert_eq!(p.verdicts["t"], Verdict::InSync);
    assert!(p.strays.is_empty());
}

#[test]
fn ours_with_our_url_but_nothing_remembered_is_registered() {
    // E.g. an answer that was lost (timeout) but took effect: GET cannot show
    // the schema the server holds, so register again to be sure.
    let d = desired(&[("t", None, "d")]);
    let p = Ctx::new().plan(&d, Some(&everywhere("t")), &Memory::new());
    assert_eq!(p.actions, [register("t", RegisterReason::Changed)]);
}

#[test]
fn a_changed_fingerprint_is_registered_again() {
    let old = desired(&[("t", None, "old")]);
    let new = desired(&[("t", None, "new")]);
    let m = mem(vec![("t", remembered(&old, "t"))]);
    let p = Ctx::new().plan(&new, Some(&everywhere("t")), &m);
    assert_eq!(p.actions, [register("t", RegisterReason::Changed)]);
}

#[test]
fn our_source_with_an_old_token_on_our_port_is_stale() {
    let d = desired(&[("t", None, "d")]);
    let old = url_of(PORT, "previous", "t");
    let o = observed(&[("A", vec![entry("t", SRC, Some(old.clone()))])]);
    // Even with a remembered registration: nobody else can listen on our port.
    let m = mem(vec![("t", remembered(&d, "t"))]);
    let p = Ctx::new().plan(&d, Some(&o), &m);
    assert_eq!(
        p.actions,
        [register("t", RegisterReason::StaleUrl { url: old })]
    );
}

#[test]
fn a_restarted_sidecar_on_a_new_port_takes_its_old_entries_over() {
    // Port 0: the previous run listened elsewhere. This process never
    // registered the name, so the entry is our stale one, not a conflict.
    let d = desired(&[("t", None, "d")]);
    let old = url_of(39999, "previous", "t");
    let o = observed(&[("A", vec![entry("t", SRC, Some(old.clone()))])]);
    let p = Ctx::new().plan(&d, Some(&o), &Memory::new());
    assert_eq!(
        p.actions,
        [register("t", RegisterReason::StaleUrl { url: old })]
    );
}

#[test]
fn another_agent_re_registering_our_source_after_us_is_a_conflict_not_a_fight() {
    let d = desired(&[("t", None, "d")]);
    let theirs = url_of(39999, "theirs", "t");
    let o = observed(&[("A", vec![entry("t", SRC, Some(theirs.clone()))])]);
    // We had a register accepted with our URL; now theirs is listed.
    let m = mem(vec![("t", remembered(&d, "t"))]);
    for policy in [ConflictPolicy::Yield, ConflictPolicy::Reclaim] {
        let mut ctx = Ctx::new();
        ctx.policy = policy;
        let mut m = m.clone();
        // Under reclaim, a recent reclaim holds the next one back.
        m.get_mut("t").unwrap().last_reclaim = Some(ctx.now);
        let p = ctx.plan(&d, Some(&o), &m);
        assert_eq!(p.actions, [], "{policy:?}");
        match &p.verdicts["t"] {
            Verdict::Conflict(c) => {
                assert_eq!(c.owner, SRC);
                assert!(c.same_source);
                assert_eq!(c.callback_url.as_deref(), Some(theirs.as_str()));
            }
            v => panic!("{v:?}"),
        }
    }
}

#[test]
fn a_foreign_owner_is_left_alone_under_yield() {
    let d = desired(&[("t", None, "d")]);
    let foreign = "http://127.0.0.1:5555/x".to_string();
    let o = observed(&[
        ("A", vec![entry("t", "plugin:other", Some(foreign.clone()))]),
        ("B", vec![]),
    ]);
    let p = Ctx::new().plan(&d, Some(&o), &Memory::new());
    assert_eq!(p.actions, []);
    assert_eq!(
        p.verdicts["t"],
        Verdict::Conflict(Conflict {
            owner: "plugin:other".into(),
            callback_url: Some(foreign),
            same_source: false,
            next_reclaim_at: None,
        })
    );
}

#[test]
fn reclaim_takes_the_name_back_at_most_once_per_interval() {
    let d = desired(&[("t", None, "d")]);
    let o = observed(&[(
        "A",
        vec![entry(
            "t",
            "plugin:other",
            Some("http://127.0.0.1:5555/x".into()),
        )],
    )]);
    let mut ctx = Ctx::new();
    ctx.policy = ConflictPolicy::Reclaim;
    let p = ctx.plan(&d, Some(&o), &Memory::new());
    assert_eq!(
        p.actions,
        [register(
            "t",
            RegisterReason::Reclaim {
                owner: "plugin:other".into()
            }
        )]
    );
    let t0 = ctx.now;
    let m = mem(vec![(
        "t",
        ToolMemory {
            last_reclaim: Some(t0),
            ..Default::default()
        },
    )]);
    ctx.now = t0 + Duration::from_secs(59);
    let p = ctx.plan(&d, Some(&o), &m);
    assert_eq!(p.actions, []);
    assert!(matches!(&p.verdicts["t"], Verdict::Conflict(c)
        if c.next_reclaim_at == Some(t0 + Duration::from_secs(60))));
    ctx.now = t0 + Duration::from_secs(60);
    assert_eq!(ctx.plan(&d, Some(&o), &m).actions.len(), 1);
}

#[test]
fn a_builtin_is_never_reclaimed() {
    let d = desired(&[("t", None, "d")]);
    let o = observed(&[("A", vec![entry("t", BUILTIN_SOURCE, None)])]);
    let mut ctx = Ctx::new();
    ctx.policy = ConflictPolicy::Reclaim;
    let p = ctx.plan(&d, Some(&o), &Memory::new());
    assert_eq!(p.actions, []);
    assert!(matches!(&p.verdicts["t"], Verdict::Conflict(c) if c.owner == "builtin"));
}

#[test]
fn ours_no_longer_desired_is_unregistered_once_from_every_role() {
    let d = desired(&[("keep", None, "d")]);
    let old = url_of(39999, "previous", "gone");
    let o = observed(&[
        (
            "A",
            vec![
                entry("keep", SRC, Some(ours("keep"))),
                entry("gone", SRC, Some(old.clone())),
                entry(
                    "foreign",
                    "plugin:other",
                    Some("http://127.0.0.1:1/f".into()),
                ),
            ],
        ),
        (
            "B",
            vec![
                entry("keep", SRC, Some(ours("keep"))),
                entry("gone", SRC, Some(old)),
            ],
        ),
    ]);
    let m = mem(vec![("keep", remembered(&d, "keep"))]);
    let p = Ctx::new().plan(&d, Some(&o), &m);
    assert_eq!(
        p.actions,
        [Action::Unregister {
            name: "gone".into(),
            role: None,
            reason: UnregisterReason::NotDesired
        }]
    );
}

#[test]
fn an_undesired_name_that_comes_back_from_elsewhere_is_another_agents() {
    let d = desired(&[]);
    let theirs = url_of(39999, "theirs", "x");
    let o = observed(&[("A", vec![entry("x", SRC, Some(theirs.clone()))])]);
    let m = mem(vec![(
        "x",
        ToolMemory {
            removed_url: Some(theirs.clone()),
            ..Default::default()
        },
    )]);
    let p = Ctx::new().plan(&d, Some(&o), &m);
    assert_eq!(p.actions, []);
    assert_eq!(
        p.strays,
        [Stray {
            name: "x".into(),
            callback_url: Some(theirs)
        }]
    );
    // On our own port it can only be ours: removed again.
    let o = observed(&[("A", vec![entry("x", SRC, Some(url_of(PORT, "old", "x")))])]);
    assert_eq!(Ctx::new().plan(&d, Some(&o), &m).actions.len(), 1);
}

#[test]
fn a_rejected_body_is_not_sent_again_until_it_changes() {
    let d = desired(&[("t", None, "d")]);
    let rejection = |fp| Rejection {
        fingerprint: fp,
        callback_url: ours("t"),
        errors: vec![FieldError {
            loc: "body.description".into(),
            msg: "too long".into(),
        }],
    };
    let m = mem(vec![(
        "t",
        ToolMemory {
            rejected: Some(rejection(d.tools["t"].fingerprint)),
            ..Default::default()
        },
    )]);
    let o = observed(&[("A", vec![])]);
    let p = Ctx::new().plan(&d, Some(&o), &m);
    assert_eq!(p.actions, []);
    assert_eq!(p.verdicts["t"], Verdict::Rejected);
    let changed = desired(&[("t", None, "fixed")]);
    let p = Ctx::new().plan(&changed, Some(&o), &m);
    assert_eq!(p.actions.len(), 1);
}

#[test]
fn a_tool_backing_off_waits_until_its_retry_time() {
    let d = desired(&[("t", None, "d")]);
    let o = observed(&[("A", vec![])]);
    let ctx = Ctx::new();
    let m = mem(vec![(
        "t",
        ToolMemory {
            retry_at: Some(ctx.now + Duration::from_millis(1)),
            ..Default::default()
        },
    )]);
    let p = ctx.plan(&d, Some(&o), &m);
    assert_eq!(p.actions, []);
    assert_eq!(p.verdicts["t"], Verdict::Retrying);
    let later = Ctx {
        now: ctx.now + Duration::from_millis(1),
        ..ctx
    };
    assert_eq!(later.plan(&d, Some(&o), &m).actions.len(), 1);
}

#[test]
fn a_backing_off_tool_that_turns_out_registered_is_in_sync() {
    // ok:false can still have taken effect: the GET decides.
    let d = desired(&[("t", None, "d")]);
    let ctx = Ctx::new();
    let mut m = remembered(&d, "t");
    m.retry_at = Some(ctx.now + Duration::from_secs(10));
    let p = ctx.plan(&d, Some(&everywhere("t")), &mem(vec![("t", m)]));
    assert_eq!(p.verdicts["t"], Verdict::InSync);
}

#[test]
fn an_accepted_registration_the_get_does_not_show_is_unconfirmed() {
    let d = desired(&[("t", None, "d")]);
    let mut m = remembered(&d, "t");
    m.awaiting_confirmation = true;
    let o = observed(&[("A", vec![])]);
    let p = Ctx::new().plan(&d, Some(&o), &mem(vec![("t", m.clone())]));
    assert_eq!(p.actions, []);
    assert_eq!(p.verdicts["t"], Verdict::Unconfirmed);
    // The same for a removal.
    let none = desired(&[]);
    let o = observed(&[("A", vec![entry("t", SRC, Some(ours("t")))])]);
    let p = Ctx::new().plan(&none, Some(&o), &mem(vec![("t", m)]));
    assert_eq!(p.actions, []);
    assert_eq!(p.unconfirmed_removals, ["t"]);
}

#[test]
fn a_tool_rescoped_to_one_role_loses_its_copies_elsewhere() {
    let d = desired(&[("t", Some("B"), "d")]);
    let p = Ctx::new().plan(&d, Some(&everywhere("t")), &Memory::new());
    assert_eq!(
        p.actions,
        [
            register("t", RegisterReason::Changed),
            Action::Unregister {
                name: "t".into(),
                role: Some("A".into()),
                reason: UnregisterReason::LeftoverInRole
            }
        ]
    );
}

#[test]
fn authority_compares_scheme_host_and_port_only() {
    assert!(same_authority(
        "http://127.0.0.1:80/a/b",
        "http://127.0.0.1/c"
    ));
    assert!(same_authority(
        "http://LOCALHOST:9/a",
        "http://localhost:9/b"
    ));
    assert!(!same_authority(
        "http://127.0.0.1:9/a",
        "http://127.0.0.1:10/a"
    ));
    assert!(!same_authority("not a url", "not a url"));
}

#[test]
fn a_leftover_copy_that_survives_an_accepted_unregister_backs_off() {
    let d = desired(&[("t", Some("B"), "d")]);
    let mut m = remembered(&d, "t");
    m.awaiting_confirmation = true;
    let p = Ctx::new().plan(&d, Some(&everywhere("t")), &mem(vec![("t", m)]));
    assert_eq!(p.actions, []);
    assert_eq!(p.verdicts["t"], Verdict::Unconfirmed);
}
