//! The legacy HTTP+SSE transport (MCP 2024-11-05): the stand-in MCP server
//! serving it in the test (`DevMcp::serve_sse`) or as `dev-mcp --sse`, and
//! a real server built with the Python SDK (`tests/fixtures/mcp/sse_server.py`,
//! Unix only: see `support::python`). Tools registered and called, a
//! picture repaired as over the other transports; a cut stream opened
//! again with the tools kept; a URL with no transport whose POST is
//! answered 405 reached through the fallback the MCP specification asks
//! of clients; and the streams that are refused with their reason (no
//! `endpoint` event, one on another origin, Streamable HTTP said of an SSE
//! URL).

use std::process::Stdio;

use neko_sidecar::devmcp::SseEndpoint;
use neko_sidecar::mcp::Phase;
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

use crate::support::mcp::*;
use crate::support::{BIN, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_server_has_its_tools_registered_and_called_and_its_picture_repaired() {
    let server = SseMcp::start(SseEndpoint::Relative).await;
    let rig = Rig::start(&sse_server("old", &server.url, "")).await;
    wait_ours(&rig.h, &prefixed("old_", &DEV_TOOLS)).await;
    let s = rig.status("old");
    assert_eq!(s.transport, format!("sse {}", server.url));
    assert_eq!(s.phase, Phase::Ready, "{s:#?}");
    // Greeted with `initialize`, as its generation expects.
    assert_eq!(s.protocol.as_deref(), Some(LEGACY_PROTOCOL), "{s:#?}");
    echoed(
        &rig.call("old_echo", json!({"text": "over sse"})).await,
        "over sse",
    )
    .unwrap();

    // A PNG main_server would refuse arrives repaired, as over stdio.
    let a = rig.call("old_image", json!({"bad_crc": true})).await;
    assert!(!a.is_error, "{a:#?}");
    assert_eq!(a.images.len(), 1, "{a:#?}");
    assert_eq!((a.images[0].mime, a.images[0].width), ("image/png", 16));
    let stats = &rig.daemon.daemon().callback.stats().tools["old_image"];
    assert_eq!((stats.images_repaired, stats.images_refused), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_event_stream_is_opened_again_and_the_tools_never_leave_main_server() {
    let server = SseMcp::start(SseEndpoint::Relative).await;
    let rig = Rig::start(&sse_server("old", &server.url, "")).await;
    let all = prefixed("old_", &DEV_TOOLS);
    wait_ours(&rig.h, &all).await;

    // The server stays up; only the stream goes, as a dropped connection.
    server.server.cut_streams();
    rig.wait_server("old", "the cut seen and the stream opened again", |s| {
        s.restarts >= 1 && s.phase == Phase::Ready
    })
    .await;
    eventually("a call answered on the new stream", || async {
        echoed(&rig.call("old_echo", json!({"text": "back"})).await, "back")
    })
    .await;
    wait_ours(&rig.h, &all).await;
    assert_eq!(removals(&rig.h, &all), vec![], "no tool was taken off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_without_a_transport_whose_post_is_answered_405_is_reached_over_sse() {
    // `dev-mcp --sse` as a user runs it: the URL alone on stdout.
    let mut child = Command::new(BIN)
        .args(["dev-mcp", "--sse", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("dev-mcp starts");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("dev-mcp --sse prints its URL")
        .unwrap()
        .expect("a line");
    assert!(url.ends_with("/sse"), "{url}");
    // What a client of Streamable HTTP meets there.
    let post = neko_sidecar::tls::plain_http()
        .build()
        .unwrap()
        .post(&url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), reqwest::StatusCode::METHOD_NOT_ALLOWED);

    let rig = Rig::start(&http_server("auto", &url, "")).await;
    wait_ours(&rig.h, &prefixed("auto_", &DEV_TOOLS)).await;
    let s = rig.status("auto");
    // Found at the first start, and shown as what it is.
    assert_eq!((s.attempt, s.restarts), (0, 0), "{s:#?}");
    assert_eq!(s.transport, format!("sse {url}"));
    echoed(
        &rig.call("auto_echo", json!({"text": "found by GET"})).await,
        "found by GET",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_said_of_an_sse_url_fails_with_the_status_and_what_to_write() {
    let server = SseMcp::start(SseEndpoint::Relative).await;
    let rig = Rig::start(&http_server(
        "strict",
        &server.url,
        "transport = \"streamable-http\"",
    ))
    .await;
    let s = rig
        .wait_server("strict", "the failure", |s| s.last_error.is_some())
        .await;
    let e = s.last_error.clone().unwrap();
    assert!(e.contains("HTTP 405"), "{e}");
    assert!(e.contains("transport = \"sse\""), "{e}");
    assert_eq!(s.transport, format!("http {}", server.url));
    assert!(s.tools.is_empty(), "{s:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_that_never_names_its_endpoint_is_reported_as_such() {
    let server = SseMcp::start(SseEndpoint::Missing).await;
    let rig = Rig::start(&sse_server(
        "mute",
        &server.url,
        "startup_timeout_seconds = 2",
    ))
    .await;
    let s = rig
        .wait_server("mute", "the failure", |s| s.last_error.is_some())
        .await;
    let e = s.last_error.clone().unwrap();
    // Half the budget: reported as what it is, before the handshake's
    // own time runs out.
    assert!(e.contains("sent no `endpoint` event in 1 s"), "{e}");
    assert_eq!(s.phase, Phase::Starting, "{s:#?}");
    assert!(s.tools.is_empty(), "{s:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_on_another_origin_is_refused_naming_both_origins() {
    let server = SseMcp::start(SseEndpoint::OtherOrigin).await;
    let rig = Rig::start(&sse_server("away", &server.url, "")).await;
    let s = rig
        .wait_server("away", "the refusal", |s| s.last_error.is_some())
        .await;
    let e = s.last_error.clone().unwrap();
    let stream_origin = server.url.trim_end_matches("/sse");
    assert!(
        e.contains(&format!(
            "another origin (http://example.invalid) than the event stream's ({stream_origin})"
        )),
        "{e}"
    );
    assert!(s.tools.is_empty(), "{s:#?}");
}

/// A real server of the Python SDK (MCPServer, FastMCP before mcp 2.0),
/// reached with no transport given: its POST is 405, so the fallback finds
/// it; then killed outright and started again on its port.
// Unix only: the SDK's server is a process of this machine, which the
// suite built for Windows and run under Wine does not have.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_sse_server_is_found_called_repaired_and_reconnected_after_a_kill() {
    use crate::support::python::PySseServer;

    let py = PySseServer::start(0).await;
    let (url, port) = (py.url.clone(), py.port);
    let rig = Rig::start(&http_server("py", &url, "")).await;
    let tools = prefixed("py_", &["echo", "pid", "picture"]);
    wait_ours(&rig.h, &tools).await;
    let s = rig.status("py");
    assert_eq!(s.transport, format!("sse {url}"));
    assert_eq!(s.phase, Phase::Ready, "{s:#?}");
    py_echoed(
        &rig.call("py_echo", json!({"text": "from Python"})).await,
        "from Python",
    )
    .unwrap();
    let a = rig.call("py_picture", json!({})).await;
    assert!(!a.is_error, "{a:#?}");
    assert_eq!(a.images.len(), 1, "{a:#?}");
    assert_eq!((a.images[0].mime, a.images[0].width), ("image/png", 16));
    let stats = &rig.daemon.daemon().callback.stats().tools["py_picture"];
    assert_eq!((stats.images_repaired, stats.images_refused), (1, 0));
    let first = pid_by_tool(&rig.h, "py_").await;

    py.kill().await;
    rig.wait_server("py", "the cut stream noticed", |s| {
        s.phase == Phase::Restarting
    })
    .await;
    let _again = PySseServer::start(port).await;
    eventually("a call answered by the new process", || async {
        py_echoed(
            &rig.call("py_echo", json!({"text": "again"})).await,
            "again",
        )
    })
    .await;
    assert_ne!(pid_by_tool(&rig.h, "py_").await, first);
    let s = rig.status("py");
    assert!(s.restarts >= 1, "{s:#?}");
    assert_eq!(s.transport, format!("sse {url}"));
    wait_ours(&rig.h, &tools).await;
    assert_eq!(removals(&rig.h, &tools), vec![], "no tool was taken off");
}

/// Whether an answer of the Python server's `echo` is `text`: the SDK gives
/// a `str` result as `structuredContent` `{"result": text}` too, which is
/// what the model reads.
#[cfg(unix)]
fn py_echoed(a: &neko_sidecar::devserver::InvokeAnswer, text: &str) -> Result<(), String> {
    if !a.is_error && a.output == json!({"result": text}) {
        Ok(())
    } else {
        Err(format!("is_error {}: {}", a.is_error, a.model_text))
    }
}
