//! The inspector page at `/` against the whole daemon (in-process, real
//! sockets) and the in-process stand-in: what it shows, and its gates (own
//! Origin and the page's token for a call, a loopback `Host`, the
//! Content-Security-Policy, untrusted text as text). The real-browser test
//! is `tests/browser/inspector.py`, run by `.ci/run`.

use serde_json::{Value as Json, json};

use neko_sidecar::registration::ToolState;

use crate::support::admin::*;
use crate::support::daemon::Sidecar;
use crate::support::{WAIT, Workspace, call, dev_server, http_client};

/// The token the served page carries.
fn token_of(page: &str) -> String {
    let key = r#"<meta name="neko-token" content=""#;
    let start = page.find(key).expect("the page carries a token") + key.len();
    let len = page[start..].find('"').unwrap();
    page[start..start + len].to_owned()
}

/// POSTs a call request to `/ui/call` with these extra headers.
async fn post_call(run: &Running, headers: &[(&str, &str)], body: &Json) -> (u16, Json) {
    let mut req = run
        .http
        .post(format!("{}/ui/call", run.url()))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap())
}

/// A `greet` whose description holds markup, as a hostile manifest or MCP
/// server could write it.
#[cfg(unix)]
fn hostile_greet(ws: &Workspace) {
    ws.exec_handler(
        "greet",
        "cat >/dev/null\nprintf '{\"output\": \"hello <b>there</b>\", \"is_error\": false}'\n",
        "[tool.parameters]\ntype = \"object\"\nrequired = [\"name\"]\nproperties = { name = { type = \"string\", description = \"<img src=x onerror=alert(2)>\" } }\n",
    );
    let path = ws.root.join("tools/greet.toml");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "description = \"greet for tests\"",
        "description = \"<script>alert(1)</script> says hello\"",
    );
    std::fs::write(path, text).unwrap();
}

// Its handler is a `sh` script (`greet`), so Unix only.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_every_tool_with_a_strict_policy_and_markup_as_text() {
    let h = dev_server().await;
    let ws = Workspace::new();
    hostile_greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("greet registered", |s| {
        s.all_registered() && !s.tools.is_empty()
    })
    .await;

    let r = run
        .http
        .get(format!("{}/", run.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let headers = r.headers().clone();
    let page = r.text().await.unwrap();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["cache-control"], "no-store");

    // The tool, its state, handler and file, readable without script.
    assert!(page.contains(r#"<tr data-tool="greet">"#), "{page}");
    assert!(page.contains(">registered<"), "{page}");
    assert!(page.contains("exec sh ../handlers/greet.sh"), "{page}");
    assert!(page.contains("tools/greet.toml:1:1"), "{page}");
    assert!(page.contains("last contact"), "{page}");
    // The description's markup is text; the only script is the page's own.
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt; says hello"),
        "{page}"
    );
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert_eq!(token_of(&page).len(), 32);

    // The script and style it links to are served, the status part alone too.
    let (code, js) = run.get("/inspector.js").await;
    assert_eq!(code, 200);
    assert!(js.contains("/ui/call"));
    assert_eq!(run.get("/inspector.css").await.0, 200);
    let (code, part) = run.get("/ui/status").await;
    assert_eq!(code, 200);
    assert!(part.contains(r#"<tr data-tool="greet">"#), "{part}");
    assert!(!part.contains("<script"), "{part}");

    // The schema for the form comes as JSON, untouched.
    let (code, tools) = run.get("/ui/tools").await;
    assert_eq!(code, 200);
    let tools: Json = serde_json::from_str(&tools).unwrap();
    assert_eq!(tools[0]["name"], "greet");
    assert_eq!(
        tools[0]["parameters"]["properties"]["name"]["description"],
        "<img src=x onerror=alert(2)>"
    );
    run.stop().await;
}

// Its handler is a `sh` script (`greet`), so Unix only.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_needs_the_pages_own_origin_and_its_token() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("greet registered", |s| {
        s.all_registered() && !s.tools.is_empty()
    })
    .await;
    let (_, page) = run.get("/").await;
    let token = token_of(&page);
    let own = run.url();
    let body = json!({"tool": "greet", "arguments": {"name": "Ada"}});

    // CVE-2025-49596's shape: another site's page posts to localhost.
    let (code, a) = post_call(
        &run,
        &[("origin", "https://evil.example"), ("x-neko-token", &token)],
        &body,
    )
    .await;
    assert_eq!(code, 403, "{a}");
    assert!(a["error"].as_str().unwrap().contains("another web page"));
    // No Origin at all (not a browser's same-origin POST).
    let (code, _) = post_call(&run, &[("x-neko-token", &token)], &body).await;
    assert_eq!(code, 403);
    // The page's origin without the page's token, or with a wrong one.
    let (code, a) = post_call(&run, &[("origin", &own)], &body).await;
    assert_eq!(code, 403);
    assert!(a["error"].as_str().unwrap().contains("token"), "{a}");
    let (code, _) = post_call(
        &run,
        &[
            ("origin", &own),
            ("x-neko-token", "0123456789abcdef0123456789abcdef"),
        ],
        &body,
    )
    .await;
    assert_eq!(code, 403);
    // None of these ran the handler.
    let s = run.status_json().await;
    assert_eq!(s["tools"][0]["calls"], 0, "{s:#}");
    assert_eq!(s["tools"][0]["last_call"], Json::Null);

    // The page itself: the call goes through the callback URL.
    let (code, a) = post_call(&run, &[("origin", &own), ("x-neko-token", &token)], &body).await;
    assert_eq!(code, 200, "{a}");
    assert_eq!(a["called"], true);
    assert_eq!(a["answer"]["model_text"], "hello");
    assert_eq!(a["answer"]["is_error"], false);
    assert!(a["answer"]["took_ms"].is_u64());
    assert_eq!(a["raw"]["status"], 200);
    let raw: Json = serde_json::from_str(a["raw"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(raw["output"], "hello");
    // It shows as the tool's last call.
    let s = run.status_json().await;
    assert_eq!(s["tools"][0]["calls"], 1, "{s:#}");
    assert_eq!(s["tools"][0]["last_call"]["outcome"], "ok");
    let (_, part) = run.get("/ui/status").await;
    assert!(part.contains(r#"<span class="ok">ok</span>"#), "{part}");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_is_not_loopback_is_refused() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;
    // A DNS-rebinding page sends its own name; an address that is not
    // loopback is refused as well.
    for host in ["evil.example:8080", "192.168.1.10:8080", "10.0.0.1"] {
        for path in ["/", "/ui/status", "/ui/tools"] {
            let r = run
                .http
                .get(format!("{}{path}", run.url()))
                .header("host", host)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{host} {path}");
        }
        let r = run
            .http
            .post(format!("{}/ui/call", run.url()))
            .header("host", host)
            .header("origin", format!("http://{host}"))
            .body(r#"{"tool":"greet"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{host}");
    }
    for host in ["localhost:8080", "127.0.0.1", "[::1]:9"] {
        let r = run
            .http
            .get(format!("{}/", run.url()))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{host}");
    }
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_are_checked_with_the_messages_a_model_gets() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("greet registered", |s| {
        s.all_registered() && !s.tools.is_empty()
    })
    .await;
    let (_, page) = run.get("/").await;
    let token = token_of(&page);
    let own = run.url();
    let gate = [("origin", own.as_str()), ("x-neko-token", token.as_str())];

    let (code, a) = post_call(&run, &gate, &json!({"tool": "greet", "arguments": {}})).await;
    assert_eq!(code, 200, "{a}");
    assert_eq!(a["called"], false, "{a}");
    // What a model's call with the same arguments reads.
    let model = h.invoke(call("greet", json!({}))).await.unwrap();
    assert_eq!(a["output"], model.output, "{a}");
    assert_eq!(a["message"], model.output["error"]);
    assert!(
        a["message"]
            .as_str()
            .unwrap()
            .contains("do not match the parameters of `greet`")
    );
    let s = run.status_json().await;
    assert_eq!(
        s["tools"][0]["calls"], 1,
        "only the model's call ran: {s:#}"
    );

    // Called anyway: the answer the model reads, through the callback.
    let (_, a) = post_call(
        &run,
        &gate,
        &json!({"tool": "greet", "raw_arguments": "not json", "skip_check": true}),
    )
    .await;
    assert_eq!(a["called"], true, "{a}");
    assert_eq!(a["answer"]["is_error"], true);
    assert!(
        a["answer"]["model_text"]
            .as_str()
            .unwrap()
            .contains("the arguments were not valid JSON"),
        "{a}"
    );
    let s = run.status_json().await;
    assert_eq!(s["tools"][0]["last_call"]["outcome"], "invalid_arguments");
    assert!(
        s["tools"][0]["last_call"]["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );

    // An unknown tool is a clear refusal.
    let (code, a) = post_call(&run, &gate, &json!({"tool": "nope"})).await;
    assert_eq!(code, 404);
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("no tool named `nope`")
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_logs_the_pages_address() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let mut sidecar = Sidecar::spawn(&ws.admin_config(&h.url(), "127.0.0.1:0"));
    let line = sidecar
        .wait_log("the page's address", |l| l.contains("inspector page"))
        .await;
    let url = line
        .split("page=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no page= in {line}"));
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with('/'),
        "{line}"
    );
    assert!(line.contains(&format!("open {url} in a browser")), "{line}");
    let r = http_client().get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains(r#"<meta name="neko-token""#)
    );
    sidecar.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_edit_and_a_conflict_show_on_the_page_with_their_reasons() {
    let h = dev_server().await;
    let (ws, run) = in_conflict_over_greet(&h).await;
    let (_, part) = run.get("/ui/status").await;
    // The sentence is the catalogue's, its argument the owner as /status
    // has it (the page's script says the sentence in the browser's language).
    assert!(
        part.contains(
            r#"<span data-i18n-s="inspector.heldBy">held by <span data-arg="owner"><code>plugin:other</code></span></span>"#
        ),
        "{part}"
    );
    assert!(
        part.contains(r#"<span class="state bad" data-i18n="state.conflict">conflict</span>"#),
        "{part}"
    );

    // A second tool, registered, then its file broken: the page says the
    // tool shown is its last good version, and why the file is in error.
    ws.exec_handler(
        "wave",
        "cat >/dev/null\nprintf '{\"output\": \"hi\", \"is_error\": false}'\n",
        "",
    );
    run.wait("wave registered", |s| {
        s.state("wave") == Some(&ToolState::Registered)
    })
    .await;
    let path = ws.tools.join("wave.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("timeout_seconds = 5", "timeout_seconds = 999"),
    )
    .unwrap();
    // The reload is seen through /status, polled against a deadline.
    let deadline = tokio::time::Instant::now() + WAIT;
    let s = loop {
        let s = run.status_json().await;
        if s["manifests"]["files_in_error"] == 1 {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bad edit never showed: {s:#}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let (_, part) = run.get("/ui/status").await;
    assert!(
        part.contains("this is its last good version, kept"),
        "{part}"
    );
    assert!(part.contains("Manifest problems"), "{part}");
    assert!(part.contains("wave.toml:"), "{part}");
    let wave = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "wave")
        .unwrap();
    assert_eq!(wave["serving_last_good"], true, "{s:#}");
    run.stop().await;
}
