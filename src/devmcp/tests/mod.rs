//! The stand-in MCP server against rmcp's own client, in-process: over a
//! `tokio::io::duplex` pair (what stdio is to a child; `pipes`), over
//! Streamable HTTP on 127.0.0.1:0 (`http`), and as raw lines on the wire
//! (`wire`). Every wait is on a condition (a watch of the server's counters
//! or of the notifications the client got) with a bound. The helpers every
//! area shares are here.

mod http;
mod pipes;
mod wire;

use std::future::Future;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientConfig, JsonObject,
    ProtocolVersion,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt as _, RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{DevMcp, DevMcpError, DevMcpOptions};

/// Bound on every wait: far above what any step takes.
const LIMIT: Duration = Duration::from_secs(10);

async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(LIMIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// A client that counts the `notifications/tools/list_changed` it receives
/// outside a subscription (rmcp hands those to `on_tool_list_changed`).
#[derive(Clone)]
struct Client {
    list_changed: watch::Sender<u32>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.send_modify(|n| *n += 1);
    }
}

type Connected = RunningService<RoleClient, Client>;

/// What a client of both generations does: try `server/discover` for
/// 2026-07-28, fall back to `initialize` if the server does not know it.
fn auto() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    }
}

fn client() -> (Client, watch::Receiver<u32>) {
    let (tx, rx) = watch::channel(0);
    (Client { list_changed: tx }, rx)
}

struct OverPipes {
    server: DevMcp,
    client: Connected,
    list_changed: watch::Receiver<u32>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), DevMcpError>>,
}

/// The server on one end of a duplex pipe, an rmcp client on the other.
async fn over_pipes(opts: DevMcpOptions, lifecycle: ClientLifecycleMode) -> OverPipes {
    let server = DevMcp::new(opts);
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server_end);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server.clone().serve_io(read, write, shutdown.clone()));
    let (handler, list_changed) = client();
    let client = within(
        "the client to start",
        handler.serve_with_lifecycle(client_end, lifecycle),
    )
    .await
    .expect("the client starts");
    OverPipes {
        server,
        client,
        list_changed,
        shutdown,
        task,
    }
}

impl OverPipes {
    async fn stop(self) {
        self.shutdown.cancel();
        let served = within("the server to stop", self.task)
            .await
            .expect("no panic");
        assert!(served.is_ok(), "{served:?}");
    }
}

fn protocol(client: &Connected) -> Option<ProtocolVersion> {
    client.peer_info().map(|info| info.protocol_version.clone())
}

fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

async fn call(
    client: &Connected,
    name: &str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args(arguments));
    match within(name, client.call_tool_once(params)).await? {
        CallToolResponse::Complete(result) => Ok(result),
        other => panic!("{name}: not a complete result: {other:?}"),
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("|")
}

async fn tool_names(client: &Connected) -> Vec<String> {
    let tools = within("tools/list", client.list_all_tools())
        .await
        .expect("tools/list");
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

async fn wait_list_changed(rx: &mut watch::Receiver<u32>, at_least: u32) {
    within("list_changed", rx.wait_for(|n| *n >= at_least))
        .await
        .expect("the client is alive");
}

async fn hang_then_drop(client: &Connected, server: &DevMcp) {
    let mut stats = server.stats();
    let before = stats.borrow().cancelled;
    let hang = client.call_tool_once(CallToolRequestParams::new("hang"));
    tokio::select! {
        answered = hang => panic!("hang answered: {answered:?}"),
        running = within("hang to start", stats.wait_for(|s| s.hanging == 1)) => {
            running.map(|s| *s).expect("the server is alive");
        }
    }
    // The call's future is dropped here: rmcp sends notifications/cancelled.
    let after = within(
        "the cancellation",
        stats.wait_for(|s| s.cancelled == before + 1 && s.hanging == 0),
    )
    .await
    .map(|s| *s)
    .expect("the server is alive");
    assert_eq!(after.cancelled, before + 1);
}
