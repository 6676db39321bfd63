//! MCP rigs: `[[mcp_server]]` tables that run the stand-in MCP server
//! (`neko-sidecar dev-mcp`) as a child of the sidecar or reach one over
//! Streamable HTTP or the legacy HTTP+SSE transport (`SseMcp`, in the
//! test); the in-process daemon on such a manifest against the
//! stand-in main_server; and what the tests read back: a server's status
//! (`Daemon::mcp`), the tools main_server holds of ours, the requests that
//! removed some, and the stand-in MCP server's own tools (`pid`, `stats`)
//! called as the model calls them.

use std::future::Future;
use std::time::Duration;

use neko_sidecar::devmcp::{DevMcp, DevMcpOptions, SSE_PATH, SseEndpoint};
use neko_sidecar::devserver::{DevServerHandle, InvokeAnswer, RequestRecord};
use neko_sidecar::mcp::ServerStatus;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::daemon::{AgentToml, InProcess, our_names};
use super::{BIN, WAIT, Workspace, call, dev_server, invoke, wait_stand_in, wait_until};

/// The stand-in MCP server's tools without options, in listing order.
pub use neko_sidecar::devmcp::TOOLS as DEV_TOOLS;

/// The protocol generation of `initialize` (what `--legacy` speaks).
pub const LEGACY_PROTOCOL: &str = "2025-11-25";
/// The protocol generation of `server/discover` (the sidecar's preference).
pub const CURRENT_PROTOCOL: &str = "2026-07-28";

/// An `[[mcp_server]]` that runs `neko-sidecar dev-mcp FLAGS` on stdio, with
/// `extra` TOML lines (prefix, include, timeout_seconds...) after it.
pub fn stdio_server(name: &str, flags: &[&str], extra: &str) -> String {
    let mut argv = vec![BIN, "dev-mcp"];
    argv.extend_from_slice(flags);
    format!("[[mcp_server]]\nname = \"{name}\"\ncommand = {argv:?}\n{extra}\n")
}

/// An `[[mcp_server]]` reached over Streamable HTTP at `url`.
pub fn http_server(name: &str, url: &str, extra: &str) -> String {
    format!("[[mcp_server]]\nname = \"{name}\"\nurl = \"{url}\"\n{extra}\n")
}

/// An `[[mcp_server]]` reached at `url` by the legacy HTTP+SSE transport,
/// said outright.
pub fn sse_server(name: &str, url: &str, extra: &str) -> String {
    format!("[[mcp_server]]\nname = \"{name}\"\nurl = \"{url}\"\ntransport = \"sse\"\n{extra}\n")
}

/// The stand-in MCP server over the legacy HTTP+SSE transport
/// (`DevMcp::serve_sse`) in the test, on a port-0 listener, with
/// `endpoint` as its `endpoint` event; stopped when dropped.
pub struct SseMcp {
    /// Its event stream's URL, `http://127.0.0.1:PORT/sse`.
    pub url: String,
    /// The server, for `cut_streams`.
    pub server: DevMcp,
    stop: CancellationToken,
}

impl SseMcp {
    pub async fn start(endpoint: SseEndpoint) -> Self {
        Self::start_with(endpoint, DevMcpOptions::default()).await
    }

    /// The same, with `opts` (a fault mode, say).
    pub async fn start_with(endpoint: SseEndpoint, opts: DevMcpOptions) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{SSE_PATH}", listener.local_addr().unwrap());
        let server = DevMcp::new(opts);
        let stop = CancellationToken::new();
        tokio::spawn(server.clone().serve_sse(listener, endpoint, stop.clone()));
        Self { url, server, stop }
    }
}

impl Drop for SseMcp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `names` with `prefix` before each, sorted: the tools main_server should hold.
pub fn prefixed(prefix: &str, names: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(|n| format!("{prefix}{n}")).collect();
    v.sort();
    v
}

/// The agent config of an MCP test: fast polls, and a short backoff, which
/// the restarts of MCP servers follow too.
pub fn fast_agent(ws: &Workspace, main_server: &str) -> AgentToml {
    let mut agent = ws.agent(main_server);
    agent.poll_interval = "100ms".into();
    agent.backoff_initial = "20ms".into();
    agent.backoff_max = "200ms".into();
    agent.debounce = "20ms".into();
    agent
}

/// The in-process daemon on one manifest (`tools/mcp.toml`), against a
/// stand-in main_server of its own. Fields drop in order: the daemon stops
/// before its workspace goes.
pub struct Rig {
    pub daemon: InProcess,
    pub h: DevServerHandle,
    pub ws: Workspace,
}

impl Rig {
    /// Writes `manifest` and starts the daemon with [`fast_agent`].
    pub async fn start(manifest: &str) -> Self {
        let h = dev_server().await;
        let ws = Workspace::new();
        ws.write_tool("mcp.toml", manifest);
        let config = ws.write_config(&fast_agent(&ws, &h.url()));
        let daemon = InProcess::start(&config).await;
        Self { daemon, h, ws }
    }

    /// Every MCP server's status, by name.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.daemon.daemon().mcp.statuses()
    }

    /// The status of the server `name`; panics when there is none.
    pub fn status(&self, name: &str) -> ServerStatus {
        self.statuses()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no MCP server `{name}`: {:#?}", self.statuses()))
    }

    /// Waits until the status of `name` satisfies `pred`, or fails the test
    /// with the last one seen.
    pub async fn wait_server(
        &self,
        name: &str,
        what: &str,
        mut pred: impl FnMut(&ServerStatus) -> bool,
    ) -> ServerStatus {
        let ok = wait_until(WAIT, || {
            self.statuses().iter().any(|s| s.name == name && pred(s))
        })
        .await;
        assert!(ok, "timed out waiting for {what}: {:#?}", self.statuses());
        self.status(name)
    }

    /// Waits until the stand-in holds the tool `name` for every role (a
    /// server's tools register a moment after its session is ready).
    pub async fn wait_tool(&self, name: &str) {
        wait_stand_in(&self.h, &format!("`{name}` to be registered"), |h| {
            let snap = h.registry_snapshot();
            snap.role_names()
                .iter()
                .all(|role| snap.tool(role, name).is_some())
        })
        .await;
    }

    /// Calls a tool through the stand-in main_server, as the model would.
    pub async fn call(&self, name: &str, arguments: Value) -> InvokeAnswer {
        invoke(&self.h, call(name, arguments)).await
    }
}

/// Waits until every role holds exactly `names` of ours (sorted).
pub async fn wait_ours(h: &DevServerHandle, names: &[String]) {
    wait_stand_in(h, &format!("our tools to be {names:?}"), |h| {
        let snap = h.registry_snapshot();
        snap.role_names()
            .iter()
            .all(|role| our_names(&snap, role) == names)
    })
    .await;
}

/// The requests that took any of `names` off main_server: an unregister
/// naming it, or a clear of our source.
pub fn removals(h: &DevServerHandle, names: &[String]) -> Vec<RequestRecord> {
    h.requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .filter(|r| {
            r.path == "/api/tools/clear"
                || (r.path == "/api/tools/unregister"
                    && r.body["name"]
                        .as_str()
                        .is_some_and(|n| names.iter().any(|x| x == n)))
        })
        .collect()
}

/// Retries `attempt` until it gives a value, at most [`WAIT`]; panics with
/// `what` and the last failure otherwise. For conditions that only a call
/// can read (a server answering again).
pub async fn eventually<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match attempt().await {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out after {WAIT:?} waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The stand-in MCP server's pid, from its `pid` tool called as the model
/// calls it (`prefix` is the server's).
pub async fn pid_by_tool(h: &DevServerHandle, prefix: &str) -> u32 {
    let a = invoke(h, call(&format!("{prefix}pid"), json!({}))).await;
    assert!(!a.is_error, "{}", a.model_text);
    a.output["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or_else(|| panic!("no pid in {}", a.model_text))
}

/// Whether an answer of an `echo` tool is `text` read by the model, as
/// [`eventually`] takes it.
pub fn echoed(a: &InvokeAnswer, text: &str) -> Result<(), String> {
    if !a.is_error && a.model_text == text {
        Ok(())
    } else {
        Err(format!("is_error {}: {}", a.is_error, a.model_text))
    }
}

/// `check --probe` of a workspace whose `tools/mcp.toml` is `manifest`
/// (main_server is never contacted: its URL is a closed port).
pub async fn probe(ws: &Workspace, manifest: &str) -> std::process::Output {
    ws.write_tool("mcp.toml", manifest);
    let config = ws.write_config(&fast_agent(ws, "http://127.0.0.1:9"));
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("check").arg("--probe").arg("--config").arg(&config);
    super::daemon::clean_env(&mut cmd);
    cmd.kill_on_drop(true);
    tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("check --probe ends")
        .expect("running check --probe")
}
