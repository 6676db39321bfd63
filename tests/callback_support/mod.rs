//! Shared helpers of the callback tests: start the real callback server on
//! a loopback port, build tools from manifest text, start in-test handlers,
//! and wait on conditions with a deadline (never a bare sleep).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use neko_sidecar::callback::{CallbackHandle, CallbackServer, CallbackSettings};
use neko_sidecar::desired::DesiredState;
use neko_sidecar::manifest::{LoadContext, parse_manifest};
use serde_json::{Value as Json, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub fn settings() -> CallbackSettings {
    CallbackSettings {
        max_body_bytes: 64 * 1024,
        max_output_bytes: 64 * 1024,
        kill_grace: Duration::from_millis(500),
        read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_connections: 1024,
    }
}

/// Tools from manifest text; relative paths resolve against `dir`.
pub fn state(dir: &Path, toml: &str) -> DesiredState {
    let f = parse_manifest(&dir.join("tools.toml"), toml, &LoadContext::default());
    assert!(!f.has_errors(), "{:#?}", f.diagnostics);
    let (state, diags) = DesiredState::assemble("plugin:test", &[f]);
    assert!(diags.is_empty(), "{diags:#?}");
    state
}

pub struct Sidecar {
    pub handle: CallbackHandle,
    pub shutdown: CancellationToken,
    pub client: reqwest::Client,
}

impl Sidecar {
    pub async fn start(desired: &DesiredState) -> Self {
        Self::start_with(desired, settings()).await
    }

    pub async fn start_with(desired: &DesiredState, settings: CallbackSettings) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(listener, desired, settings)
    }

    pub fn on(listener: TcpListener, desired: &DesiredState, settings: CallbackSettings) -> Self {
        let shutdown = CancellationToken::new();
        let handle = CallbackServer::start(listener, settings, shutdown.clone()).unwrap();
        handle.set_tools(desired);
        Self {
            handle,
            shutdown,
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
        }
    }

    /// Calls `tool` as main_server would, and returns status and body.
    pub async fn call(&self, tool: &str, arguments: Json) -> (u16, Json) {
        self.post(
            &self.handle.url_for(tool),
            call_body(tool, arguments).to_string(),
        )
        .await
    }

    pub async fn post(&self, url: &str, body: String) -> (u16, Json) {
        let resp = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let json = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("the answer is not JSON ({e}): {text}"));
        (status, json)
    }
}

/// The body main_server sends.
pub fn call_body(tool: &str, arguments: Json) -> Json {
    json!({
        "name": tool,
        "raw_arguments": arguments.to_string(),
        "arguments": arguments,
        "call_id": "call_test_1",
    })
}

/// Asserts an answer is the sidecar's own failure with `code`, and returns
/// its message.
pub fn failure(answer: &(u16, Json), code: &str) -> String {
    let (status, body) = answer;
    assert_eq!(*status, 200, "{body}");
    assert_eq!(body["is_error"], Json::Bool(true), "{body}");
    assert_eq!(body["output"]["code"], code, "{body}");
    let msg = body["error"].as_str().unwrap().to_string();
    assert_eq!(body["output"]["error"], msg.as_str());
    msg
}

/// Asserts a successful answer and returns its output.
pub fn success(answer: &(u16, Json)) -> Json {
    let (status, body) = answer;
    assert_eq!(*status, 200, "{body}");
    assert_eq!(body["is_error"], Json::Bool(false), "{body}");
    assert!(body.get("error").is_none(), "{body}");
    body["output"].clone()
}

/// Serves `router` on a loopback port.
pub async fn serve_http(router: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    addr
}

/// Writes an executable `sh` script.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Polls `cond` until it holds or `within` passes; true when it held.
pub async fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A process is gone when /proc has no entry for it or it is a zombie
/// waiting for a parent that is not us (an orphan's reaper is init, which
/// in a container may be slow or absent): either way it runs no more.
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Whether a program is on PATH, for tests of example handlers.
pub fn have(program: &str) -> bool {
    neko_sidecar::manifest::find_in_path(program).is_some()
}
