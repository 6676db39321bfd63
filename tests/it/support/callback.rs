//! The callback server alone, on a loopback port: tools built from manifest
//! text, calls sent as main_server sends them, and the reading of answers.

use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use neko_sidecar::callback::{CallbackHandle, CallbackServer, CallbackSettings};
use neko_sidecar::desired::DesiredState;
use serde_json::{Value as Json, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{BIN, desired_state, exec_tool, http_client};

/// The source of the tools served here.
pub const SOURCE: &str = "plugin:test";

/// A tool whose exec handler answers with the call it read (the sidecar's
/// `dev-handler`, which runs on every platform, where `cat` does not).
pub static ECHO: LazyLock<String> =
    LazyLock::new(|| exec_tool("echo", "d", &[BIN, "dev-handler"], ""));

pub fn settings() -> CallbackSettings {
    CallbackSettings {
        max_body_bytes: 64 * 1024,
        max_output_bytes: 64 * 1024,
        kill_grace: Duration::from_millis(500),
        read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_connections: 1024,
        max_body_memory: 64 << 20,
    }
}

/// Tools from manifest text; relative paths resolve against `dir`.
pub fn state(dir: &Path, toml: &str) -> DesiredState {
    desired_state(SOURCE, dir, toml)
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
            client: http_client(),
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

/// A sidecar serving [`ECHO`], and the tempdir it runs in.
pub async fn echo_sidecar() -> (tempfile::TempDir, Sidecar) {
    echo_sidecar_with(settings()).await
}

/// The same, with `settings`.
pub async fn echo_sidecar_with(settings: CallbackSettings) -> (tempfile::TempDir, Sidecar) {
    let dir = tempfile::tempdir().unwrap();
    let sc = Sidecar::start_with(&state(dir.path(), &ECHO), settings).await;
    (dir, sc)
}

/// The address (`host:port`) and path of a callback URL.
pub fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_at(rest.find('/').unwrap());
    (addr.to_string(), path.to_string())
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
