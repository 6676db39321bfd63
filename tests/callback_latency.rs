//! Many calls at once through the callback server to an in-process http
//! handler: every call must be answered and counted. With
//! `NEKO_BENCH_CALLS=N` it also measures the latency the sidecar adds over
//! a direct call (medians at concurrency 1 and 64) and prints it; run that
//! in release:
//! `NEKO_BENCH_CALLS=20000 cargo test --release --test callback_latency -- --nocapture`

mod callback_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use callback_support::*;
use neko_sidecar::callback::Outcome;
use serde_json::json;

/// Runs `calls` POSTs of `body` to `url` from `concurrency` workers and
/// returns each call's latency; every answer must be a success envelope.
async fn run(url: &str, body: &str, calls: usize, concurrency: usize) -> Vec<Duration> {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let per_worker = calls / concurrency;
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, url, body) = (client.clone(), url.to_string(), body.to_string());
        workers.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let start = Instant::now();
                let resp = client.post(&url).body(body.clone()).send().await.unwrap();
                let text = resp.text().await.unwrap();
                times.push(start.elapsed());
                assert!(text.contains(r#""is_error":false"#), "{text}");
            }
            times
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    all
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_are_all_answered() {
    let router = Router::new().route(
        "/w",
        post(|| async { r#"{"output":{"temp_c":22},"is_error":false}"# }),
    );
    let addr = serve_http(router).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[[tool]]\nname = \"w\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://{addr}/w\" }}\nparameters = {{ type = \"object\", properties = {{ city = {{ type = \"string\" }} }} }}\n"
    );
    let sc = Arc::new(Sidecar::start(&state(dir.path(), &toml)).await);
    let body = call_body("w", json!({"city": "Tokyo"})).to_string();
    let direct = format!("http://{addr}/w");
    let via = sc.handle.url_for("w");

    let bench: Option<usize> = std::env::var("NEKO_BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok());
    let calls = bench.unwrap_or(256);
    for concurrency in [1, 64] {
        let calls = calls.max(concurrency) / concurrency * concurrency;
        let before = sc.handle.stats().tools["w"].count(Outcome::Ok);
        // Warm both paths (pooled connections) before measuring.
        run(&direct, &body, concurrency, concurrency).await;
        run(&via, &body, concurrency, concurrency).await;
        let d = median(run(&direct, &body, calls, concurrency).await);
        let s = median(run(&via, &body, calls, concurrency).await);
        let after = sc.handle.stats().tools["w"].clone();
        assert_eq!(
            after.count(Outcome::Ok) - before,
            (calls + concurrency) as u64
        );
        assert_eq!(after.in_flight, 0);
        if bench.is_some() {
            println!(
                "concurrency {concurrency:>2}, {calls} calls: direct median {d:?}, via sidecar median {s:?}, added {:?}",
                s.saturating_sub(d)
            );
        }
    }
}
