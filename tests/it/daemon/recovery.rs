//! Recovery at daemon level (issue 4's "done when"): after a main_server
//! restart every tool is back within a poll; after main_server was down for
//! a while and comes back on the same port, within the backoff cap plus a
//! poll; a sidecar killed with SIGKILL has its tools evicted by main_server
//! after three refused callbacks, and a new sidecar with the same config
//! registers them again with its own callback URLs, without a conflict;
//! manifests changed or deleted while the sidecar was down are applied when
//! it starts again. The first two run the daemon in-process (to read its
//! status), the others the real binary (to kill it).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use neko_sidecar::devserver::DevServerHandle;
use serde_json::json;

use crate::support::daemon::*;
use crate::support::{Workspace, call, describe, dev_server, invoke, wait_stand_in, wait_status};

/// Scheduling slack on top of a computed bound, on a busy 2-core machine.
const MARGIN: Duration = Duration::from_millis(1500);
/// `AgentToml`'s defaults, which these bounds are computed from.
const POLL: Duration = Duration::from_millis(150);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// alpha and beta for every role, gamma for Lanlan only.
fn manifest() -> String {
    format!(
        "{}{}",
        tools(&["alpha", "beta"], "v1"),
        tool("gamma", "v1").replace(
            "description = \"gamma v1\"",
            "description = \"gamma v1\"\nrole = \"Lanlan\""
        )
    )
}

fn all_back(h: &DevServerHandle) -> bool {
    let snap = h.registry_snapshot();
    our_names(&snap, "小八") == ["alpha", "beta"]
        && our_names(&snap, "Lanlan") == ["alpha", "beta", "gamma"]
}

/// Tool name → callback URL of our tools, as role `小八` holds them.
fn callback_urls(h: &DevServerHandle) -> BTreeMap<String, String> {
    ours(&h.registry_snapshot(), "小八")
        .iter()
        .map(|t| (t.name.clone(), t.callback_url.clone().unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_main_server_restart_gets_every_tool_back_within_a_poll() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &manifest());
    let d = InProcess::start(&ws.write_config(&ws.agent(&h.url()))).await;
    wait_stand_in(&h, "every tool registered", all_back).await;
    wait_status(&d.daemon().registration, "convergence", |s| s.converged).await;

    let mark = h.requests().len();
    let restarted = Instant::now();
    h.restart();
    assert!(our_names(&h.registry_snapshot(), "Lanlan").is_empty());
    wait_stand_in(&h, "every tool back", all_back).await;
    let took = restarted.elapsed();
    assert!(took < POLL + MARGIN, "back after {took:?}");

    // Each tool registered once, gamma for its role only.
    let mut registered: Vec<(String, serde_json::Value)> = h.requests()[mark..]
        .iter()
        .filter(|r| r.path == "/api/tools/register")
        .map(|r| {
            (
                r.body["name"].as_str().unwrap().to_owned(),
                r.body["role"].clone(),
            )
        })
        .collect();
    registered.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        registered,
        [
            ("alpha".to_owned(), json!(null)),
            ("beta".to_owned(), json!(null)),
            ("gamma".to_owned(), json!("Lanlan")),
        ]
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_server_down_then_up_is_back_within_the_backoff_cap_and_a_poll() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &manifest());
    let d = InProcess::start(&ws.write_config(&ws.agent(&h.url()))).await;
    wait_stand_in(&h, "every tool registered", all_back).await;

    // Down long enough for the backoff to reach its cap, and forgetting
    // everything, as a real main_server restart with downtime does.
    h.stop_listener().await;
    h.restart();
    wait_status(&d.daemon().registration, "five failed attempts", |s| {
        s.main_server.reachable == Some(false) && s.main_server.failed_attempts >= 5
    })
    .await;

    h.start_listener().await.unwrap();
    let up = Instant::now();
    wait_stand_in(&h, "every tool back", all_back).await;
    let took = up.elapsed();
    assert!(
        took < BACKOFF_MAX + POLL + MARGIN,
        "back {took:?} after main_server came up"
    );
    wait_status(&d.daemon().registration, "reachable again", |s| {
        s.main_server.reachable == Some(true) && s.main_server.failed_attempts == 0
    })
    .await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sidecar_is_evicted_and_its_successor_takes_over_without_conflict() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha", "beta"], "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    let mut a = Sidecar::spawn(&config);
    wait_holds(&h, &[("alpha", "v1"), ("beta", "v1")]).await;
    let a_urls = callback_urls(&h);
    a.kill().await;

    // main_server calls the dead sidecar: refused, refused, refused, and at
    // the third every tool of our source on that host:port is evicted.
    for attempt in 1..=3 {
        assert_eq!(
            our_names(&h.registry_snapshot(), "小八"),
            ["alpha", "beta"],
            "still listed before call {attempt}"
        );
        let answer = invoke(&h, call("alpha", json!({}))).await;
        assert!(answer.is_error, "{answer:?}");
        assert_eq!(
            answer.error,
            Some(json!(
                "remote tool callback HTTP failure: ConnectError: All connection attempts failed"
            ))
        );
    }
    let snap = h.registry_snapshot();
    for role in snap.role_names() {
        assert!(ours(&snap, role).is_empty(), "evicted: {}", describe(&snap));
    }

    // The same config started again: back at its first pass, new URLs.
    let started = Instant::now();
    let b = Sidecar::spawn(&config);
    wait_holds(&h, &[("alpha", "v1"), ("beta", "v1")]).await;
    let took = started.elapsed();
    assert!(took < POLL + MARGIN, "back {took:?} after the start");
    let b_urls = callback_urls(&h);
    for (name, url) in &b_urls {
        assert_ne!(Some(url), a_urls.get(name), "{name} has a new callback URL");
    }
    let answer = invoke(&h, call("alpha", json!({}))).await;
    assert!(!answer.is_error, "{answer:?}");
    assert_eq!(answer.output, json!("alpha:v1"));
    let conflicts: Vec<String> = b
        .stderr()
        .into_iter()
        .filter(|l| l.to_lowercase().contains("conflict"))
        .collect();
    assert!(conflicts.is_empty(), "{conflicts:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_changed_while_down_are_applied_at_the_next_start() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tool("alpha", "v1"));
    ws.write_tool("y.toml", &tool("beta", "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    let mut a = Sidecar::spawn(&config);
    wait_holds(&h, &[("alpha", "v1"), ("beta", "v1")]).await;
    // SIGKILL: nothing is cleared, main_server still lists both.
    a.kill().await;

    ws.write_tool("x.toml", &tool("alpha", "v2"));
    std::fs::remove_file(ws.tool_path("y.toml")).unwrap();
    let mark = h.requests().len();
    let _b = Sidecar::spawn(&config);
    wait_holds(&h, &[("alpha", "v2")]).await;

    let writes: Vec<(String, String)> = h.requests()[mark..]
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| {
            (
                r.path.clone(),
                r.body["name"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert!(
        writes.contains(&("/api/tools/unregister".into(), "beta".into())),
        "{writes:#?}"
    );
    assert!(
        writes.contains(&("/api/tools/register".into(), "alpha".into())),
        "{writes:#?}"
    );
}
