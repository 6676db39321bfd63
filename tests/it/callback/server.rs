//! The callback server's own rules: who may call, which URLs reach a tool,
//! what a reload keeps, statistics, and the drain on shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use neko_sidecar::callback::{Drained, Outcome};
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::support::callback::*;
use crate::support::{http_client, serve_http, wait_until};
#[cfg(target_os = "linux")]
use crate::support::{process_gone, script};

#[tokio::test]
async fn the_callback_url_carries_a_secret_token() {
    let (_d, sc) = echo_sidecar().await;
    let url = sc.handle.url_for("echo");
    let base = sc.handle.base_url();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let token = url
        .strip_prefix(&format!("{base}/cb/"))
        .and_then(|rest| rest.strip_suffix("/echo"))
        .unwrap();
    assert_eq!(token.len(), 32);
    let (_d2, other) = echo_sidecar().await;
    assert_ne!(other.handle.url_for("echo").rsplit('/').nth(1), Some(token));
    success(&sc.call("echo", json!({})).await);
}

#[tokio::test]
async fn an_ipv6_listener_gets_a_bracketed_url() {
    let Ok(listener) = tokio::net::TcpListener::bind("[::1]:0").await else {
        println!("SKIPPED: no IPv6 loopback on this machine");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sc = Sidecar::on(listener, &state(dir.path(), &ECHO), settings());
    assert!(
        sc.handle.base_url().starts_with("http://[::1]:"),
        "{}",
        sc.handle.base_url()
    );
    success(&sc.call("echo", json!({})).await);
}

#[tokio::test]
async fn a_wrong_token_or_tool_is_told_so() {
    let (_d, sc) = echo_sidecar().await;
    let base = sc.handle.base_url().to_string();
    let body = call_body("echo", json!({})).to_string();
    let stale = format!("{base}/cb/{}/echo", "0".repeat(32));
    let msg = failure(
        &sc.post(&stale, body.clone()).await,
        "UNKNOWN_CALLBACK_TOKEN",
    );
    assert!(msg.contains("out of date"), "{msg}");
    let msg = failure(&sc.call("nope", json!({})).await, "TOOL_NOT_REGISTERED");
    assert_eq!(
        msg,
        "tool `nope` is not served by this sidecar (source `plugin:test`); it may have been removed from its manifest"
    );
    let (status, body) = sc.post(&format!("{base}/other"), body).await;
    assert_eq!(status, 404);
    assert_eq!(body["is_error"], true);
    let r = sc.handle.stats().rejections;
    assert_eq!((r.unknown_token, r.unknown_tool), (1, 1));
}

#[tokio::test]
async fn a_body_that_is_not_a_call_is_told_so() {
    let (_d, sc) = echo_sidecar().await;
    let url = sc.handle.url_for("echo");
    for (body, why) in [
        ("not json", "the body is not JSON"),
        (r#"{"name": "echo"}"#, "`arguments` is missing"),
        (
            r#"{"name": "other", "arguments": {}}"#,
            "names tool `other`",
        ),
    ] {
        let msg = failure(&sc.post(&url, body.into()).await, "BAD_CALLBACK_BODY");
        assert!(msg.contains(why), "{body}: {msg}");
    }
    assert_eq!(sc.handle.stats().tools["echo"].count(Outcome::BadBody), 3);
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413() {
    let (_d, sc) = echo_sidecar().await;
    let big = call_body("echo", json!({"pad": "z".repeat(70 * 1024)})).to_string();
    let (status, body) = sc.post(&sc.handle.url_for("echo"), big).await;
    assert_eq!(status, 413);
    assert_eq!(body["is_error"], true);
    assert!(
        body["error"].as_str().unwrap().contains("65536 bytes"),
        "{body}"
    );
    assert_eq!(sc.handle.stats().rejections.body_too_large, 1);
}

/// Sends `head` and then each of `pieces` as its own chunk of a chunked
/// body, over a raw connection, and returns the status and the body read.
async fn post_chunked(url: &str, pieces: &[&[u8]]) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (addr, path) = split_url(url);
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    for p in pieces {
        s.write_all(format!("{:x}\r\n", p.len()).as_bytes())
            .await
            .unwrap();
        s.write_all(p).await.unwrap();
        s.write_all(b"\r\n").await.unwrap();
        s.flush().await.unwrap();
        // Not synchronisation: a pause makes the pieces likely to arrive
        // as separate reads; the assertions hold however they arrive.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The server may answer (413) and close before the last chunk.
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    let status: u16 = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    // The answer itself may be chunked: take the JSON object inside.
    let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    (status, serde_json::from_str(json).unwrap())
}

#[tokio::test]
async fn a_body_in_many_chunks_is_read_whole() {
    let (_d, sc) = echo_sidecar().await;
    let body = call_body("echo", json!({"word": "chunked"})).to_string();
    let bytes = body.as_bytes();
    let pieces: Vec<&[u8]> = bytes.chunks(7).collect();
    let (status, answer) = post_chunked(&sc.handle.url_for("echo"), &pieces).await;
    assert_eq!(status, 200);
    assert_eq!(answer["is_error"], false, "{answer}");
    // `cat` echoes the body: the handler got it whole.
    assert_eq!(answer["output"]["arguments"]["word"], "chunked", "{answer}");
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_gets_413() {
    let (_d, sc) = echo_sidecar().await;
    let piece = vec![b' '; 16 * 1024];
    let pieces: Vec<&[u8]> = (0..5).map(|_| piece.as_slice()).collect();
    let (status, answer) = post_chunked(&sc.handle.url_for("echo"), &pieces).await;
    assert_eq!(status, 413);
    assert_eq!(answer["is_error"], true);
    assert_eq!(sc.handle.stats().rejections.body_too_large, 1);
}

#[tokio::test]
async fn only_post_reaches_a_tool_and_other_paths_are_404() {
    let (_d, sc) = echo_sidecar().await;
    let url = sc.handle.url_for("echo");
    let resp = sc.client.get(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "POST");
    let resp = sc
        .client
        .post(format!("{}/elsewhere", sc.handle.base_url()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["output"]["code"], "NO_SUCH_ROUTE");
}

/// The address this machine uses to reach the outside, if it has one: no
/// packet is sent (a UDP "connect" only picks a route).
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[tokio::test]
async fn a_peer_that_is_not_loopback_gets_403() {
    // The rule itself is unit-tested on addresses (limits::peer_allowed);
    // this checks it is applied, when the machine has another address.
    let Some(ip) = non_loopback_address() else {
        println!("SKIPPED: this machine has no non-loopback address to call from");
        return;
    };
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sc = Sidecar::on(listener, &state(dir.path(), &ECHO), settings());
    let resp = sc
        .client
        .post(sc.handle.url_for("echo"))
        .body(call_body("echo", json!({})).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert_eq!(sc.handle.stats().rejections.forbidden_peer, 1);
    assert_eq!(sc.handle.stats().tools["echo"].calls, 0);
}

#[tokio::test]
async fn a_reload_swaps_tools_and_keeps_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let two = format!("{}{}", *ECHO, ECHO.replace("\"echo\"", "\"echo2\""));
    let sc = Sidecar::start(&state(dir.path(), &two)).await;
    success(&sc.call("echo", json!({})).await);
    success(&sc.call("echo2", json!({})).await);
    sc.handle.set_tools(&state(dir.path(), &ECHO));
    failure(&sc.call("echo2", json!({})).await, "TOOL_NOT_REGISTERED");
    success(&sc.call("echo", json!({})).await);
    let stats = sc.handle.stats();
    assert_eq!(stats.tools.keys().collect::<Vec<_>>(), ["echo"]);
    let echo = &stats.tools["echo"];
    assert_eq!(
        (echo.calls, echo.count(Outcome::Ok), echo.in_flight),
        (2, 2, 0)
    );
    assert_eq!(echo.latency_buckets.iter().sum::<u64>(), 2);
}

/// A tool whose handler blocks until released, counting its calls.
async fn blocking_sidecar(
    extra: &str,
) -> (
    tempfile::TempDir,
    Arc<Sidecar>,
    Arc<Notify>,
    Arc<AtomicUsize>,
) {
    let release = Arc::new(Notify::new());
    let hits = Arc::new(AtomicUsize::new(0));
    let (r, h) = (release.clone(), hits.clone());
    let router = Router::new().route(
        "/b",
        post(move || async move {
            h.fetch_add(1, Ordering::SeqCst);
            r.notified().await;
            "finished"
        }),
    );
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[[tool]]\nname = \"b\"\ndescription = \"d\"\n{extra}\nhandler = {{ type = \"http\", url = \"http://{addr}/b\" }}\n"
    );
    let sc = Arc::new(Sidecar::start(&state(dir.path(), &toml)).await);
    (dir, sc, release, hits)
}

#[tokio::test]
async fn a_drain_lets_running_calls_finish_and_takes_no_new_ones() {
    let (_d, sc, release, hits) = blocking_sidecar("").await;
    let running = tokio::spawn({
        let sc = sc.clone();
        async move { sc.call("b", json!({})).await }
    });
    assert!(wait_until(Duration::from_secs(5), || hits.load(Ordering::SeqCst) == 1).await);
    let drain = tokio::spawn({
        let sc = sc.clone();
        async move {
            sc.handle
                .drain(Instant::now() + Duration::from_secs(30))
                .await
        }
    });
    // New connections are refused once the drain has begun.
    assert!(refused_within(Duration::from_secs(5), &sc.handle.url_for("b")).await);
    assert!(!drain.is_finished(), "the drain waits for the running call");
    release.notify_one();
    assert_eq!(success(&running.await.unwrap()), "finished");
    assert_eq!(drain.await.unwrap(), Drained::Clean);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// Whether a new connection to `url` fails within `within`.
async fn refused_within(within: Duration, url: &str) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        // A fresh client each time: no pooled connection to reuse.
        let fresh = http_client();
        if fresh.post(url).body("{}").send().await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

// An `sh` script and /proc; `callback::tree` has the same on every platform.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_drain_past_its_deadline_stops_running_handlers() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "hang.sh", "echo $$ > self.pid\nexec sleep 300");
    let toml = format!(
        "[[tool]]\nname = \"h\"\ndescription = \"d\"\nhandler = {{ type = \"exec\", command = [\"{}\"] }}\n",
        s.display()
    );
    let sc = Arc::new(Sidecar::start(&state(dir.path(), &toml)).await);
    let running = tokio::spawn({
        let sc = sc.clone();
        async move { sc.call("h", json!({})).await }
    });
    let pid_file = dir.path().join("self.pid");
    assert!(wait_until(Duration::from_secs(5), || pid_file.exists()).await);
    let drained = sc
        .handle
        .drain(Instant::now() + Duration::from_millis(200))
        .await;
    assert_eq!(drained, Drained::Forced);
    let msg = failure(&running.await.unwrap(), "SIDECAR_SHUTTING_DOWN");
    assert!(msg.contains("shutting down"), "{msg}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || process_gone(pid)).await);
}

#[tokio::test]
async fn the_shutdown_token_stops_accepting() {
    let (_d, sc) = echo_sidecar().await;
    success(&sc.call("echo", json!({})).await);
    sc.shutdown.cancel();
    assert!(
        refused_within(Duration::from_secs(5), &sc.handle.url_for("echo")).await,
        "a new connection after shutdown must fail"
    );
    assert_eq!(
        sc.handle
            .drain(Instant::now() + Duration::from_secs(5))
            .await,
        Drained::Clean
    );
}

#[tokio::test]
async fn a_forced_drain_also_answers_calls_waiting_for_a_slot() {
    let (_d, sc, _release, hits) = blocking_sidecar("max_concurrency = 1").await;
    let call = |sc: &Arc<Sidecar>| {
        let sc = sc.clone();
        tokio::spawn(async move { sc.call("b", json!({})).await })
    };
    let holding = call(&sc);
    assert!(wait_until(Duration::from_secs(5), || hits.load(Ordering::SeqCst) == 1).await);
    let waiting = call(&sc);
    assert!(
        wait_until(Duration::from_secs(5), || sc.handle.stats().tools["b"]
            .in_flight
            == 2)
        .await
    );
    let drained = sc
        .handle
        .drain(Instant::now() + Duration::from_millis(100))
        .await;
    assert_eq!(drained, Drained::Forced);
    failure(&holding.await.unwrap(), "SIDECAR_SHUTTING_DOWN");
    failure(&waiting.await.unwrap(), "SIDECAR_SHUTTING_DOWN");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
