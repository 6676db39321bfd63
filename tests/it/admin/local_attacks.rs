//! A local process against the admin endpoints, and secrets in what the
//! model and a `/status` reader see (issue 48).

use std::time::Duration;

use neko_sidecar::registration::ToolState;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::admin::*;
use crate::support::{Workspace, call, dev_server, http_tool, refused_port};

/// Issue 48, attack 3: idle connections to the admin endpoints, three
/// times their bound, some with half a request head, used to be held for
/// ever (plain `axum::serve`: no bound, no timeout) until the process ran
/// out of descriptors. Now the admin listener holds at most its bound,
/// closing those without a request first, `/healthz` still answers, and
/// calls are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_on_the_admin_port_takes_neither_it_nor_the_calls() {
    let h = dev_server().await;
    let ws = Workspace::new();
    let target = format!("http://127.0.0.1:{}/x", refused_port());
    ws.write_tool("t.toml", &http_tool("t", "d", &target, ""));
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("t registered", |s| {
        s.state("t") == Some(&ToolState::Registered)
    })
    .await;
    let bound = neko_sidecar::admin::MAX_CONNECTIONS;
    let mut flood = Vec::new();
    for i in 0..3 * bound {
        let mut s = TcpStream::connect(run.admin).await.unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /status HTTP/1.1\r\nhost: 127.0")
                .await
                .unwrap();
        }
        flood.push(s);
    }
    // The operator's request and a call, meanwhile.
    let (code, body) = tokio::time::timeout(Duration::from_secs(10), run.get("/healthz"))
        .await
        .expect("/healthz answered during the flood");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let a = h.invoke(call("t", json!({}))).await.unwrap();
    assert!(
        a.model_text.contains("HANDLER_UNREACHABLE"),
        "{}",
        a.model_text
    );
    // The listener closes all but its bound of them: those still in the
    // listen queue are accepted (and closed to make room) in their turn,
    // so the count is awaited with a deadline (Wine's sockets take longer).
    let mut open: Vec<TcpStream> = flood;
    let mut closed = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while closed < 2 * bound && tokio::time::Instant::now() < deadline {
        let mut still = Vec::new();
        for mut s in open {
            let mut b = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(20), s.read(&mut b)).await {
                Ok(Ok(0) | Err(_)) => closed += 1,
                _ => still.push(s),
            }
        }
        open = still;
    }
    assert!(
        closed >= 2 * bound,
        "{closed} of {} flood connections closed within 10 s",
        3 * bound
    );
    run.stop().await;
}

/// Issue 48, attack 4: an http handler URL with a password and an API key
/// in its query reached the model's text verbatim (in every
/// "not reachable" message), `/status`, the inspector and the log. Now the
/// one rule of MCP servers' URLs applies: `http://admin:…@…/x?apikey=…`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_urls_password_and_query_reach_neither_the_model_nor_status() {
    const PASSWORD: &str = "P4ssw0rd-of-admin";
    const KEY: &str = "apikey-S3cret-value";
    let h = dev_server().await;
    let ws = Workspace::new();
    let port = refused_port();
    let target = format!("http://admin:{PASSWORD}@127.0.0.1:{port}/x?apikey={KEY}&v=1");
    ws.write_tool("t.toml", &http_tool("t", "d", &target, ""));
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("t registered", |s| {
        s.state("t") == Some(&ToolState::Registered)
    })
    .await;
    let a = h.invoke(call("t", json!({}))).await.unwrap();
    assert!(
        a.model_text.contains("HANDLER_UNREACHABLE"),
        "{}",
        a.model_text
    );
    assert!(
        a.model_text
            .contains(&format!("http://admin:…@127.0.0.1:{port}/x?apikey=…&v=…")),
        "{}",
        a.model_text
    );
    let mut seen = vec![("model", a.model_text.clone())];
    for path in ["/status", "/", "/ui/status", "/ui/tools", "/metrics"] {
        let (code, body) = run.get(path).await;
        assert_eq!(code, 200, "{path}: {body}");
        seen.push((path, body));
    }
    for (surface, text) in &seen {
        for secret in [PASSWORD, KEY] {
            assert!(!text.contains(secret), "{surface} shows {secret}: {text}");
        }
    }
    // `/status` still says where the handler is.
    let status = run.status_json().await;
    let shown = status["tools"][0]["target"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        shown.contains(&format!("127.0.0.1:{port}/x?apikey=…")),
        "{status:#}"
    );
    run.stop().await;
}
