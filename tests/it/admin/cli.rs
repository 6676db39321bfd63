//! The `status` and `call` commands: the real binary against the whole
//! daemon running in-process (admin endpoints on port 0) and the stand-in.
//! Exit codes: `status` 0 all registered, 1 not, 2 unreachable or bad
//! config; `call` 0 success, 1 the model sees an error, 2 no call made.

use std::path::Path;

use serde_json::Value as Json;
#[cfg(unix)]
use serde_json::json;

use crate::support::admin::*;
use crate::support::{BIN, Workspace, dev_server, refused_port};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn sidecar(args: &[&str]) -> Out {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        // A config path from the environment would change what is tested.
        .env_remove("NEKO_SIDECAR_CONFIG")
        .output()
        .await
        .unwrap();
    Out {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `echo`: no schema; prints the callback body it got (plain JSON, which
/// the sidecar passes on as the output).
fn echo(ws: &Workspace) {
    ws.exec_handler("echo", "cat\n", "");
}

async fn registered(ws: &Workspace, main_server: &str) -> Running {
    let run = start(&ws.admin_config(main_server, "")).await;
    run.wait("all registered", |s| {
        !s.tools.is_empty() && s.all_registered()
    })
    .await;
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_0_when_every_tool_is_registered() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    echo(&ws);
    let run = registered(&ws, &h.url()).await;

    let out = sidecar(&["status", "--admin", &run.admin.to_string()]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .starts_with(&format!("main_server {}: reachable", h.url())),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("2 of 2 tools registered, ready"));
    assert!(
        out.stdout.contains(&format!(
            "inspector page: {}/ (open it in a browser)",
            run.url()
        )),
        "{}",
        out.stdout
    );
    let lines: Vec<&str> = out.stdout.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("TOOL")).unwrap();
    assert!(lines[header].contains("ROLE") && lines[header].contains("LAST ERROR"));
    assert!(lines[header + 1].starts_with("echo "), "{}", out.stdout);
    assert!(lines[header + 2].contains("registered"));

    let out = sidecar(&["status", "--admin", &run.url(), "--json"]).await;
    assert_eq!(out.code, 0);
    let v: Json = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["tools"].as_array().unwrap().len(), 2);

    // The address read from a config's [admin] listen.
    let cli = Workspace::new();
    let config = cli.admin_config(&h.url(), &run.admin.to_string());
    let out = sidecar(&["status", "--config", config.to_str().unwrap()]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_1_on_a_conflict_or_main_server_down() {
    let h = dev_server().await;
    let (_ws, run) = in_conflict_over_greet(&h).await;
    let out = sidecar(&["status", "--admin", &run.url()]).await;
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(out.stdout.contains("NOT READY"));
    assert!(out.stdout.contains("conflict"));
    assert!(
        out.stdout.contains("`greet` is in conflict"),
        "{}",
        out.stdout
    );
    run.stop().await;

    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&format!("http://127.0.0.1:{}", refused_port()), "")).await;
    run.wait("a failed GET", |s| s.main_server.failed_attempts >= 1)
        .await;
    let out = sidecar(&["status", "--admin", &run.url()]).await;
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(out.stdout.contains(": UNREACHABLE ("), "{}", out.stdout);
    run.stop().await;
}

#[tokio::test]
async fn status_exits_2_when_the_admin_endpoint_cannot_be_read() {
    let port = refused_port();
    let out = sidecar(&["status", "--admin", &format!("127.0.0.1:{port}")]).await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("cannot reach the sidecar's admin endpoint"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty());

    let out = sidecar(&["status", "--config", "/nonexistent/agent.toml"]).await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("/nonexistent/agent.toml"),
        "{}",
        out.stderr
    );

    let ws = Workspace::new();
    let off = ws.admin_config("http://127.0.0.1:1", "");
    let out = sidecar(&["status", "--config", off.to_str().unwrap()]).await;
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("turned off"), "{}", out.stderr);
}

#[cfg(unix)]
fn answer(out: &Out) -> Json {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", out.stdout, out.stderr))
}

// Its handlers are `sh` scripts.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_shows_a_picture_main_server_would_refuse_delivered_and_repaired() {
    use base64::Engine as _;
    use neko_sidecar::contract::images::{sample_png, with_chunk};
    let h = dev_server().await;
    let ws = Workspace::new();
    // A PNG whose iCCP chunk has a wrong CRC: browsers show it, Pillow
    // (and so main_server) refuses it.
    let png = with_chunk(&sample_png(12, 9), b"iCCP", b"sRGB\0\0profile", true);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let envelope = json!({"output": "a photo", "is_error": false,
        "images": [{"data_b64": b64, "mime": "image/png"}]});
    ws.exec_handler(
        "photo",
        &format!("cat >/dev/null\nprintf '%s' '{envelope}'\n"),
        "",
    );
    let run = registered(&ws, &h.url()).await;
    let out = sidecar(&["call", "photo", "--admin", &run.url()]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let a = answer(&out);
    assert_eq!(a["model_text"], "a photo");
    assert_eq!(a["warnings"], json!([]), "main_server took the picture");
    let images = a["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "{a}");
    assert_eq!(images[0]["mime"], "image/png");
    assert_eq!(
        (images[0]["width"].clone(), images[0]["height"].clone()),
        (json!(12), json!(9))
    );
    let repair = a["image_repairs"][0].as_str().unwrap_or_default();
    assert!(
        repair.starts_with(
            "image #0: the PNG has a bad CRC in its iCCP chunk; re-encoded as a clean PNG (12x9, "
        ),
        "{a}"
    );
    run.stop().await;
}

// Its handlers are `sh` scripts.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_shows_what_the_model_sees() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    echo(&ws);
    let run = registered(&ws, &h.url()).await;
    let admin = run.url();

    let out = sidecar(&[
        "call",
        "greet",
        "--args",
        r#"{"name": "Ada"}"#,
        "--admin",
        &admin,
    ])
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let a = answer(&out);
    assert_eq!(a["tool"], "greet");
    assert_eq!(a["output"], "hello");
    assert_eq!(a["is_error"], false);
    assert_eq!(a["error"], Json::Null);
    assert_eq!(a["images"], json!([]));
    assert_eq!(a["image_repairs"], json!([]));
    assert_eq!(a["warnings"], json!([]));
    assert!(a["call_id"].as_str().unwrap().starts_with("call_"));

    // A validation failure: the handler does not run, the model is told why.
    let out = sidecar(&["call", "greet", "--args", "{}", "--admin", &admin]).await;
    assert_eq!(out.code, 1, "{}", out.stdout);
    let a = answer(&out);
    assert_eq!(a["is_error"], true);
    assert_eq!(a["output"]["code"], "INVALID_ARGUMENTS");
    assert!(a["error"].as_str().unwrap().contains("name"), "{a}");

    // The exact body main_server sends: the model's text verbatim.
    let raw = r#"{"name":   "Ada"}"#;
    let out = sidecar(&["call", "echo", "--raw-args", raw, "--admin", &admin]).await;
    assert_eq!(out.code, 0, "{}", out.stdout);
    let body = &answer(&out)["output"];
    assert_eq!(body["name"], "echo");
    assert_eq!(body["arguments"], json!({"name": "Ada"}));
    assert_eq!(body["raw_arguments"], raw);
    assert_eq!(body["call_id"], answer(&out)["call_id"]);
    // Text that is not JSON reaches the sidecar as main_server wraps it
    // (`{"_raw": TEXT}`), and the sidecar tells the model to retry.
    let out = sidecar(&["call", "echo", "--raw-args", "not json", "--admin", &admin]).await;
    assert_eq!(out.code, 1, "{}", out.stdout);
    let a = answer(&out);
    assert_eq!(a["output"]["code"], "INVALID_ARGUMENTS");
    assert!(
        a["error"].as_str().unwrap().contains("not valid JSON"),
        "{a}"
    );

    // The calls went through the sidecar's callback server and counted.
    let s = run.status_json().await;
    let greet = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "greet")
        .unwrap();
    assert_eq!(
        (greet["calls"].as_u64(), greet["failures"].as_u64()),
        (Some(2), Some(1))
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_exits_2_when_no_call_can_be_made() {
    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = registered(&ws, &h.url()).await;
    let admin = run.url();

    let out = sidecar(&["call", "nope", "--admin", &admin]).await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("no tool named `nope`; it serves: greet"),
        "{}",
        out.stderr
    );
    let out = sidecar(&["call", "greet", "--args", "{name", "--admin", &admin]).await;
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--raw-args"), "{}", out.stderr);
    let missing = Path::new("/nonexistent/agent.toml");
    let out = sidecar(&["call", "greet", "--config", missing.to_str().unwrap()]).await;
    assert_eq!(out.code, 2);
    run.stop().await;
}

/// Issue 48: `call` sends the operator's arguments to the callback URL the
/// process on the admin port reports. With `[admin] token_file` set, it
/// first checks that process knows the identity token the daemon wrote
/// there (readable only by its user), and refuses an impostor, sending it
/// nothing; without one it says it did not check.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_checks_that_the_admin_port_is_the_sidecar_of_its_config() {
    use axum::Router;
    use axum::routing::get;
    use neko_sidecar::registration::ToolState;
    use std::os::unix::fs::PermissionsExt as _;

    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let token = ws.root.join("admin.token");
    let path = ws.admin_config(&h.url(), "127.0.0.1:0");
    let plain = std::fs::read_to_string(&path).unwrap();
    let plain_path = ws.root.join("plain.toml");
    std::fs::write(&plain_path, &plain).unwrap();
    std::fs::write(
        &path,
        plain.replace(
            "[admin]\n",
            &format!("[admin]\ntoken_file = {:?}\n", token.display().to_string()),
        ),
    )
    .unwrap();
    // The daemon's own wiring writes the token file.
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
        .unwrap()
        .to_string();
    crate::support::wait_status(&daemon.registration, "greet registered", |s| {
        s.state("greet") == Some(&ToolState::Registered)
    })
    .await;
    let mode = std::fs::metadata(&token).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let config = path.display().to_string();
    let args = ["call", "greet", "--args", r#"{"name": "Ada"}"#];

    let out = sidecar(&[&args[..], &["--config", &config, "--admin", &addr]].concat()).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!out.stderr.contains("not checked"), "{}", out.stderr);

    // An impostor that serves the real `/status` (so the real callback
    // URLs) but cannot prove it knows the token: nothing is sent.
    let status = reqwest::get(format!("http://{addr}/status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let impostor = Router::new()
        .route("/status", get(move || async move { status }))
        .route(
            "/identity",
            get(|| async { axum::Json(serde_json::json!({"proof": "00"})) }),
        );
    let impostor = crate::support::serve_http(impostor).await.to_string();
    let calls = daemon.callback.stats().tools["greet"].calls;
    let out = sidecar(&[&args[..], &["--config", &config, "--admin", &impostor]].concat()).await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "the process answering at http://{impostor} is not the sidecar of {config}"
        )),
        "{}",
        out.stderr
    );
    assert_eq!(daemon.callback.stats().tools["greet"].calls, calls);

    // Without a token file: called, and said so.
    let plain = plain_path.display().to_string();
    let out = sidecar(&[&args[..], &["--config", &plain, "--admin", &addr]].concat()).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("not checked"), "{}", out.stderr);

    shutdown.cancel();
    daemon.wait().await;
    assert!(!token.exists(), "the token file is removed at stop");
}
