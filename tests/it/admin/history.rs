//! The call history on the admin listener (`POST /ui/calls`) against the
//! whole daemon and the in-process stand-in: the model's calls, bounded,
//! redacted, off at 0, and behind the inspector call route's gates (the
//! page's token, its own Origin, a loopback Host).

use std::path::PathBuf;

use serde_json::{Value as Json, json};

use crate::support::admin::*;
use crate::support::{Workspace, call, dev_server};

/// The token the served page carries.
fn token_of(page: &str) -> String {
    let key = r#"<meta name="neko-token" content=""#;
    let start = page.find(key).expect("the page carries a token") + key.len();
    let len = page[start..].find('"').unwrap();
    page[start..start + len].to_owned()
}

/// The agent config with `[admin] call_history = n`.
fn with_history(config: PathBuf, n: usize) -> PathBuf {
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("[admin]\n"), "{text}");
    let text = text.replace("[admin]\n", &format!("[admin]\ncall_history = {n}\n"));
    std::fs::write(&config, text).unwrap();
    config
}

/// POSTs `body` to `/ui/calls` with these headers: status and JSON.
async fn post_calls(run: &Running, headers: &[(&str, &str)], body: &str) -> (u16, Json) {
    let mut req = run
        .http
        .post(format!("{}/ui/calls", run.url()))
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let code = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Json::String(text)),
    )
}

async fn started(
    n: usize,
) -> (
    neko_sidecar::devserver::DevServerHandle,
    Workspace,
    Running,
    String,
) {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&with_history(ws.admin_config(&h.url(), ""), n)).await;
    run.wait("greet registered", |s| {
        s.all_registered() && !s.tools.is_empty()
    })
    .await;
    let (_, page) = run.get("/").await;
    let token = token_of(&page);
    (h, ws, run, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_calls_are_kept_the_oldest_evicted_and_secrets_left_out() {
    const PLANTED: &str = "history-planted-k3y-0091";
    // What an MCP server's header value is to the log: a secret no surface
    // may show.
    neko_sidecar::logging::keep_out(&[PLANTED.to_owned()]);
    let (h, _ws, run, token) = started(3).await;
    let own = run.url();
    let gate = [("origin", own.as_str()), ("x-neko-token", token.as_str())];
    for name in ["first", "second", PLANTED, "fourth"] {
        let a = h
            .invoke(call("greet", json!({"name": name})))
            .await
            .unwrap();
        assert_eq!(a.model_text, "hello");
    }
    let (code, v) = post_calls(&run, &gate, "").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["capacity"], 3);
    assert_eq!(v["recorded"], 4);
    let calls = v["calls"].as_array().unwrap();
    let args: Vec<&str> = calls
        .iter()
        .map(|c| c["arguments"]["text"].as_str().unwrap())
        .collect();
    // Newest first; the first call is gone; the secret shows as `…`.
    assert_eq!(
        args,
        [
            r#"{"name":"fourth"}"#,
            r#"{"name":"…"}"#,
            r#"{"name":"second"}"#
        ],
        "{v:#}"
    );
    assert!(!v.to_string().contains(PLANTED));
    let c = &calls[0];
    assert_eq!(c["tool"], "greet");
    assert_eq!(c["outcome"], "OK");
    assert_eq!(c["is_error"], false);
    assert_eq!(c["answer"]["text"], "hello");
    assert_eq!(c["answer"]["cut"], false);
    assert!(c["duration_ms"].is_u64());
    assert!(c["at"].as_str().unwrap().ends_with('Z'));
    // Only what is newer than what the reader has.
    let (_, newer) = post_calls(&run, &gate, r#"{"since": 3}"#).await;
    assert_eq!(newer["calls"].as_array().unwrap().len(), 1, "{newer:#}");
    let (code, bad) = post_calls(&run, &gate, r#"{"after": 3}"#).await;
    assert_eq!(code, 400, "{bad}");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_turns_the_history_off() {
    let (h, _ws, run, token) = started(0).await;
    let own = run.url();
    h.invoke(call("greet", json!({"name": "Ada"})))
        .await
        .unwrap();
    let (code, v) = post_calls(&run, &[("origin", &own), ("x-neko-token", &token)], "").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v,
        json!({"capacity": 0, "recorded": 0, "heap_bytes": 0, "calls": []})
    );
    // The call itself was served and counted.
    assert_eq!(run.status_json().await["tools"][0]["calls"], 1);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_needs_the_token_the_pages_origin_and_a_loopback_host() {
    let (h, _ws, run, token) = started(10).await;
    h.invoke(call("greet", json!({"name": "Ada"})))
        .await
        .unwrap();
    let own = run.url();
    // No token, a wrong one, another site's Origin, no Origin.
    for headers in [
        vec![("origin", own.as_str())],
        vec![
            ("origin", own.as_str()),
            ("x-neko-token", "0123456789abcdef0123456789abcdef"),
        ],
        vec![
            ("origin", "https://evil.example"),
            ("x-neko-token", token.as_str()),
        ],
        vec![("x-neko-token", token.as_str())],
    ] {
        let (code, v) = post_calls(&run, &headers, "").await;
        assert_eq!(code, 403, "{headers:?}: {v}");
        assert!(!v.to_string().contains("Ada"), "{v}");
    }
    // A DNS-rebinding page: its own name as Host (and Origin).
    let (code, v) = post_calls(
        &run,
        &[
            ("host", "evil.example:8080"),
            ("origin", "http://evil.example:8080"),
            ("x-neko-token", token.as_str()),
        ],
        "",
    )
    .await;
    assert_eq!(code, 400, "{v}");
    // A GET is no way round it.
    assert_eq!(run.get("/ui/calls").await.0, 405);
    let (code, v) = post_calls(&run, &[("origin", &own), ("x-neko-token", &token)], "").await;
    assert_eq!(code, 200);
    assert_eq!(v["calls"][0]["arguments"]["text"], r#"{"name":"Ada"}"#);
    run.stop().await;
}

/// `neko-sidecar status --calls`, the real binary: the calls the model
/// made, newest first, with the pictures it saw; `--json` gives the
/// history's JSON, the same as the route's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_calls_prints_what_the_model_sent_and_read() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let png = neko_sidecar::contract::images::sample_png_b64(4, 3);
    let envelope = json!({"output": "a photo", "is_error": false,
        "images": [{"data_b64": png, "mime": "image/png"}]});
    ws.exec_handler(
        "photo",
        &format!("cat >/dev/null\nprintf '%s' '{envelope}'\n"),
        "",
    );
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("both registered", |s| {
        s.tools.len() == 2 && s.all_registered()
    })
    .await;
    h.invoke(call("greet", json!({}))).await.unwrap();
    let seen = h.invoke(call("photo", json!({"zoom": 2}))).await.unwrap();
    assert_eq!(seen.images.len(), 1);

    let out = tokio::process::Command::new(crate::support::BIN)
        .args(["status", "--calls", "--admin", &run.url()])
        .env_remove("NEKO_SIDECAR_CONFIG")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("2 calls held of 2 since the start"),
        "{text}"
    );
    let photo = text.find("#2 ").expect("the newest call first");
    let greet = text.find("#1 ").unwrap();
    assert!(photo < greet, "{text}");
    assert!(
        text.contains(" photo role (all) by model: OK in "),
        "{text}"
    );
    assert!(text.contains("  arguments: {\"zoom\":2}\n"), "{text}");
    assert!(text.contains("  the model read: a photo\n"), "{text}");
    assert!(
        text.contains(&format!(
            "  a picture: image/png, {} bytes of base64\n",
            png.len()
        )),
        "{text}"
    );
    assert!(
        text.contains(" greet role (all) by model: INVALID_ARGUMENTS in "),
        "{text}"
    );

    let out = tokio::process::Command::new(crate::support::BIN)
        .args(["status", "--calls", "--json", "--admin", &run.url()])
        .output()
        .await
        .unwrap();
    let v: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["calls"][0]["pictures"][0]["data_b64"], png);
    assert_eq!(v["calls"][1]["outcome"], "INVALID_ARGUMENTS");
    run.stop().await;
}

/// POSTs a call request to `/ui/call` as the page does: status and JSON.
async fn try_from_page(run: &Running, token: &str, body: Json) -> (u16, Json) {
    let r = run
        .http
        .post(format!("{}/ui/call", run.url()))
        .header("origin", run.url())
        .header("x-neko-token", token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_says_whether_the_model_made_it_or_someone_tried_the_tool() {
    let (h, _ws, run, token) = started(8).await;
    let own = run.url();
    let gate = [("origin", own.as_str()), ("x-neko-token", token.as_str())];
    let a = h
        .invoke(call("greet", json!({"name": "model"})))
        .await
        .unwrap();
    assert_eq!(a.model_text, "hello");
    let (code, v) = try_from_page(
        &run,
        &token,
        json!({"tool": "greet", "arguments": {"name": "page"}}),
    )
    .await;
    assert_eq!((code, &v["called"]), (200, &json!(true)), "{v}");
    let (code, v) = try_from_page(
        &run,
        &token,
        json!({"tool": "greet", "arguments": {"name": "panel"}, "by": "panel"}),
    )
    .await;
    assert_eq!((code, &v["called"]), (200, &json!(true)), "{v}");
    // No other name: the label is the sidecar's, not the caller's word.
    let (code, v) = try_from_page(
        &run,
        &token,
        json!({"tool": "greet", "arguments": {"name": "x"}, "by": "model"}),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    let (_, v) = post_calls(&run, &gate, "").await;
    let seen: Vec<(String, String)> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["by"].as_str().unwrap().to_owned(),
                c["arguments"]["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("panel".to_owned(), r#"{"name":"panel"}"#.to_owned()),
            ("inspector".to_owned(), r#"{"name":"page"}"#.to_owned()),
            ("model".to_owned(), r#"{"name":"model"}"#.to_owned()),
        ],
        "{v:#}"
    );
    run.stop().await;
}
