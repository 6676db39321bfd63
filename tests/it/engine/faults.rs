//! The registration engine through main_server's failure modes: the 409
//! storage-startup window, 5xx, answers slower than the request timeout,
//! `ok:false` with failed roles, 422 rejections and roles that come and go.
//! Each test checks recovery and bounds the requests sent (no busy loop).
//!
//! The jitter is fixed at 1.0 (every delay is its full ceiling: 50, 100,
//! 200, 400, 400 ms...) so the bounds are exact rather than statistical.

use std::time::Duration;

use neko_sidecar::backoff::Jitter;
use neko_sidecar::client::FieldError;
use neko_sidecar::devserver::RequestRecord;
use neko_sidecar::registration::ToolState;
use reqwest::StatusCode;

use crate::support::engine::*;
use crate::support::{count_requests, dev_server, refused_port, wait_stand_in};

fn full_jitter_ceiling(e: neko_sidecar::engine::Engine) -> neko_sidecar::engine::Engine {
    e.with_jitter(Jitter::fixed(1.0))
}

/// Gaps between consecutive requests, in ms.
fn gaps(log: &[RequestRecord]) -> Vec<u64> {
    log.windows(2)
        .map(|w| w[1].at_unix_ms - w[0].at_unix_ms)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_startup_409_window_is_waited_out_with_backoff() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = many(10);
    let run = start_engine(
        &cfg,
        d.clone(),
        url_for(refused_port(), "tok"),
        full_jitter_ceiling,
    );
    run.wait("registered", |s| registered(s, &d)).await;

    // main_server restarts and its storage takes a while.
    h.set_storage_blocked(true);
    h.restart();
    h.clear_request_log();
    let s = run
        .wait("six refused GETs", |s| s.main_server.failed_attempts >= 6)
        .await;
    assert!(
        s.main_server
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("storage_startup_blocked")),
        "{:?}",
        s.main_server
    );
    let log = h.requests();
    // Only GETs: nothing is sent blind while the list cannot be read.
    assert!(log.iter().all(|r| r.method == "GET"), "{log:#?}");
    assert!(log.len() <= 7, "{} requests for 6 failures", log.len());
    // Backing off, not looping: the 4th delay onwards is the 400 ms cap.
    let g = gaps(&log);
    assert!(g.iter().skip(3).all(|&ms| ms >= 350), "gaps {g:?}");

    h.set_storage_blocked(false);
    wait_stand_in(&h, "every tool back", |h| all_present(h, &d, &run.url_for)).await;
    run.wait("registered again", |s| registered(s, &d)).await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_500s_is_recovered_from_with_few_requests() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = many(10);
    let run = start_engine(
        &cfg,
        d.clone(),
        url_for(refused_port(), "tok"),
        full_jitter_ceiling,
    );
    run.wait("registered", |s| registered(s, &d)).await;

    h.fail_next(5, StatusCode::INTERNAL_SERVER_ERROR);
    h.restart();
    h.clear_request_log();
    wait_stand_in(&h, "every tool back", |h| all_present(h, &d, &run.url_for)).await;
    run.wait("registered again", |s| registered(s, &d)).await;
    let log = h.requests();
    let failed = log.iter().filter(|r| r.status == Some(500)).count();
    assert_eq!(failed, 5);
    // 5 failed GETs, 1 GET that worked, 10 registers, 1 confirming GET,
    // and at most a poll or two more while we read.
    assert!(
        log.len() <= 5 + 1 + 10 + 1 + 2,
        "{} requests: {log:#?}",
        log.len()
    );
    assert_eq!(count_requests(&log, "POST", "/api/tools/register"), 10);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_slower_than_the_request_timeout_are_survived() {
    let h = dev_server().await;
    let cfg = agent_config_with(&h.url(), FAST, "200ms");
    let d = many(5);
    let run = start_engine(
        &cfg,
        d.clone(),
        url_for(refused_port(), "tok"),
        full_jitter_ceiling,
    );
    run.wait("registered", |s| registered(s, &d)).await;

    h.set_delay(Duration::from_millis(500));
    h.restart();
    let s = run
        .wait("timed-out GETs", |s| s.main_server.failed_attempts >= 3)
        .await;
    let err = s.main_server.last_error.clone().unwrap_or_default();
    assert!(err.contains("no answer within 200ms"), "{err}");
    h.set_delay(Duration::ZERO);
    wait_stand_in(&h, "every tool back", |h| all_present(h, &d, &run.url_for)).await;
    run.wait("registered again", |s| registered(s, &d)).await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_false_with_failed_roles_is_retried_with_backoff_until_the_role_accepts() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("scoped").role("Lanlan"), tool("global")]);
    h.fail_role_sync("Lanlan", true);
    h.clear_request_log();
    let run = start_engine(
        &cfg,
        d.clone(),
        url_for(refused_port(), "tok"),
        full_jitter_ceiling,
    );
    // The registry was written despite ok:false, so the GET lists it; only
    // a later ok:true tells us the server holds our schema.
    let s = run
        .wait("scoped retried 4 times", |s| {
            matches!(s.state("scoped"), Some(ToolState::Retrying { attempt, .. }) if *attempt >= 4)
        })
        .await;
    match s.state("scoped") {
        Some(ToolState::Retrying { last_error, .. }) => {
            assert!(last_error.contains("ok:false"), "{last_error}");
            assert!(last_error.contains("Lanlan"), "{last_error}");
        }
        other => panic!("{other:?}"),
    }
    // The global tool is registered regardless (partial success is ok:true).
    assert_eq!(s.state("global"), Some(&ToolState::Registered));
    let attempts = match s.state("scoped") {
        Some(ToolState::Retrying { attempt, .. }) => *attempt as usize,
        _ => unreachable!(),
    };
    let log = h.requests();
    assert!(registers_of(&log, "scoped") <= attempts + 1, "{log:#?}");

    h.fail_role_sync("Lanlan", false);
    run.wait("scoped registered", |s| registered(s, &d)).await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_422_is_reported_and_not_retried_until_the_tool_changes() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let long = "x".repeat(65);
    let d = with_unchecked(desired(&[tool("good")]), "good", &long);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    let s = run
        .wait("good registered, long rejected", |s| {
            s.state("good") == Some(&ToolState::Registered)
                && matches!(s.state(&long), Some(ToolState::Rejected { .. }))
        })
        .await;
    match s.state(&long) {
        Some(ToolState::Rejected { errors }) => {
            assert_eq!(errors.len(), 1, "{errors:?}");
            let FieldError { loc, msg } = &errors[0];
            assert_eq!(loc, "body.name");
            assert!(msg.contains("at most 64 characters"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    run.passes(5).await;
    assert_eq!(registers_of(&h.requests(), &long), 1);
    assert!(run.status.snapshot().converged);

    // A new manifest version (new fingerprint) is tried once more.
    let mut d2 = d.clone();
    let changed = with_unchecked(
        desired(&[tool("good").description("changed")]),
        "good",
        &long,
    );
    d2.tools.insert(long.clone(), changed.tools[&long].clone());
    run.desired.send(std::sync::Arc::new(d2)).unwrap();
    wait_stand_in(&h, "the changed tool sent", |h| {
        registers_of(&h.requests(), &long) == 2
    })
    .await;
    run.passes(3).await;
    assert_eq!(registers_of(&h.requests(), &long), 2);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_appears_later_gets_its_tool_and_the_global_ones() {
    let h = dev_server().await;
    let cfg = agent_config(&h.url(), FAST);
    let d = desired(&[tool("late").role("Later"), tool("everywhere")]);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    run.wait("waiting for the role", |s| {
        s.state("late")
            == Some(&ToolState::WaitingForRole {
                role: Some("Later".into()),
            })
            && s.state("everywhere") == Some(&ToolState::Registered)
    })
    .await;
    run.passes(3).await;
    assert_eq!(registers_of(&h.requests(), "late"), 0);
    assert!(run.status.snapshot().converged);

    assert!(h.add_role("Later"));
    wait_stand_in(&h, "both in the new role", |h| {
        let s = h.registry_snapshot();
        s.tool("Later", "late").is_some() && s.tool("Later", "everywhere").is_some()
    })
    .await;
    run.wait("registered", |s| registered(s, &d)).await;

    assert!(h.remove_role("Later"));
    run.wait("waiting again", |s| {
        matches!(s.state("late"), Some(ToolState::WaitingForRole { .. }))
    })
    .await;
    run.stop().await;
}
