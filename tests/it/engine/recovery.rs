//! The registration engine against the in-process stand-in over real
//! sockets: registering from cold, idling, and getting every tool back after
//! main_server forgets it (restart, downtime, eviction, removal).

use std::time::{Duration, Instant};

use neko_sidecar::devserver::InvokeRequest;
use neko_sidecar::registration::ToolState;

use crate::support::engine::*;
use crate::support::{dev_server, refused_port, unregister_foreign, wait_stand_in};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_from_cold_then_sends_one_get_per_poll_and_nothing_else() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("a"), tool("b"), tool("c").role("Lanlan")]);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("converged", |s| s.converged && registered(s, &d))
        .await;
    assert!(all_present(&h, &d, &run.url_for));
    // The role-scoped tool is only in its role.
    assert!(h.registry_snapshot().tool("小八", "c").is_none());

    h.clear_request_log();
    let before = run.status.snapshot().passes;
    let after = run.passes(4).await.passes;
    let log = h.requests();
    assert!(
        log.iter()
            .all(|r| r.method == "GET" && r.path == "/api/tools"),
        "{log:#?}"
    );
    // One GET per pass (a fifth may be in flight at the moment we read).
    let gets = log.len() as u64;
    assert!(
        gets >= after - before && gets <= after - before + 1,
        "{gets} GETs for {} passes",
        after - before
    );
    // Spaced by the poll interval, not faster (each gap may lose a little
    // to scheduling, the total cannot).
    for w in log.windows(2) {
        let gap = w[1].at_unix_ms - w[0].at_unix_ms;
        assert!(
            gap >= 50,
            "GETs {gap} ms apart with a 100 ms poll: {log:#?}"
        );
    }
    if let (Some(first), Some(last)) = (log.first(), log.last()) {
        let span = last.at_unix_ms - first.at_unix_ms;
        assert!(span >= 90 * (gets - 1), "{gets} GETs in {span} ms");
    }
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_main_server_restart_brings_every_tool_back() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = many(50);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("all registered", |s| registered(s, &d)).await;
    for _ in 0..3 {
        h.restart();
        assert!(!all_present(&h, &d, &run.url_for));
        wait_stand_in(&h, "every tool back", |h| all_present(h, &d, &run.url_for)).await;
    }
    run.wait("registered again", |s| s.converged && registered(s, &d))
        .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_server_down_then_up_on_the_same_port_gets_everything_back_within_cap_plus_poll() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = many(20);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("all registered", |s| registered(s, &d)).await;

    h.stop_listener().await;
    h.restart();
    // Down long enough for the backoff to reach its cap (50, 100, 200, 400 ms).
    run.wait("several failed GETs", |s| {
        s.main_server.reachable == Some(false) && s.main_server.failed_attempts >= 6
    })
    .await;
    h.start_listener().await.unwrap();
    let up = Instant::now();
    wait_stand_in(&h, "every tool back", |h| all_present(h, &d, &run.url_for)).await;
    let took = up.elapsed();
    // backoff_max 400 ms + poll 100 ms, plus slack for a loaded machine.
    assert!(
        took < Duration::from_millis(400 + 100 + 400),
        "took {took:?}"
    );
    let s = run
        .wait("reachable", |s| s.main_server.reachable == Some(true))
        .await;
    assert_eq!(s.main_server.failed_attempts, 0);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_evicted_after_three_refused_callbacks_come_back() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("a"), tool("b")]);
    // Nothing listens on the callback port: every call is refused, and
    // main_server evicts a plugin: source at the third refusal.
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("all registered", |s| registered(s, &d)).await;
    h.clear_request_log();
    for i in 0..3 {
        let answer = h
            .invoke(InvokeRequest {
                name: "a".into(),
                arguments: Some(serde_json::json!({"city": "x"})),
                raw_arguments: None,
                role: None,
                sees_images: None,
            })
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}; log: {:#?}", h.requests()));
        assert!(answer.is_error, "{answer:?}");
    }
    // The engine noticed the eviction (it registered both again) and both
    // are back.
    wait_stand_in(&h, "evicted tools registered again", |h| {
        let log = h.requests();
        registers_of(&log, "a") >= 1
            && registers_of(&log, "b") >= 1
            && all_present(h, &d, &run.url_for)
    })
    .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_removed_by_someone_else_come_back_within_a_poll() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("a"), tool("b")]);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("all registered", |s| registered(s, &d)).await;
    unregister_foreign(&h.url(), "a").await;
    let gone = Instant::now();
    wait_stand_in(&h, "a back", |h| all_present(h, &d, &run.url_for)).await;
    assert!(
        gone.elapsed() < Duration::from_millis(100 + 400),
        "{:?}",
        gone.elapsed()
    );
    // The status follows once the next GET confirms it.
    run.wait("a registered", |s| {
        s.state("a") == Some(&ToolState::Registered)
    })
    .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_a_long_backoff_at_once() {
    let h = dev_server().await;
    let cfg = agent_config(
        &h.url(),
        "poll_interval = \"100ms\"\nbackoff_initial = \"30s\"\nbackoff_max = \"60s\"\n",
    );
    let d = desired(&[tool("a")]);
    h.stop_listener().await;
    let run = start(&cfg, d, url_for(refused_port(), "tok"));
    // The first GET is refused: the next try is up to 30 s away.
    run.wait("main_server unreachable", |s| {
        s.main_server.reachable == Some(false)
    })
    .await;
    let asked = Instant::now();
    run.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), run.task)
        .await
        .expect("the engine must stop at once, not after its backoff")
        .unwrap();
    assert!(asked.elapsed() < Duration::from_secs(1));
}
