//! An MCP server as operators see it on the admin endpoints of the
//! in-process daemon: `/status` has it under `mcp_servers` (phase, protocol,
//! pid, tools) and its tools with the `mcp` handler; `/metrics` says it is up.

use serde_json::{Value, json};

use crate::support::Workspace;
use crate::support::admin::start;
use crate::support::dev_server;
use crate::support::mcp::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_a_ready_server_and_its_tools() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool(
        "mcp.toml",
        &stdio_server("dev", &[], "exclude = [\"hang\"]"),
    );
    let run = start(&ws.admin_config(&h.url(), "")).await;

    let server: Value = eventually("/status to show dev ready with its tools", || async {
        let s = run.status_json().await;
        let m = s["mcp_servers"][0].clone();
        if m["phase"] == "ready" && m["tools"].as_array().is_some_and(|t| t.len() == 10) {
            Ok(m)
        } else {
            Err(format!("{s:#}"))
        }
    })
    .await;
    assert_eq!(server["name"], "dev");
    assert!(
        server["transport"].as_str().unwrap().starts_with("stdio "),
        "{server:#}"
    );
    assert_eq!(server["protocol"], CURRENT_PROTOCOL);
    assert!(server["pid"].is_u64(), "{server:#}");
    assert_eq!(server["restarts"], 0);
    assert_eq!(server["attempt"], 0);
    assert_eq!(server["last_error"], Value::Null);
    assert_eq!(server["rejected"], json!([]));
    assert_eq!(server["filtered"], 1);
    let offered: Vec<String> = DEV_TOOLS
        .iter()
        .filter(|t| **t != "hang")
        .map(|t| format!("dev_{t}"))
        .collect();
    assert_eq!(server["tools"], json!(offered));

    let s = run.status_json().await;
    let echo = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "dev_echo")
        .unwrap_or_else(|| panic!("no dev_echo in {s:#}"));
    assert_eq!(echo["handler"], "mcp", "{echo:#}");

    let (code, metrics) = run.get("/metrics").await;
    assert_eq!(code, 200);
    for line in [
        "neko_sidecar_mcp_server_up{server=\"dev\"} 1",
        "neko_sidecar_mcp_server_restarts_total{server=\"dev\"} 0",
        "neko_sidecar_mcp_server_tools{server=\"dev\",state=\"offered\"} 10",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line:?} missing:\n{metrics}"
        );
    }
    run.stop().await;
}
