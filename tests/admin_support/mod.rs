//! Shared helpers of the admin tests: the whole daemon in-process (port-0
//! listeners) against the in-process stand-in, its admin endpoints on a
//! port-0 listener, manifests and `sh` handlers in a tempdir, HTTP GETs,
//! and waiting on conditions with a deadline (never a bare sleep).
//!
//! Each test binary uses a different subset, hence the dead-code allowance.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use neko_sidecar::admin::{self, AdminState};
use neko_sidecar::config;
use neko_sidecar::daemon::{self, Daemon, DaemonOptions};
use neko_sidecar::devserver::{DevServer, DevServerHandle};
use neko_sidecar::registration::{RegistrationSnapshot, ToolState};
use serde_json::Value as Json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub const SOURCE: &str = "plugin:admin-test";
/// Only bounds a failing test: conditions are waited on, never slept for.
pub const WAIT: Duration = Duration::from_secs(15);

/// A stand-in main_server on a port-0 listener.
pub async fn stand_in() -> DevServerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    DevServer::builder().start(listener).unwrap()
}

/// A tempdir with `tools/` (manifests), `handlers/` and `agent.toml`.
pub struct Workspace {
    pub tmp: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("tools")).unwrap();
        std::fs::create_dir(tmp.path().join("handlers")).unwrap();
        Self { tmp }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// An agent config for `main_server`, fast polls and short backoff,
    /// admin endpoints as `admin` (`""` turns them off).
    pub fn config(&self, main_server: &str, admin: &str) -> PathBuf {
        self.write(
            "agent.toml",
            &format!(
                "source = \"{SOURCE}\"\nmanifest_dirs = [\"tools\"]\n\
                 [main_server]\nurl = \"{main_server}\"\nrequest_timeout = \"1s\"\n\
                 [callback]\nlisten = \"127.0.0.1:0\"\n\
                 [registration]\npoll_interval = \"100ms\"\nbackoff_initial = \"20ms\"\nbackoff_max = \"200ms\"\n\
                 [reload]\ndebounce = \"20ms\"\nrescan_interval = \"10s\"\n\
                 [shutdown]\ndeadline = \"2s\"\n\
                 [admin]\nlisten = \"{admin}\"\n"
            ),
        )
    }

    /// `tools/NAME.toml`: one exec tool running `sh handlers/NAME.sh`, with
    /// `extra` TOML lines (e.g. a schema) after the handler.
    pub fn exec_tool(&self, name: &str, script: &str, extra: &str) {
        self.write(&format!("handlers/{name}.sh"), script);
        self.write(
            &format!("tools/{name}.toml"),
            &format!(
                "[[tool]]\nname = \"{name}\"\ndescription = \"{name} for tests\"\ntimeout_seconds = 5\nhandler = {{ type = \"exec\", command = [\"sh\", \"../handlers/{name}.sh\"] }}\n{extra}"
            ),
        );
    }
}

/// The `greet` tool: a required `name` string; answers an envelope.
pub fn greet(ws: &Workspace) {
    ws.exec_tool(
        "greet",
        "cat >/dev/null\nprintf '{\"output\": \"hello\", \"is_error\": false}'\n",
        "[tool.parameters]\ntype = \"object\"\nrequired = [\"name\"]\nproperties = { name = { type = \"string\" } }\n",
    );
}

/// A running daemon with its admin endpoints.
pub struct Running {
    pub daemon: Daemon,
    pub admin: SocketAddr,
    pub shutdown: CancellationToken,
    pub http: reqwest::Client,
}

/// Starts the daemon of `config_path` and its admin endpoints on port 0.
pub async fn start(config_path: &Path) -> Running {
    let (cfg, diags) = config::load(config_path);
    let cfg = cfg.unwrap_or_else(|| panic!("{diags:#?}"));
    let shutdown = CancellationToken::new();
    let opts = DaemonOptions {
        notifier: None,
        callback_listener: Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
        reloads: None,
    };
    let daemon = daemon::start(cfg, opts, shutdown.clone()).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    admin::spawn(listener, AdminState::from_daemon(&daemon), shutdown.clone());
    Running {
        daemon,
        admin,
        shutdown,
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
    }
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// GET an admin path: status code and body text.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.url()))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    pub async fn status_json(&self) -> Json {
        let (code, body) = self.get("/status").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Waits until `pred` holds for the registration status.
    pub async fn wait(
        &self,
        what: &str,
        pred: impl FnMut(&RegistrationSnapshot) -> bool,
    ) -> RegistrationSnapshot {
        match self.daemon.registration.wait_until(WAIT, pred).await {
            Ok(s) => s,
            Err(s) => panic!("timed out waiting for {what}; last status: {s:#?}"),
        }
    }

    /// Polls `/readyz` (status changes wake it) until it answers `code`.
    pub async fn wait_readyz(&self, code: u16) -> Json {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut changes = self.daemon.registration.subscribe();
        loop {
            changes.mark_unchanged();
            let (got, body) = self.get("/readyz").await;
            if got == code {
                return serde_json::from_str(&body).unwrap();
            }
            // Re-check at every status change, and at least every 50 ms
            // for changes the status store does not publish (manifests).
            let tick = tokio::time::Instant::now() + Duration::from_millis(50);
            if tokio::time::Instant::now() >= deadline {
                panic!("/readyz never answered {code}; last: {got} {body}");
            }
            let _ = tokio::time::timeout_at(tick.min(deadline), changes.changed()).await;
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(WAIT, self.daemon.wait()).await;
    }
}

/// A port where nothing listens (bound, then released).
pub async fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// Another plugin (`plugin:other`) registers `greet` first; then the sidecar
/// starts with its own `greet` and reaches the conflict state. The stand-in
/// and the sidecar are returned running (the workspace must outlive them).
pub async fn in_conflict_over_greet(h: &DevServerHandle) -> (Workspace, Running) {
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{}/api/tools/register", h.url()))
        .json(&serde_json::json!({"name": "greet", "callback_url": "http://127.0.0.1:1/x", "source": "plugin:other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.config(&h.url(), "")).await;
    run.wait("conflict", |s| {
        matches!(s.state("greet"), Some(ToolState::Conflict { .. }))
    })
    .await;
    (ws, run)
}
