//! A server that floods the sidecar with its own requests (`ping`, 1,000
//! at once after each listing) and never takes the replies (the POSTs that
//! carry them are held open): before issue 49 every reply held a
//! connection until the read timeout, and descriptors ran out within
//! seconds. Now at most 32 of its requests are in hand at once, the rest
//! dropped, and a server that floods has its session ended and started
//! again, the reason in its status; another server's tools stay callable.

use neko_sidecar::devmcp::{DevMcpOptions, Fault, SseEndpoint};
use neko_sidecar::mcp::Phase;
use serde_json::json;

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
    let a = rig.call("dev_echo", json!({"text": "still here"})).await;
    assert_eq!(a.model_text, "still here");
    assert_eq!(rig.status("dev").phase, Phase::Ready);
}
