//! `/readyz` transitions against the whole daemon and the stand-in: not
//! ready while main_server is down or storage-blocked, ready once every
//! tool is registered, not ready after a restart until the tools are back,
//! and not ready while a tool is in conflict.

use serde_json::json;

use crate::support::admin::*;
use crate::support::{Workspace, dev_server, unregister_foreign};

fn reasons(body: &serde_json::Value) -> String {
    body["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_main_server_and_registration() {
    let h = dev_server().await;
    h.stop_listener().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;

    // main_server down.
    run.wait("a failed GET", |s| s.main_server.failed_attempts >= 1)
        .await;
    let body = run.wait_readyz(503).await;
    assert_eq!(body["ready"], false);
    assert!(
        reasons(&body).contains("main_server is unreachable"),
        "{body}"
    );

    // Up, but its storage still starting: 409s are not ready either.
    h.set_storage_blocked(true);
    h.start_listener().await.unwrap();
    let before = run
        .daemon
        .registration
        .snapshot()
        .main_server
        .failed_attempts;
    run.wait("a 409", |s| s.main_server.failed_attempts > before)
        .await;
    let body = run.wait_readyz(503).await;
    assert!(reasons(&body).contains("storage_startup_blocked"), "{body}");

    // Storage ready: the tool gets registered and the sidecar is ready.
    h.set_storage_blocked(false);
    let body = run.wait_readyz(200).await;
    assert_eq!(body, json!({"ready": true, "reasons": []}));
    assert!(h.registry_snapshot().tool("小八", "greet").is_some());

    // A restart that forgets everything, caught while its storage starts:
    // not ready until the tool is registered again.
    h.set_storage_blocked(true);
    h.restart();
    let body = run.wait_readyz(503).await;
    assert!(!reasons(&body).is_empty());
    h.set_storage_blocked(false);
    run.wait_readyz(200).await;
    assert!(h.registry_snapshot().tool("小八", "greet").is_some());
    let s = run.daemon.registration.snapshot();
    assert!(s.tools_lost >= 1 && s.loss_events >= 1, "{s:#?}");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_not_ready_until_the_name_is_free() {
    let h = dev_server().await;
    let (_ws, run) = in_conflict_over_greet(&h).await;
    let body = run.wait_readyz(503).await;
    assert!(
        reasons(&body).contains("`greet` is in conflict (held by source `plugin:other`)"),
        "{body}"
    );
    // The other owner leaves; the next poll registers ours.
    unregister_foreign(&h.url(), "greet").await;
    run.wait_readyz(200).await;
    run.stop().await;
}
