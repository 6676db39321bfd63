//! `/status`, `/healthz` and the request gates against the whole daemon
//! (in-process, real sockets) and the in-process stand-in main_server.

use crate::support::admin::*;
use crate::support::{Workspace, dev_server, refused_port};

// Its handlers are `sh` scripts, so Unix only.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_server_tools_calls_and_manifest_errors() {
    use crate::support::call;
    use neko_sidecar::registration::ToolState;
    use serde_json::json;

    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    // A second file in error: its problem shows with file:line:col.
    ws.write_tool(
        "broken.toml",
        "[[tool]]\nname = \"broken\"\ntimeout_seconds = 999\ndescription = \"d\"\nhandler = { type = \"http\", url = \"http://127.0.0.1:9/x\" }\n",
    );
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("greet registered", |s| {
        s.state("greet") == Some(&ToolState::Registered)
    })
    .await;

    // Two calls as the model would make them: one fine, one invalid.
    for args in [json!({"name": "Ada"}), json!({})] {
        h.invoke(call("greet", args)).await.unwrap();
    }

    let s = run.status_json().await;
    assert_eq!(s["source"], SOURCE);
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert!(s["uptime_seconds"].is_u64());
    assert!(s["started_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(s["ready"], true, "{s:#}");
    assert_eq!(s["not_ready"], json!([]));

    let ms = &s["main_server"];
    assert_eq!(ms["url"], h.url());
    assert_eq!(ms["reachable"], true);
    assert_eq!(ms["failed_attempts"], 0);
    assert!(ms["last_contact"].is_string());
    assert!(ms["next_attempt_at"].is_null());

    assert!(s["engine"]["passes"].as_u64().unwrap() >= 1);
    assert!(s["engine"]["registrations"]["accepted"].as_u64().unwrap() >= 1);

    let tools = s["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{s:#}");
    let t = &tools[0];
    assert_eq!(t["name"], "greet");
    assert_eq!(t["role"], json!(null));
    assert_eq!(t["state"], "registered");
    assert_eq!(t["handler"], "exec");
    assert_eq!(t["timeout_seconds"], 5.0);
    assert_eq!(t["calls"], 2);
    assert_eq!(t["failures"], 1);
    assert_eq!(t["in_flight"], 0);
    assert!(t["last_registered"].is_string());
    assert!(t["since"].is_string());
    assert!(t["last_error"].is_null());
    // The URL main_server holds is the one shown.
    let listed = h
        .registry_snapshot()
        .tool("Lanlan", "greet")
        .and_then(|t| t.callback_url.clone())
        .unwrap();
    assert_eq!(t["callback_url"], listed);
    assert!(
        t["declared_at"]
            .as_str()
            .unwrap()
            .ends_with("tools/greet.toml:1:1")
    );

    let m = &s["manifests"];
    assert_eq!(m["files_in_error"], 1);
    assert_eq!(m["tools"], 1);
    let broken = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("broken.toml"))
        .unwrap();
    assert_eq!(broken["health"], "error");
    assert_eq!(broken["serving_last_good"], false);
    let d = &broken["diagnostics"][0];
    assert_eq!(d["severity"], "error");
    assert_eq!((d["line"].as_u64(), d["col"].as_u64()), (Some(3), Some(19)));
    assert!(
        d["text"]
            .as_str()
            .unwrap()
            .contains("broken.toml:3:19: error:"),
        "{d}"
    );
    assert_eq!(s["callback_rejections"]["unknown_token"], 0);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_other_than_registered_show_their_details() {
    let h = dev_server().await;
    // Someone else holds `greet` first.
    let (_ws, run) = in_conflict_over_greet(&h).await;
    let s = run.status_json().await;
    let t = &s["tools"][0];
    assert_eq!(t["state"], "conflict");
    assert_eq!(t["owner"], "plugin:other");
    assert_eq!(t["owner_callback_url"], "http://127.0.0.1:1/x");
    assert_eq!(t["same_source"], false);
    assert!(t["last_error"].as_str().unwrap().contains("plugin:other"));
    assert_eq!(s["ready"], false);
    run.stop().await;

    // main_server down: the tool retries nothing (no GET answers), and
    // main_server's backoff shows.
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&format!("http://127.0.0.1:{}", refused_port()), "")).await;
    run.wait("two failed GETs", |s| s.main_server.failed_attempts >= 2)
        .await;
    let s = run.status_json().await;
    let ms = &s["main_server"];
    assert_eq!(ms["reachable"], false);
    assert!(ms["failed_attempts"].as_u64().unwrap() >= 2);
    assert!(ms["last_error"].is_string());
    assert!(ms["next_attempt_at"].is_string());
    assert_eq!(s["tools"][0]["state"], "pending");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_unknown_paths_and_the_host_gate() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;
    assert_eq!(run.get("/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(run.get("/nope").await.0, 404);
    // A DNS-rebinding page would send its own host name.
    let r = run
        .http
        .get(format!("{}/status", run.url()))
        .header("host", "evil.example:48931")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = run
        .http
        .get(format!("{}/healthz", run.url()))
        .header("host", "localhost:48931")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_wiring_serves_the_configured_admin_address() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let path = ws.admin_config(&h.url(), "127.0.0.1:0");
    let (cfg, _) = neko_sidecar::config::load(&path);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let daemon = neko_sidecar::daemon::start(
        cfg.unwrap(),
        neko_sidecar::daemon::DaemonOptions::default(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    let addr = neko_sidecar::admin::start_for(&daemon, &shutdown)
        .await
        .unwrap();
    let body = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "ok\n");
    // Turned off: nothing is started.
    let off = Workspace::new();
    greet(&off);
    let (cfg, _) = neko_sidecar::config::load(&off.admin_config(&h.url(), ""));
    let daemon2 = neko_sidecar::daemon::start(
        cfg.unwrap(),
        neko_sidecar::daemon::DaemonOptions::default(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    assert_eq!(
        neko_sidecar::admin::start_for(&daemon2, &shutdown).await,
        None
    );
    shutdown.cancel();
    daemon.wait().await;
    daemon2.wait().await;
}
