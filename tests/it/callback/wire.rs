//! The callback server's HTTP/1.1, byte for byte over raw loopback sockets:
//! keep-alive and pipelining, `Expect: 100-continue`, HTTP/1.0, the heads it
//! refuses (400, 431), framing it does not trust (a length beside chunked,
//! two lengths), the headers of its answers, closing with a body unread,
//! and a caller that hangs up in the middle of a call.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use neko_sidecar::callback::CallbackSettings;
use neko_sidecar::callback::Outcome;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::callback::*;
use crate::support::{serve_http, wait_until};

/// A sidecar with the `echo` tool (running while this lives), and the
/// address and path of the tool's callback URL.
struct Echo {
    _dir: tempfile::TempDir,
    _sc: Sidecar,
    addr: String,
    path: String,
}

/// An echo sidecar and a connection to it.
async fn echo_connection() -> (Echo, TcpStream) {
    echo_connection_with(settings()).await
}

/// The same, with `settings`.
async fn echo_connection_with(settings: CallbackSettings) -> (Echo, TcpStream) {
    let (dir, sc) = echo_sidecar_with(settings).await;
    let (addr, path) = split_url(&sc.handle.url_for("echo"));
    let s = TcpStream::connect(&addr).await.unwrap();
    let echo = Echo {
        _dir: dir,
        _sc: sc,
        addr,
        path,
    };
    (echo, s)
}

/// A request for `path` with `extra` head lines and `body`.
fn request(path: &str, extra: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One answer read off a connection: status, head lines (lower-case
/// names), body.
struct Answer {
    status: u16,
    head: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Json {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Reads one answer (with a Content-Length, as the server always sends)
/// from `s`, keeping any bytes after it in `buf`.
async fn read_answer(s: &mut TcpStream, buf: &mut Vec<u8>) -> Answer {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(buf[..end].to_vec()).unwrap();
            let mut lines = head.split("\r\n");
            let status: u16 = lines.next().unwrap()[9..12].parse().unwrap();
            let head: Vec<(String, String)> = lines
                .map(|l| {
                    let (n, v) = l.split_once(':').unwrap();
                    (n.trim().to_ascii_lowercase(), v.trim().to_string())
                })
                .collect();
            let len: usize = head
                .iter()
                .find(|(n, _)| n == "content-length")
                .map_or(0, |(_, v)| v.parse().unwrap());
            while buf.len() < end + 4 + len {
                read_more(s, buf, "the connection closed in the middle of an answer").await;
            }
            let body = buf[end + 4..end + 4 + len].to_vec();
            buf.drain(..end + 4 + len);
            return Answer { status, head, body };
        }
        read_more(s, buf, "the connection closed before an answer").await;
    }
}

/// Appends what `s` sends next to `buf`; its end is a failure, `why`.
async fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>, why: &str) {
    let mut chunk = [0u8; 4096];
    let n = s.read(&mut chunk).await.unwrap();
    assert!(n > 0, "{why}");
    buf.extend_from_slice(&chunk[..n]);
}

/// Whether the server closes `s` (reads to the end with nothing more).
async fn closed(s: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    matches!(
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

fn call(word: &str) -> String {
    call_body("echo", json!({ "word": word })).to_string()
}

#[tokio::test]
async fn a_connection_carries_call_after_call_and_pipelined_calls_in_order() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    let mut buf = Vec::new();
    s.write_all(request(path, "", &call("one")).as_bytes())
        .await
        .unwrap();
    let a = read_answer(&mut s, &mut buf).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["output"]["arguments"]["word"], "one");
    assert_eq!(a.header("connection"), None, "kept alive");
    // Three at once, in one write: three answers, in order.
    let three: String = ["two", "three", "four"]
        .iter()
        .map(|w| request(path, "", &call(w)))
        .collect();
    s.write_all(three.as_bytes()).await.unwrap();
    for w in ["two", "three", "four"] {
        let a = read_answer(&mut s, &mut buf).await;
        assert_eq!(a.json()["output"]["arguments"]["word"], w);
    }
}

#[tokio::test]
async fn an_answer_says_its_type_length_and_date() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    s.write_all(request(path, "", &call("x")).as_bytes())
        .await
        .unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert_eq!(
        a.header("content-length"),
        Some(a.body.len().to_string().as_str())
    );
    let date = a.header("date").expect("a Date header");
    assert!(date.ends_with(" GMT"), "not an HTTP date: {date}");
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    let body = call("waited");
    let full = request(path, "expect: 100-continue\r\n", &body);
    let head_len = full.len() - body.len();
    s.write_all(&full.as_bytes()[..head_len]).await.unwrap();
    let mut buf = Vec::new();
    let interim = read_answer(&mut s, &mut buf).await;
    assert_eq!(interim.status, 100);
    s.write_all(body.as_bytes()).await.unwrap();
    let a = read_answer(&mut s, &mut buf).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["output"]["arguments"]["word"], "waited");
}

#[tokio::test]
async fn an_http_1_0_call_is_answered_and_the_connection_closed() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    let req = request(path, "", &call("old")).replacen("HTTP/1.1", "HTTP/1.0", 1);
    s.write_all(req.as_bytes()).await.unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.status, 200);
    assert!(closed(&mut s).await);
}

#[tokio::test]
async fn a_head_that_is_not_http_gets_400_and_a_huge_one_431() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    s.write_all(b"HELLO THERE\r\n\r\n").await.unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.status, 400);
    assert!(closed(&mut s).await);

    let mut s = TcpStream::connect(&echo.addr).await.unwrap();
    let padding = format!("x-pad: {}\r\n", "p".repeat(70 * 1024));
    // The server may answer before it has read all of this.
    let _ = s
        .write_all(request(path, &padding, &call("x")).as_bytes())
        .await;
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.status, 431);
}

#[tokio::test]
async fn two_different_lengths_get_400() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    let body = call("x");
    let req = request(
        path,
        &format!("content-length: {}\r\n", body.len() + 1),
        &body,
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.status, 400);
    assert!(closed(&mut s).await);
}

/// A client that goes on sending a body the server will not read (over the
/// limit) still gets its 413 and may finish sending: the server reads and
/// drops the rest instead of resetting the connection under it.
#[tokio::test]
async fn a_refused_body_can_be_sent_in_full_and_the_answer_read() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    let half = " ".repeat(1024 * 1024);
    let req = request(path, "", &format!("{half}{half}"));
    s.write_all(&req.as_bytes()[..req.len() - half.len()])
        .await
        .unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.status, 413);
    assert_eq!(a.json()["output"]["code"], "BODY_TOO_LARGE");
    assert_eq!(a.header("connection"), Some("close"));
    // The answer is out; the rest of the body is still welcome.
    s.write_all(half.as_bytes())
        .await
        .expect("the rest of the body can be sent");
    s.shutdown().await.unwrap();
    assert!(closed(&mut s).await);
}

/// A length beside `chunked` is how requests are smuggled past a proxy:
/// the chunked body is the one read, and the connection is not trusted
/// with another request.
#[tokio::test]
async fn a_length_beside_chunked_is_ignored_and_the_connection_closed() {
    let (echo, mut s) = echo_connection().await;
    let path = &echo.path;
    let body = call("smuggled");
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["output"]["arguments"]["word"], "smuggled");
    assert_eq!(a.header("connection"), Some("close"));
    assert!(closed(&mut s).await);
}

/// A caller that hangs up while its http call runs drops the call: it
/// counts as abandoned, and the handler's connection is closed.
#[tokio::test]
async fn a_caller_hanging_up_abandons_its_http_call() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let router = Router::new().route(
        "/slow",
        post(move || {
            let tx = tx.clone();
            async move {
                let _ = tx.send(());
                tokio::time::sleep(Duration::from_secs(30)).await;
                "{}"
            }
        }),
    );
    let handler = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[[tool]]\nname = \"slow\"\ndescription = \"d\"\ntimeout_seconds = 60\nhandler = {{ type = \"http\", url = \"http://{handler}/slow\" }}\n"
    );
    let sc = Sidecar::start(&state(dir.path(), &toml)).await;
    let (addr, path) = split_url(&sc.handle.url_for("slow"));
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let body = call_body("slow", json!({})).to_string();
    s.write_all(request(&path, "", &body).as_bytes())
        .await
        .unwrap();
    rx.recv().await.unwrap(); // the handler has the call
    drop(s);
    let abandoned = || sc.handle.stats().tools["slow"].count(Outcome::Abandoned) == 1;
    assert!(wait_until(Duration::from_secs(10), abandoned).await);
}

/// An echo sidecar whose connections time out quickly: `read` for a
/// request once it has begun, `idle` without one.
async fn echo_with_timeouts(read: Duration, idle: Duration) -> (Echo, TcpStream) {
    echo_connection_with(CallbackSettings {
        read_timeout: read,
        idle_timeout: idle,
        ..settings()
    })
    .await
}

/// How long after `since` the server closed `s`, reading what it sends.
async fn closed_after(s: &mut TcpStream, since: std::time::Instant) -> Duration {
    assert!(closed(s).await, "the connection was not closed");
    since.elapsed()
}

/// Half a request head, then nothing: closed at `read_timeout`, not before
/// and not at the (much longer) idle timeout.
#[tokio::test]
async fn a_request_head_that_stalls_is_closed_at_the_read_timeout() {
    let read = Duration::from_millis(400);
    let (echo, mut s) = echo_with_timeouts(read, Duration::from_secs(30)).await;
    let head = request(&echo.path, "", &call("x"));
    let sent = std::time::Instant::now();
    s.write_all(&head.as_bytes()[..20]).await.unwrap();
    let took = closed_after(&mut s, sent).await;
    assert!(
        took >= read && took < read + Duration::from_secs(3),
        "{took:?}"
    );
}

/// The same on a kept-alive connection that has answered a call and sat
/// idle past `read_timeout` (so its watch sleeps towards the idle
/// timeout): the next head that stalls is still closed `read_timeout`
/// after it began.
#[tokio::test]
async fn a_stalled_head_after_an_idle_spell_is_closed_at_the_read_timeout() {
    let read = Duration::from_millis(400);
    let (echo, mut s) = echo_with_timeouts(read, Duration::from_secs(30)).await;
    let mut buf = Vec::new();
    s.write_all(request(&echo.path, "", &call("a")).as_bytes())
        .await
        .unwrap();
    let a = read_answer(&mut s, &mut buf).await;
    assert_eq!(a.json()["output"]["arguments"]["word"], "a");
    tokio::time::sleep(read * 2).await;
    let head = request(&echo.path, "", &call("b"));
    let sent = std::time::Instant::now();
    s.write_all(&head.as_bytes()[..20]).await.unwrap();
    let took = closed_after(&mut s, sent).await;
    assert!(
        took >= read - Duration::from_millis(50) && took < read + Duration::from_secs(3),
        "{took:?}"
    );
}

/// A head, part of its body, then nothing: answered 408 and closed at
/// `read_timeout`, the handler not run.
#[tokio::test]
async fn a_body_that_stalls_gets_408_at_the_read_timeout() {
    let read = Duration::from_millis(400);
    let (echo, mut s) = echo_with_timeouts(read, Duration::from_secs(30)).await;
    let req = request(&echo.path, "", &call("x"));
    let sent = std::time::Instant::now();
    s.write_all(&req.as_bytes()[..req.len() - 5]).await.unwrap();
    let a = read_answer(&mut s, &mut Vec::new()).await;
    assert_eq!(a.status, 408);
    assert_eq!(a.json()["is_error"], true);
    let took = closed_after(&mut s, sent).await;
    assert!(
        took >= read && took < read + Duration::from_secs(3),
        "{took:?}"
    );
    let stats = echo._sc.handle.stats();
    assert_eq!(stats.tools["echo"].calls, 0, "the handler never ran");
}

/// A kept-alive connection serves calls while they come, and is closed
/// once it has carried none for `idle_timeout`.
#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(600);
    let (echo, mut s) = echo_with_timeouts(Duration::from_secs(30), idle).await;
    let mut buf = Vec::new();
    let mut answered = std::time::Instant::now();
    for word in ["a", "b", "c"] {
        // Less than the idle timeout between calls: still open.
        tokio::time::sleep(idle / 2).await;
        s.write_all(request(&echo.path, "", &call(word)).as_bytes())
            .await
            .unwrap();
        let a = read_answer(&mut s, &mut buf).await;
        answered = std::time::Instant::now();
        assert_eq!(a.json()["output"]["arguments"]["word"], word);
    }
    let took = closed_after(&mut s, answered).await;
    // The server's clock starts as it writes the answer, a moment before
    // this side has read it.
    let early = Duration::from_millis(100);
    assert!(
        took >= idle - early && took < idle + Duration::from_secs(3),
        "{took:?}"
    );
}

/// Idle connections, twice `max_connections` of them, that send nothing
/// (another local process holding them) do not keep a call out: past
/// `max_connections`, the longest idle ones are closed to make room. On
/// Unix at the default limit (1,024, so 2,048 connections); under Wine at
/// 128, since Wine's wineserver, which every socket wait goes through,
/// spins on a few thousand pending socket polls and starves the whole
/// test binary (seen with Wine 8.0: 10 minutes of wineserver CPU).
#[tokio::test]
async fn idle_connections_past_the_limit_do_not_stop_a_call() {
    let mut settings = settings();
    if cfg!(windows) {
        settings.max_connections = 128;
    }
    let max = settings.max_connections;
    let (_dir, sc) = echo_sidecar_with(settings).await;
    let (addr, _) = split_url(&sc.handle.url_for("echo"));
    let mut idle = Vec::new();
    for _ in 0..2 * max {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        sc.call("echo", json!({"word": "through"})),
    )
    .await
    .expect("the call was answered");
    assert_eq!(success(&answer)["arguments"]["word"], "through");
    assert!(
        sc.handle.open_connections() <= max,
        "{}",
        sc.handle.open_connections()
    );
}
