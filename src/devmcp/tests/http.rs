//! The server on Streamable HTTP at 127.0.0.1:0 and rmcp's client over
//! reqwest: both lifecycles, `toggle`'s notification, `hang`'s
//! cancellation, and stopping and starting again on the same port.

use std::time::Instant;

use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;
use tokio::net::TcpListener;

use super::*;
use crate::devmcp::{EXTRA_TOOL, HTTP_DRAIN, HTTP_PATH};

struct OverHttp {
    url: String,
    server: DevMcp,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), DevMcpError>>,
}

async fn serve_on(listener: TcpListener, opts: DevMcpOptions) -> OverHttp {
    let addr = listener.local_addr().expect("bound");
    let server = DevMcp::new(opts);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server.clone().serve_http(listener, shutdown.clone()));
    OverHttp {
        url: format!("http://{addr}{HTTP_PATH}"),
        server,
        shutdown,
        task,
    }
}

async fn http_client(url: &str) -> (Connected, watch::Receiver<u32>) {
    let (handler, list_changed) = client();
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let client = within(
        "the HTTP client to start",
        handler.serve_with_lifecycle(transport, auto()),
    )
    .await
    .expect("the HTTP client starts");
    (client, list_changed)
}

#[tokio::test]
async fn over_http_both_generations_toggle_and_cancel() {
    for (legacy, version) in [
        (false, ProtocolVersion::V_2026_07_28),
        (true, ProtocolVersion::V_2025_11_25),
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let http = serve_on(
            listener,
            DevMcpOptions {
                legacy,
                ..DevMcpOptions::default()
            },
        )
        .await;
        let (c, mut list_changed) = http_client(&http.url).await;
        assert_eq!(protocol(&c), Some(version), "legacy: {legacy}");

        let added = call(&c, "toggle", json!({})).await.expect("toggle");
        assert_eq!(text(&added), "extra added");
        wait_list_changed(&mut list_changed, 1).await;
        assert!(tool_names(&c).await.contains(&EXTRA_TOOL.to_owned()));

        hang_then_drop(&c, &http.server).await;

        http.shutdown.cancel();
        let started = Instant::now();
        let served = within("the HTTP server to stop", http.task)
            .await
            .expect("no panic");
        assert!(served.is_ok(), "{served:?}");
        assert!(
            started.elapsed() < HTTP_DRAIN,
            "the connections closed by themselves"
        );
        drop(c);
    }
}

#[tokio::test]
async fn the_http_server_can_stop_and_start_again_on_the_same_port() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound");
    let first = serve_on(listener, DevMcpOptions::default()).await;
    let (c, _) = http_client(&first.url).await;
    call(&c, "toggle", json!({})).await.expect("toggle");
    first.shutdown.cancel();
    within("the first server to stop", first.task)
        .await
        .expect("no panic")
        .expect("served");

    // Gone: the client's next call fails instead of hanging.
    assert!(call(&c, "echo", json!({"text": "anyone?"})).await.is_err());

    let listener = TcpListener::bind(addr).await.expect("the same port again");
    let second = serve_on(listener, DevMcpOptions::default()).await;
    assert_eq!(second.url, first.url);
    let (c2, _) = http_client(&second.url).await;
    // A new server: `extra` is gone with the old one.
    assert!(!tool_names(&c2).await.contains(&EXTRA_TOOL.to_owned()));
    second.shutdown.cancel();
    within("the second server to stop", second.task)
        .await
        .expect("no panic")
        .expect("served");
}
