//! A Streamable HTTP MCP server (the stand-in, `devmcp::serve_http` in the
//! test on a port-0 listener): its tools registered and called; stopped,
//! its tools stay registered and a call says it is not there now; started
//! again on the same port, calls are answered again.

use std::net::SocketAddr;

use neko_sidecar::devmcp::{self, DevMcpOptions, HTTP_PATH};
use neko_sidecar::mcp::Phase;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support::WAIT;
use crate::support::mcp::*;

/// The stand-in MCP server on `listener` until its token is cancelled.
struct HttpServer {
    stop: CancellationToken,
    task: JoinHandle<Result<(), devmcp::DevMcpError>>,
}

impl HttpServer {
    fn start(listener: TcpListener) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(devmcp::serve_http(
            listener,
            DevMcpOptions::default(),
            stop.clone(),
        ));
        Self { stop, task }
    }

    /// Cancels it and waits until it has returned (its port closed).
    async fn stop(self) {
        self.stop.cancel();
        let served = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the server stops")
            .expect("the server task does not panic");
        assert!(served.is_ok(), "{served:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_stopped_and_started_again_on_its_port_keeps_its_tools() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let server = HttpServer::start(listener);
    let url = format!("http://{addr}{HTTP_PATH}");
    let rig = Rig::start(&http_server("web", &url, "")).await;
    let all = prefixed("web_", &DEV_TOOLS);
    wait_ours(&rig.h, &all).await;
    let s = rig.status("web");
    assert_eq!(s.transport, format!("http {url}"));
    assert_eq!(s.protocol.as_deref(), Some(CURRENT_PROTOCOL), "{s:#?}");
    assert_eq!(s.pid, None);
    echoed(
        &rig.call("web_echo", json!({"text": "over http"})).await,
        "over http",
    )
    .unwrap();

    server.stop().await;
    let a = rig.call("web_echo", json!({"text": "anyone?"})).await;
    assert!(a.is_error, "{a:#?}");
    let text = &a.model_text;
    assert!(text.contains("MCP server `web`"), "{text}");
    assert!(
        text.contains("restarting") || text.contains("started again"),
        "{text}"
    );
    rig.wait_server("web", "the loss noticed", |s| s.phase == Phase::Restarting)
        .await;
    let a = rig.call("web_echo", json!({"text": "anyone?"})).await;
    assert!(a.is_error, "{a:#?}");
    assert!(a.model_text.contains("is restarting"), "{}", a.model_text);

    let again = TcpListener::bind(addr).await.expect("the same port again");
    let server = HttpServer::start(again);
    eventually("a call answered again", || async {
        echoed(&rig.call("web_echo", json!({"text": "back"})).await, "back")
    })
    .await;
    let s = rig.status("web");
    assert_eq!(s.phase, Phase::Ready, "{s:#?}");
    assert!(s.restarts >= 1, "{s:#?}");
    wait_ours(&rig.h, &all).await;
    assert_eq!(removals(&rig.h, &all), vec![], "no tool was taken off");
    server.stop().await;
}
