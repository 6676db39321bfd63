//! A server that floods the sidecar with its own requests (`ping`, 1,000
//! at once after each listing) and never takes the replies (the POSTs that
//! carry them are held open): before issue 49 every reply held a
//! connection until the read timeout, and descriptors ran out within
//! seconds. Now at most 32 of its requests are in hand at once, the rest
//! dropped, and a server that floods has its session ended and started
//! again, the reason in its status; another server's tools stay callable.
//! The same over Streamable HTTP, whose reply POSTs are either never
//! answered or answered by an event stream that never ends (before, 16.8k
//! connections in 10 s, or +24 MB/s while the session showed `ready`).

use neko_sidecar::devmcp::{self, DevMcpOptions, Fault, HTTP_PATH, SseEndpoint};
use neko_sidecar::mcp::Phase;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::support::mcp::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_flooding_with_requests_whose_replies_it_stalls_is_restarted_with_the_reason() {
    let hostile = SseMcp::start_with(
        SseEndpoint::Relative,
        DevMcpOptions {
            fault: Some(Fault::PingFlood),
            ..DevMcpOptions::default()
        },
    )
    .await;
    let manifest = format!(
        "{}{}",
        sse_server("flood", &hostile.url, ""),
        stdio_server("dev", &[], "")
    );
    let rig = Rig::start(&manifest).await;
    let status = rig
        .wait_server("flood", "the flood to end the session", |s| {
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("it floods"))
        })
        .await;
    let why = status.last_error.unwrap_or_default();
    assert!(
        why.starts_with("the MCP server `flood`: the server sent requests faster than the sidecar answers them (more than 32 at a time; 100 dropped unanswered): it floods, so its session was ended"),
        "{why}"
    );
    assert_ne!(status.phase, Phase::Ready, "{why}");
    // The well-behaved server meanwhile.
    rig.wait_tool("dev_echo").await;
    let a = rig.call("dev_echo", json!({"text": "still here"})).await;
    assert_eq!(a.model_text, "still here");
    assert_eq!(rig.status("dev").phase, Phase::Ready);
}

/// The reason a flood ends a session with, as the status says it.
fn flood_reason(name: &str) -> String {
    format!(
        "the MCP server `{name}`: the server sent requests faster than the sidecar answers them (more than 32 at a time; 100 dropped unanswered): it floods, so its session was ended"
    )
}

/// The flood over Streamable HTTP with `fault`: the session ended as a
/// flood, its reason in the status, while the stdio server's tool is called.
async fn streamable_http_flood_ends_the_session(fault: Fault) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{HTTP_PATH}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    tokio::spawn(devmcp::serve_http(
        listener,
        DevMcpOptions {
            fault: Some(fault),
            // A server of the 2025-11-25 generation: the 2026-07-28 one
            // has no requests of its own to send outside a call.
            legacy: true,
            ..DevMcpOptions::default()
        },
        stop,
    ));
    let manifest = format!(
        "{}{}",
        http_server("flood", &url, ""),
        stdio_server("dev", &[], "")
    );
    let rig = Rig::start(&manifest).await;
    let status = rig
        .wait_server("flood", "the flood to end the session", |s| {
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("it floods"))
        })
        .await;
    let why = status.last_error.unwrap_or_default();
    assert!(why.starts_with(&flood_reason("flood")), "{fault:?}: {why}");
    assert_ne!(status.phase, Phase::Ready, "{fault:?}: {why}");
    // The well-behaved server meanwhile: its tool registered (main_server
    // invokes it) and answering.
    rig.wait_tool("dev_echo").await;
    let a = rig.call("dev_echo", json!({"text": "still here"})).await;
    assert_eq!(a.model_text, "still here");
    assert_eq!(rig.status("dev").phase, Phase::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_flooding_whose_reply_posts_never_answer_is_restarted_with_the_reason()
 {
    streamable_http_flood_ends_the_session(Fault::PingFlood).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_flooding_whose_reply_posts_get_endless_streams_is_restarted_with_the_reason()
 {
    streamable_http_flood_ends_the_session(Fault::PingFloodStream).await;
}
