//! Who owns a tool name: foreign registrations (left alone under `yield`,
//! taken back at a limited rate under `reclaim`), a killed and restarted
//! sidecar (its old entries are its own), two live agents sharing one
//! source (one settles as a conflict, no flapping), desired-state changes
//! and removals, and the shutdown clear.

use std::sync::Arc;
use std::time::{Duration, Instant};

use neko_sidecar::devserver::Scope;
use neko_sidecar::engine::ClearMethod;
use neko_sidecar::registration::ToolState;
use reqwest::StatusCode;

use crate::support::engine::*;
use crate::support::{count_requests, dev_server, refused_port, register_foreign, wait_stand_in};

const FOREIGN_URL: &str = "http://127.0.0.1:5555/other/t";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_registration_is_left_alone_by_default() {
    let h = dev_server().await;
    register_foreign(&h.url(), "t", "plugin:other", FOREIGN_URL).await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("t"), tool("u")]);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    let s = run
        .wait("conflict on t, u registered", |s| {
            matches!(s.state("t"), Some(ToolState::Conflict { .. }))
                && s.state("u") == Some(&ToolState::Registered)
        })
        .await;
    assert_eq!(
        s.state("t"),
        Some(&ToolState::Conflict {
            owner: "plugin:other".into(),
            callback_url: Some(FOREIGN_URL.into()),
            same_source: false,
        })
    );
    run.passes(3).await;
    assert_eq!(registers_of(&h.requests(), "t"), 0);
    let snap = h.registry_snapshot();
    assert_eq!(snap.tool("小八", "t").unwrap().source, "plugin:other");
    assert!(run.status.snapshot().converged);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_takes_the_name_back_but_not_faster_than_the_reclaim_interval() {
    let h = dev_server().await;
    register_foreign(&h.url(), "t", "plugin:other", FOREIGN_URL).await;
    let reg = format!("{FAST}conflict_policy = \"reclaim\"\nreclaim_interval = \"1h\"\n");
    let cfg = agent_config(&h.url(), &reg);
    let d = desired(&[tool("t")]);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    wait_stand_in(&h, "t reclaimed", |h| all_present(h, &d, &run.url_for)).await;
    run.wait("registered", |s| registered(s, &d)).await;

    // The other agent takes it back: we do not fight at poll speed.
    register_foreign(&h.url(), "t", "plugin:other", FOREIGN_URL).await;
    run.wait("conflict", |s| {
        matches!(s.state("t"), Some(ToolState::Conflict { .. }))
    })
    .await;
    run.passes(4).await;
    assert_eq!(registers_of(&h.requests(), "t"), 1);
    assert_eq!(
        h.registry_snapshot().tool("小八", "t").unwrap().source,
        "plugin:other"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_sidecar_takes_its_old_entries_over_within_a_poll() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = many(20);
    let first = start(&cfg, d.clone(), url_for(refused_port(), "first"));
    first.wait("registered", |s| registered(s, &d)).await;
    // Killed: no clear, its entries stay with its old URLs.
    first.stop().await;

    // Restarted with an ephemeral port: new port and new token.
    let started = Instant::now();
    let second = start(&cfg, d.clone(), url_for(refused_port(), "second"));
    wait_stand_in(&h, "every tool on the new URLs", |h| {
        all_present(h, &d, &second.url_for)
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(100 + 400),
        "{:?}",
        started.elapsed()
    );
    let s = second
        .wait("converged", |s| s.converged && registered(s, &d))
        .await;
    assert!(
        s.tools
            .values()
            .all(|t| !matches!(t.state, ToolState::Conflict { .. }))
    );
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_live_agents_with_one_source_settle_without_flapping() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("a"), tool("b")]);
    let one = start(&cfg, d.clone(), url_for(refused_port(), "one"));
    one.wait("registered", |s| registered(s, &d)).await;
    let two = start(&cfg, d.clone(), url_for(refused_port(), "two"));
    // The newcomer cannot tell the first one's entries from a dead run's,
    // takes them over once; the first then sees a live other agent.
    two.wait("two registered", |s| registered(s, &d)).await;
    one.wait("one in conflict", |s| {
        d.tools.keys().all(|n| {
            matches!(
                s.state(n),
                Some(ToolState::Conflict {
                    same_source: true,
                    ..
                })
            )
        })
    })
    .await;
    h.clear_request_log();
    one.passes(4).await;
    two.passes(4).await;
    assert_eq!(
        count_requests(&h.requests(), "POST", "/api/tools/register"),
        0
    );
    assert!(all_present(&h, &d, &two.url_for));
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tool_is_registered_again_and_a_removed_one_unregistered() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("a"), tool("b"), tool("c")]);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("registered", |s| registered(s, &d)).await;

    // a gets a new schema, b is removed, c is rescoped to one role.
    let d2 = desired(&[tool("a").property("town"), tool("c").role("Lanlan")]);
    run.desired.send(Arc::new(d2.clone())).unwrap();
    wait_stand_in(&h, "the new state", |h| {
        let s = h.registry_snapshot();
        let a_new = s
            .tool("Lanlan", "a")
            .is_some_and(|t| t.parameters["properties"].get("town").is_some());
        let a_new_too = s
            .tool("小八", "a")
            .is_some_and(|t| t.parameters["properties"].get("town").is_some());
        let b_gone = s.tool("Lanlan", "b").is_none() && s.tool("小八", "b").is_none();
        let c_scoped = s
            .tool("Lanlan", "c")
            .is_some_and(|t| t.scope == Scope::Role)
            && s.tool("小八", "c").is_none();
        a_new && a_new_too && b_gone && c_scoped
    })
    .await;
    let s = run
        .wait("converged", |s| s.converged && registered(s, &d2))
        .await;
    assert!(s.state("b").is_none());
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_left_from_an_earlier_run_but_no_longer_declared_is_removed_once() {
    let h = dev_server().await;
    let old_port = refused_port();
    register_foreign(
        &h.url(),
        "gone",
        SOURCE,
        &format!("http://127.0.0.1:{old_port}/cb/old/gone"),
    )
    .await;
    register_foreign(&h.url(), "theirs", "plugin:other", FOREIGN_URL).await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("a")]);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    wait_stand_in(&h, "gone removed", |h| {
        h.registry_snapshot().tool("小八", "gone").is_none()
    })
    .await;
    run.wait("converged", |s| s.converged && registered(s, &d))
        .await;

    // Registered again by someone from elsewhere with our source: another
    // agent. Left alone, not removed again.
    register_foreign(
        &h.url(),
        "gone",
        SOURCE,
        &format!("http://127.0.0.1:{old_port}/cb/old/gone"),
    )
    .await;
    run.passes(4).await;
    let log = h.requests();
    assert_eq!(
        count_requests(&log, "POST", "/api/tools/unregister"),
        1,
        "{log:#?}"
    );
    let snap = h.registry_snapshot();
    assert!(snap.tool("小八", "gone").is_some());
    assert_eq!(snap.tool("小八", "theirs").unwrap().source, "plugin:other");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_all_removes_our_tools_in_one_round_trip_and_falls_back_per_name() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("a"), tool("b"), tool("c").role("Lanlan")]);
    let builtins = h.registry_snapshot().names("小八").len();

    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("registered", |s| registered(s, &d)).await;
    let engine = run.stop().await;
    h.clear_request_log();
    let report = engine.clear_all(Duration::from_secs(2)).await.unwrap();
    assert_eq!(report.method, ClearMethod::Clear);
    // (tool, role) pairs: a and b in two roles, c in one.
    assert_eq!(report.removed, 5);
    assert_eq!(h.requests().len(), 1);
    assert_eq!(h.registry_snapshot().names("小八").len(), builtins);

    // Register again, then make the clear fail: one unregister per name.
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok2"));
    run.wait("registered", |s| registered(s, &d)).await;
    let engine = run.stop().await;
    h.fail_next(1, StatusCode::INTERNAL_SERVER_ERROR);
    let report = engine.clear_all(Duration::from_secs(2)).await.unwrap();
    assert_eq!(report.method, ClearMethod::PerName);
    assert_eq!(report.removed, 3);
    assert!(report.failed.is_empty());
    let snap = h.registry_snapshot();
    assert_eq!(snap.names("小八").len(), builtins);
    assert!(snap.tool("Lanlan", "c").is_none());
}
