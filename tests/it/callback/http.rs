//! The callback server with http handlers: real sockets on both sides, the
//! handler an in-test axum server that counts what reaches it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use neko_sidecar::callback::Outcome;
use serde_json::{Value as Json, json};
use tokio::sync::Notify;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use neko_sidecar::contract::images::{sample_png, sample_png_b64, with_chunk};

use crate::support::callback::*;
use crate::support::{http_client, impatient_client, refused_port, serve_http, wait_until};

/// One tool per route of the handler server, with its schema and limits.
fn manifest(addr: std::net::SocketAddr, tools: &[(&str, &str)]) -> String {
    tools
        .iter()
        .map(|(name, extra)| {
            format!(
                "[[tool]]\nname = \"{name}\"\ndescription = \"d\"\n{extra}\nhandler = {{ type = \"http\", url = \"http://{addr}/{name}\" }}\nparameters = {{ type = \"object\", properties = {{ city = {{ type = \"string\" }} }}, required = [\"city\"] }}\n"
            )
        })
        .collect()
}

fn answering(body: &'static str) -> Router {
    Router::new().route("/t", post(move || async move { body }))
}

async fn one_tool(router: Router, extra: &str) -> Sidecar {
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    Sidecar::start(&state(dir.path(), &manifest(addr, &[("t", extra)]))).await
}

#[tokio::test]
async fn the_call_is_forwarded_untouched_and_an_envelope_passes_through() {
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = got.clone();
    let router = Router::new().route(
        "/t",
        post(move |body: Bytes| async move {
            seen.lock().unwrap().push(body);
            r#"{"output": {"temp_c": 22}, "is_error": false, "extra": 1}"#
        }),
    );
    let sc = one_tool(router, "").await;
    let sent = call_body("t", json!({"city": "東京"})).to_string();
    let answer = sc.post(&sc.handle.url_for("t"), sent.clone()).await;
    assert_eq!(
        answer.1,
        json!({"output": {"temp_c": 22}, "is_error": false})
    );
    assert_eq!(got.lock().unwrap().as_slice(), &[Bytes::from(sent)]);
}

#[tokio::test]
async fn a_string_is_error_becomes_a_real_boolean() {
    let sc = one_tool(
        answering(r#"{"output": null, "is_error": "false", "error": "city not found"}"#),
        "",
    )
    .await;
    let (status, body) = sc.call("t", json!({"city": "x"})).await;
    assert_eq!(status, 200);
    // Python reads the string "false" as true; the meaning is kept, and
    // the reason goes where the model reads it.
    assert_eq!(
        body,
        json!({"output": {"error": "city not found"}, "is_error": true, "error": "city not found"})
    );
}

#[tokio::test]
async fn other_json_text_and_empty_answers_are_wrapped() {
    for (answer, want) in [
        (r#"{"temp": 3}"#, json!({"temp": 3})),
        ("[1,2]", json!([1, 2])),
        ("sunny\n", json!("sunny")),
        ("", json!("")),
    ] {
        let sc = one_tool(answering(answer), "").await;
        assert_eq!(
            success(&sc.call("t", json!({"city": "x"})).await),
            want,
            "{answer:?}"
        );
    }
}

#[tokio::test]
async fn images_main_server_takes_go_as_given_others_are_repaired_or_explained() {
    let clean =
        json!({"data_b64": sample_png_b64(3, 3), "mime": "image/png", "vision_prompt": "describe"});
    let bad_crc = with_chunk(&sample_png(5, 5), b"iCCP", b"icc\0\0x", true);
    let bad_crc = json!({"data_b64": STANDARD.encode(&bad_crc), "mime": "image/png"});
    let images = json!([clean, bad_crc]);
    let answer = json!({"output": "a cat", "is_error": false, "images": images}).to_string();
    let sc = one_tool(answering(Box::leak(answer.into_boxed_str())), "").await;
    let (_, body) = sc.call("t", json!({"city": "x"})).await;
    assert_eq!(
        body["images"][0], clean,
        "a clean image goes exactly as given"
    );
    let repaired = &body["images"][1];
    assert_ne!(repaired, &bad_crc);
    assert_eq!(repaired["mime"], "image/png");
    assert_eq!(body["output"], "a cat", "nothing for the model to read");
    assert!(
        body["image_repairs"][0].as_str().unwrap().starts_with(
            "image #1: the PNG has a bad CRC in its iCCP chunk; re-encoded as a clean PNG (5x5, "
        ),
        "{body}"
    );
    let stats = &sc.handle.stats().tools["t"];
    assert_eq!((stats.images_repaired, stats.images_refused), (1, 0));

    // Garbage is not sent, and the model reads which image and why.
    let answer = json!({"output": {"n": 1}, "is_error": false,
        "images": [{"data_b64": "%%%", "mime": "image/png"}]})
    .to_string();
    let sc = one_tool(answering(Box::leak(answer.into_boxed_str())), "").await;
    let (_, body) = sc.call("t", json!({"city": "x"})).await;
    assert_eq!(body["images"], json!([]));
    assert_eq!(body["output"]["n"], 1);
    let why = body["output"]["_image_warnings"][0].as_str().unwrap();
    assert!(
        why.starts_with("image #0 was not attached: its `data_b64` is not strict base64"),
        "{why}"
    );
    let stats = &sc.handle.stats().tools["t"];
    assert_eq!((stats.images_repaired, stats.images_refused), (0, 1));
}

#[tokio::test]
async fn invalid_arguments_are_answered_without_calling_the_handler() {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let router = Router::new().route(
        "/t",
        post(move || async move {
            h.fetch_add(1, Ordering::SeqCst);
            "{}"
        }),
    );
    let sc = one_tool(router, "").await;
    let msg = failure(&sc.call("t", json!({"city": 5})).await, "INVALID_ARGUMENTS");
    assert!(
        msg.contains("- at /city: 5 is not of type \"string\""),
        "{msg}"
    );
    let answer = sc.call("t", json!({})).await;
    assert_eq!(answer.1["output"]["problems"][0]["pointer"], "");
    assert!(failure(&answer, "INVALID_ARGUMENTS").contains("\"city\" is a required property"));
    let msg = failure(
        &sc.call("t", json!({"_raw": "{city: Tokyo"})).await,
        "INVALID_ARGUMENTS",
    );
    assert!(
        msg.contains("not valid JSON") && msg.contains("{city: Tokyo"),
        "{msg}"
    );
    let msg = failure(
        &sc.call("t", json!({"value": 3})).await,
        "INVALID_ARGUMENTS",
    );
    assert!(msg.contains("not a JSON object but the number 3"), "{msg}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the handler must not run");
    // The same call with valid arguments reaches it.
    success(&sc.call("t", json!({"city": "x"})).await);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn validation_can_be_turned_off() {
    let sc = one_tool(
        answering(r#"{"output": "ran", "is_error": false}"#),
        "validate_arguments = false",
    )
    .await;
    assert_eq!(success(&sc.call("t", json!({"_raw": "nope"})).await), "ran");
}

#[tokio::test]
async fn a_handler_that_is_down_is_reported_unreachable() {
    // A port that was free a moment ago: nothing listens there now.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], refused_port()));
    let dir = tempfile::tempdir().unwrap();
    let sc = Sidecar::start(&state(dir.path(), &manifest(addr, &[("t", "")]))).await;
    let msg = failure(
        &sc.call("t", json!({"city": "x"})).await,
        "HANDLER_UNREACHABLE",
    );
    assert!(
        msg.contains(&format!("the handler at http://{addr}/t is not reachable")),
        "{msg}"
    );
    assert_eq!(sc.handle.stats().tools["t"].count(Outcome::Unreachable), 1);
}

#[tokio::test]
async fn a_non_2xx_answer_is_a_failure_quoting_the_body() {
    let router = Router::new()
        .route(
            "/t",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "database down") }),
        )
        .route(
            "/r",
            post(|| async { axum::response::Redirect::temporary("/t") }),
        );
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let sc = Sidecar::start(&state(dir.path(), &manifest(addr, &[("t", ""), ("r", "")]))).await;
    let msg = failure(
        &sc.call("t", json!({"city": "x"})).await,
        "HANDLER_HTTP_ERROR",
    );
    assert!(msg.ends_with("answered HTTP 500: database down"), "{msg}");
    // Redirects are not followed.
    let msg = failure(
        &sc.call("r", json!({"city": "x"})).await,
        "HANDLER_HTTP_ERROR",
    );
    assert!(msg.contains("answered HTTP 307"), "{msg}");
}

#[tokio::test]
async fn a_slow_handler_is_answered_for_before_main_servers_timeout() {
    let router = Router::new().route(
        "/t",
        post(|| async {
            std::future::pending::<()>().await;
            "never"
        }),
    );
    let sc = one_tool(router, "timeout_seconds = 4").await;
    // main_server gives up after timeout_seconds; our answer must come first.
    let main_server = impatient_client(Duration::from_secs(4));
    let resp = main_server
        .post(sc.handle.url_for("t"))
        .body(call_body("t", json!({"city": "x"})).to_string())
        .send()
        .await
        .expect("the sidecar must answer before main_server's timeout");
    let body: Json = resp.json().await.unwrap();
    let msg = failure(&(200, body), "TOOL_TIMEOUT");
    assert_eq!(msg, "the handler did not answer within 3.6 s");
}

#[tokio::test]
async fn an_answer_over_the_output_limit_is_refused() {
    let big: &'static str = Box::leak("x".repeat(100 * 1024).into_boxed_str());
    let sc = one_tool(answering(big), "").await;
    let msg = failure(
        &sc.call("t", json!({"city": "x"})).await,
        "OUTPUT_TOO_LARGE",
    );
    assert!(msg.contains("65536 bytes"), "{msg}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_unix_socket_handler_is_reached() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("h.sock");
    let listener = tokio::net::UnixListener::bind(&sock).unwrap();
    let router = Router::new().route("/w", post(|body: Bytes| async move { body }));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let toml = format!(
        "[[tool]]\nname = \"u\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://plugin/w\", unix_socket = \"{}\" }}\n",
        sock.display()
    );
    let sc = Sidecar::start(&state(dir.path(), &toml)).await;
    // The handler echoes the call: an object without output, so wrapped.
    let out = success(&sc.call("u", json!({"a": 1})).await);
    assert_eq!(out["call_id"], "call_test_1");
    assert_eq!(out["arguments"], json!({"a": 1}));
}

#[tokio::test]
async fn max_concurrency_makes_a_call_wait_for_a_slot_within_its_deadline() {
    let hits = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let (h, r) = (hits.clone(), release.clone());
    let router = Router::new().route(
        "/t",
        post(move || async move {
            h.fetch_add(1, Ordering::SeqCst);
            r.notified().await;
            r#"{"output": "done", "is_error": false}"#.into_response()
        }),
    );
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let tools = |extra: &str| state(dir.path(), &manifest(addr, &[("t", extra)]));
    let sc = Arc::new(Sidecar::start(&tools("max_concurrency = 1\ntimeout_seconds = 3")).await);
    let stats = |sc: &Sidecar| sc.handle.stats().tools["t"].clone();

    // First: the second call waits while the first holds the slot, then runs.
    let a = tokio::spawn({
        let sc = sc.clone();
        async move { sc.call("t", json!({"city": "a"})).await }
    });
    assert!(wait_until(Duration::from_secs(5), || hits.load(Ordering::SeqCst) == 1).await);
    let b = tokio::spawn({
        let sc = sc.clone();
        async move { sc.call("t", json!({"city": "b"})).await }
    });
    assert!(wait_until(Duration::from_secs(5), || stats(&sc).in_flight == 2).await);
    assert_eq!(hits.load(Ordering::SeqCst), 1, "b must wait for a's slot");
    release.notify_one();
    assert_eq!(success(&a.await.unwrap()), "done");
    assert!(wait_until(Duration::from_secs(5), || hits.load(Ordering::SeqCst) == 2).await);
    release.notify_one();
    assert_eq!(success(&b.await.unwrap()), "done");

    // Then: while a call holds the slot past the other's deadline, the
    // other is told there were too many calls, and never reaches the handler.
    // A reload shortens the timeout for new calls (c keeps its own); the
    // slot survives the reload because max_concurrency did not change.
    let c = tokio::spawn({
        let sc = sc.clone();
        async move { sc.call("t", json!({"city": "c"})).await }
    });
    assert!(wait_until(Duration::from_secs(5), || hits.load(Ordering::SeqCst) == 3).await);
    sc.handle
        .set_tools(&tools("max_concurrency = 1\ntimeout_seconds = 1"));
    let d = sc.call("t", json!({"city": "d"})).await;
    let msg = failure(&d, "TOO_MANY_CALLS");
    assert!(msg.contains("at most 1 at a time"), "{msg}");
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    release.notify_one();
    success(&c.await.unwrap());
    let s = stats(&sc);
    assert_eq!((s.calls, s.count(Outcome::TooManyCalls)), (4, 1));
}

/// Many calls at once (64 callers) through the callback server to an
/// in-process http handler: every call is answered and counted, and none
/// is left in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_are_all_answered_and_counted() {
    let router = Router::new().route(
        "/w",
        post(|| async { r#"{"output":{"temp_c":22},"is_error":false}"# }),
    );
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[[tool]]\nname = \"w\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://{addr}/w\" }}\nparameters = {{ type = \"object\", properties = {{ city = {{ type = \"string\" }} }} }}\n"
    );
    let sc = Sidecar::start(&state(dir.path(), &toml)).await;
    let body = call_body("w", json!({"city": "Tokyo"})).to_string();
    let url = sc.handle.url_for("w");
    let client = http_client();
    for concurrency in [1, 64] {
        let calls = 256 / concurrency * concurrency;
        let before = sc.handle.stats().tools["w"].count(Outcome::Ok);
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, url, body) = (client.clone(), url.clone(), body.clone());
                tokio::spawn(async move {
                    for _ in 0..calls / concurrency {
                        let resp = client.post(&url).body(body.clone()).send().await.unwrap();
                        let text = resp.text().await.unwrap();
                        assert!(text.contains(r#""is_error":false"#), "{text}");
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        let after = sc.handle.stats().tools["w"].clone();
        assert_eq!(after.count(Outcome::Ok) - before, calls as u64);
        assert_eq!(after.in_flight, 0);
    }
}
