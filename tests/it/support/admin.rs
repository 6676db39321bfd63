//! The whole daemon in-process with its admin endpoints on a port-0
//! listener, against the stand-in: an agent config with fast polls, exec
//! tools whose `sh` handlers sit beside the manifests, and HTTP GETs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use neko_sidecar::admin::{self, AdminState};
use neko_sidecar::daemon::Daemon;
use neko_sidecar::devserver::DevServerHandle;
use neko_sidecar::registration::{RegistrationSnapshot, ToolState};
use serde_json::Value as Json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::daemon::InProcess;
use super::{WAIT, Workspace, exec_tool, http_client, register_foreign, wait_status};

pub const SOURCE: &str = "plugin:admin-test";

impl Workspace {
    /// An agent config for `main_server`, fast polls and short backoff,
    /// admin endpoints as `admin` (`""` turns them off).
    pub fn admin_config(&self, main_server: &str, admin: &str) -> PathBuf {
        let mut agent = self.agent(main_server);
        agent.source = SOURCE.into();
        agent.poll_interval = "100ms".into();
        agent.backoff_initial = "20ms".into();
        agent.backoff_max = "200ms".into();
        agent.debounce = "20ms".into();
        agent.rescan_interval = "10s".into();
        agent.admin_listen = admin.into();
        self.write_config(&agent)
    }

    /// `tools/NAME.toml`: one exec tool running `sh handlers/NAME.sh`, with
    /// `extra` TOML lines (e.g. a schema) after the handler.
    pub fn exec_handler(&self, name: &str, script: &str, extra: &str) {
        let handlers = self.root.join("handlers");
        std::fs::create_dir_all(&handlers).unwrap();
        std::fs::write(handlers.join(format!("{name}.sh")), script).unwrap();
        let command = format!("../handlers/{name}.sh");
        self.write_tool(
            &format!("{name}.toml"),
            &exec_tool(
                name,
                &format!("{name} for tests"),
                &["sh", &command],
                &format!("timeout_seconds = 5\n{extra}"),
            ),
        );
    }
}

/// The `greet` tool: a required `name` string; answers an envelope.
pub fn greet(ws: &Workspace) {
    ws.exec_handler(
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
    let (daemon, shutdown) = InProcess::start(config_path).await.into_parts();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    admin::spawn(listener, AdminState::from_daemon(&daemon), shutdown.clone());
    Running {
        daemon,
        admin,
        shutdown,
        http: http_client(),
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
        wait_status(&self.daemon.registration, what, pred).await
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
            let tick = tokio::time::Instant::now() + std::time::Duration::from_millis(50);
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

/// Another plugin (`plugin:other`) registers `greet` first; then the sidecar
/// starts with its own `greet` and reaches the conflict state. The stand-in
/// and the sidecar are returned running (the workspace must outlive them).
pub async fn in_conflict_over_greet(h: &DevServerHandle) -> (Workspace, Running) {
    register_foreign(&h.url(), "greet", "plugin:other", "http://127.0.0.1:1/x").await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("conflict", |s| {
        matches!(s.state("greet"), Some(ToolState::Conflict { .. }))
    })
    .await;
    (ws, run)
}
