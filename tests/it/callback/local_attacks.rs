//! A local process attacking the callback listener, as issue 48 found it
//! (on a small bound, so each runs in seconds; `bench/local_attacks.sh`
//! runs them at the default bound with the release build and measures
//! memory): connections that announce a body for a made-up token and
//! never send it, wrong-token bodies, a burst of calls past the bound, and
//! the memory all bodies may hold together. Each time every real call is
//! answered, or refused with an envelope the model reads.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use neko_sidecar::callback::CallbackSettings;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::support::callback::*;
use crate::support::{serve_http, wait_until};

/// The connection bound of these tests (the config's least).
const BOUND: usize = 16;

fn bounded() -> CallbackSettings {
    let mut s = settings();
    s.max_connections = BOUND;
    s
}

/// A client that opens a connection per call, as main_server's does when
/// its pool is cold, giving up after `timeout`.
fn fresh_connections(timeout: Duration) -> reqwest::Client {
    neko_sidecar::tls::plain_http()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(timeout)
        .build()
        .unwrap()
}

/// A head of a call to a made-up token that announces `length` bytes of
/// body, none of which is sent.
fn tokenless_head(length: usize) -> String {
    format!(
        "POST /cb/00000000000000000000000000000000/echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// Opens connections to `addr` as fast as it can until `stop` (at most
/// `max` in all), each sending [`tokenless_head`] and nothing more,
/// holding the last `hold` open. Returns how many it opened.
async fn tokenless_flood(addr: String, stop: CancellationToken, hold: usize, max: usize) -> usize {
    let mut held = VecDeque::new();
    let mut opened = 0;
    let head = tokenless_head(1000);
    while !stop.is_cancelled() && opened < max {
        let Ok(mut s) = TcpStream::connect(&addr).await else {
            continue;
        };
        let _ = s.write_all(head.as_bytes()).await;
        held.push_back(s);
        if held.len() > hold {
            held.pop_front();
        }
        opened += 1;
    }
    opened
}

/// Issue 48, attack 1: with the bound held by connections that announce a
/// body for a made-up token and never send it, opened as fast as a local
/// process can, every real call is answered. It used to wait for those
/// bodies (each held a slot until `read_timeout`), and a new connection
/// closed the newest real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenless_connections_announcing_a_body_do_not_keep_calls_out() {
    let (_dir, sc) = echo_sidecar_with(bounded()).await;
    let (addr, _) = split_url(&sc.handle.url_for("echo"));
    // The bound full of them before the first call.
    let mut first = Vec::new();
    for _ in 0..2 * BOUND {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(tokenless_head(1000).as_bytes()).await.unwrap();
        first.push(s);
    }
    let stop = CancellationToken::new();
    // Bounded in count too; fewer under Wine, whose wineserver slows with
    // every socket (see `wire.rs`).
    let max = if cfg!(windows) { 1_000 } else { 5_000 };
    let flood = tokio::spawn(tokenless_flood(addr.clone(), stop.clone(), 4 * BOUND, max));
    let client = fresh_connections(Duration::from_secs(8));
    let url = sc.handle.url_for("echo");
    let mut answered = 0;
    for i in 0..30 {
        let body = call_body("echo", json!({"word": i})).to_string();
        let r = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("call {i} was not answered: {e:?}"));
        assert_eq!(r.status(), 200);
        let v: Json = r.json().await.unwrap();
        assert_eq!(v["output"]["arguments"]["word"], i, "{v}");
        answered += 1;
    }
    stop.cancel();
    let opened = flood.await.unwrap();
    assert_eq!(answered, 30);
    assert!(opened > 0);
    assert!(sc.handle.open_connections() <= BOUND);
    let stats = sc.handle.stats();
    assert!(stats.rejections.unknown_token > 0, "{stats:?}");
    drop(first);
}

/// Issue 48, attack 1: a wrong token is answered from the request line,
/// before any of its body is read, and the connection closes: the body
/// never takes memory, nor a slot until `read_timeout`.
#[tokio::test]
async fn a_wrong_token_is_answered_before_its_body_is_sent() {
    let (_dir, sc) = echo_sidecar_with(bounded()).await;
    let (addr, _) = split_url(&sc.handle.url_for("echo"));
    let mut s = TcpStream::connect(&addr).await.unwrap();
    // Under max_body_bytes (64 KiB), so it is not refused for its size.
    s.write_all(tokenless_head(60_000).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    // The read timeout is 10 s: well before it, the answer and the close.
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(read.is_ok(), "no answer before the body: {text:?}");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    assert!(text.contains("UNKNOWN_CALLBACK_TOKEN"), "{text}");
    assert_eq!(sc.handle.stats().rejections.unknown_token, 1);
}

/// A sidecar with the tool `gate`, whose http handler holds every call
/// until `release`; `arrived` counts calls that reached it.
async fn gated(
    settings: CallbackSettings,
    extra: &str,
) -> (
    tempfile::TempDir,
    Arc<Sidecar>,
    Arc<Notify>,
    Arc<AtomicUsize>,
) {
    let release = Arc::new(Notify::new());
    let arrived = Arc::new(AtomicUsize::new(0));
    let (r, a) = (release.clone(), arrived.clone());
    let router = Router::new().route(
        "/gate",
        post(move || async move {
            // Waiting before it is counted: a release right after the
            // count is not missed.
            let mut released = std::pin::pin!(r.notified());
            released.as_mut().enable();
            a.fetch_add(1, Ordering::SeqCst);
            released.await;
            r#"{"output": "through", "is_error": false}"#
        }),
    );
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[[tool]]\nname = \"gate\"\ndescription = \"d\"\n{extra}\nhandler = {{ type = \"http\", url = \"http://{addr}/gate\" }}\n"
    );
    let sc = Arc::new(Sidecar::start_with(&state(dir.path(), &toml), settings).await);
    (dir, sc, release, arrived)
}

/// Issue 48, attack 1: the memory all bodies hold together is bounded
/// (`max_body_memory`), not only each one. Past it a call waits for
/// memory up to `read_timeout`, then gets a counted 503 `SIDECAR_BUSY`
/// envelope that the model reads, and its tool does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_memory_bound_get_a_counted_503_envelope() {
    let mut settings = bounded();
    settings.max_body_bytes = 64 * 1024;
    settings.max_body_memory = 64 * 1024;
    settings.read_timeout = Duration::from_secs(1);
    let (_dir, sc, release, arrived) = gated(settings, "").await;
    // A call of some 50 KiB (its arguments twice: parsed and raw) holds
    // most of the memory while the handler holds it.
    let big = "x".repeat(25 * 1024);
    let held = {
        let sc = sc.clone();
        tokio::spawn(async move { sc.call("gate", json!({"blob": big})).await })
    };
    assert!(
        wait_until(Duration::from_secs(10), || arrived.load(Ordering::SeqCst)
            == 1)
        .await
    );
    // Without the bound it would reach the handler and wait there for ever.
    let (status, body) = tokio::time::timeout(
        Duration::from_secs(10),
        sc.call("gate", json!({"blob": "y".repeat(10 * 1024)})),
    )
    .await
    .expect("answered while the memory is held");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["output"]["code"], "SIDECAR_BUSY", "{body}");
    assert!(
        body["output"]["error"]
            .as_str()
            .unwrap()
            .contains("the tool did not run"),
        "{body}"
    );
    assert_eq!(arrived.load(Ordering::SeqCst), 1, "the second never ran");
    assert_eq!(sc.handle.stats().rejections.busy, 1);
    // Freed: calls go through again.
    release.notify_waiters();
    assert_eq!(success(&held.await.unwrap()), "through");
    let next = {
        let sc = sc.clone();
        tokio::spawn(async move {
            sc.call("gate", json!({"blob": "z".repeat(10 * 1024)}))
                .await
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || arrived.load(Ordering::SeqCst)
            == 2)
        .await
    );
    release.notify_waiters();
    assert_eq!(success(&next.await.unwrap()), "through");
}

/// Issue 48, attack 2: a burst of calls past the connection bound to a
/// slow handler. Each used to be accepted and then closed unanswered by the
/// next accept while its head was still unread; now each waits in the
/// listen queue for a slot, and every one is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_bound_waits_and_every_call_is_answered() {
    const CALLS: usize = 12 * BOUND;
    let router = Router::new().route(
        "/slow",
        post(|| async {
            // A slow handler: each call keeps its slot a while.
            tokio::time::sleep(Duration::from_millis(100)).await;
            r#"{"output": "slow but here", "is_error": false}"#
        }),
    );
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[[tool]]\nname = \"slow\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://{addr}/slow\" }}\n"
    );
    let sc = Sidecar::start_with(&state(dir.path(), &toml), bounded()).await;
    let client = fresh_connections(Duration::from_secs(30));
    let url = sc.handle.url_for("slow");
    let body = call_body("slow", json!({})).to_string();
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .map_err(|e| format!("{e:?}"))
            })
        })
        .collect();
    let mut failed = Vec::new();
    for c in calls {
        match c.await.unwrap() {
            Ok(200) => {}
            other => failed.push(other),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {CALLS} not answered: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    let stats = sc.handle.stats();
    let ok = stats.tools["slow"].count(neko_sidecar::callback::Outcome::Ok);
    assert_eq!(ok as usize, CALLS);
    assert!(stats.connections.waited > 0, "{:?}", stats.connections);
}

/// Issue 48: a call past `max_concurrency` that got its slot only a moment
/// before its deadline read "the handler did not answer within 0.9 s"
/// (`TOOL_TIMEOUT`), though the handler had had a few milliseconds; it
/// now says it waited for a slot (`TOO_MANY_CALLS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_for_its_slot_until_too_late_says_so() {
    let (_dir, sc, _release, arrived) =
        gated(settings(), "timeout_seconds = 1\nmax_concurrency = 1").await;
    let first = {
        let sc = sc.clone();
        tokio::spawn(async move { sc.call("gate", json!({})).await })
    };
    assert!(
        wait_until(Duration::from_secs(10), || arrived.load(Ordering::SeqCst)
            == 1)
        .await
    );
    // The second call's deadline 300 ms after the first's: the slot the
    // first gives back at its deadline comes before the second's, however
    // slow the machine is in freeing it (sent at once, the two deadlines
    // were a few milliseconds apart, and under load the second's came
    // first: "none finished").
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = sc.call("gate", json!({})).await;
    let first = first.await.unwrap();
    assert!(failure(&first, "TOOL_TIMEOUT").contains("did not answer within 0.9 s"));
    let msg = failure(&second, "TOO_MANY_CALLS");
    assert!(
        msg.starts_with(
            "too many concurrent calls of `gate` (at most 1 at a time): this call waited"
        ),
        "{msg}"
    );
}
