//! `POST /ui/mcp/restart` against the whole daemon: one MCP server stopped
//! and started again at once (a new process, its tools kept registered),
//! behind the inspector call route's gates.

use serde_json::{Value, json};

use crate::support::Workspace;
use crate::support::admin::start;
use crate::support::dev_server;
use crate::support::mcp::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mcp_server_is_restarted_by_hand_behind_the_gate() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("mcp.toml", &stdio_server("dev", &[], ""));
    let run = start(&ws.admin_config(&h.url(), "")).await;
    let ready = |after: Option<u64>| {
        let run = &run;
        async move {
            let s = run.status_json().await;
            let m = s["mcp_servers"][0].clone();
            let fresh = after.is_none_or(|old| m["pid"].as_u64().is_some_and(|p| p != old));
            if m["phase"] == "ready" && m["pid"].is_u64() && fresh {
                Ok(m)
            } else {
                Err(format!("{s:#}"))
            }
        }
    };
    let before: Value = eventually("dev ready", || ready(None)).await;
    let old_pid = before["pid"].as_u64().unwrap();
    let (_, page) = run.get("/").await;
    let key = r#"<meta name="neko-token" content=""#;
    let at = page.find(key).unwrap() + key.len();
    let token = &page[at..at + 32];
    let own = run.url();
    let post = |headers: Vec<(&'static str, String)>, body: String| {
        let mut req = run
            .http
            .post(format!("{}/ui/mcp/restart", run.url()))
            .body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let body = json!({"server": "dev"}).to_string();
    // Refused without the token, from another page, with a foreign Host.
    let (code, _) = post(vec![("origin", own.clone())], body.clone()).await;
    assert_eq!(code, 403);
    let (code, _) = post(
        vec![
            ("origin", "https://evil.example".into()),
            ("x-neko-token", token.into()),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(code, 403);
    let (code, _) = post(
        vec![
            ("host", "evil.example".into()),
            ("origin", "http://evil.example".into()),
            ("x-neko-token", token.into()),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(run.status_json().await["mcp_servers"][0]["pid"], old_pid);

    let gate = || vec![("origin", own.clone()), ("x-neko-token", token.to_owned())];
    let (code, text) = post(gate(), json!({"server": "nope"}).to_string()).await;
    assert_eq!(code, 404, "{text}");
    assert!(text.contains("no MCP server named `nope`"), "{text}");
    let (code, text) = post(gate(), body).await;
    assert_eq!((code, text.as_str()), (200, r#"{"restarted":"dev"}"#));
    let after: Value =
        eventually("dev ready again in a new process", || ready(Some(old_pid))).await;
    assert_eq!(after["restarts"], 1, "{after:#}");
    // Its tools stayed ours and answer from the new process.
    let a = invoke_echo(&h).await;
    assert_eq!(a, "restarted?");
    run.stop().await;
}

async fn invoke_echo(h: &neko_sidecar::devserver::DevServerHandle) -> String {
    let a = crate::support::invoke(
        h,
        crate::support::call("dev_echo", json!({"text": "restarted?"})),
    )
    .await;
    a.model_text
}
