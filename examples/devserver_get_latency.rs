//! Measures `GET /api/tools` on the stand-in holding 1,000 registered tools
//! on each of two roles (plus the built-ins), over a real loopback socket.
//!
//! Run: `cargo run --example devserver_get_latency [-- TOOLS ROUNDS]`.
//! A measurement, not a test: it asserts nothing about time.

use std::time::{Duration, Instant};

use neko_sidecar::devserver::DevServer;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tools: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let handle = DevServer::builder().start(listener)?;
    let client = reqwest::Client::builder().no_proxy().build()?;
    for i in 0..tools {
        let body = json!({
            "name": format!("tool_{i:04}"),
            "description": "Looks up the weather of a city and answers in Celsius.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "callback_url": format!("http://127.0.0.1:9000/tools/tool_{i:04}"),
            "source": "plugin:bench",
        });
        let res = client
            .post(format!("{}/api/tools/register", handle.url()))
            .json(&body)
            .send()
            .await?;
        if !res.status().is_success() {
            return Err(format!("register answered {}", res.status()).into());
        }
    }

    let url = format!("{}/api/tools", handle.url());
    let touch = json!({"name": "tool_0000", "callback_url": "http://127.0.0.1:9000/t", "source": "plugin:bench"});
    // Warm: the registry is unchanged between GETs (the polling case).
    // Cold: a registration precedes every GET, so the body is serialised anew.
    for cold in [false, true] {
        let mut samples = Vec::with_capacity(rounds);
        let mut size = 0;
        for _ in 0..rounds {
            if cold {
                client
                    .post(format!("{}/api/tools/register", handle.url()))
                    .json(&touch)
                    .send()
                    .await?;
            }
            let start = Instant::now();
            let bytes = client.get(&url).send().await?.bytes().await?;
            samples.push(start.elapsed());
            size = bytes.len();
        }
        samples.sort();
        let pct = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize];
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "GET /api/tools ({}), {tools} tools x 2 roles, {size} bytes, {rounds} rounds: median {:.2} ms, p90 {:.2} ms, max {:.2} ms",
            if cold {
                "cold: registry changed before each GET"
            } else {
                "warm: registry unchanged"
            },
            ms(pct(0.5)),
            ms(pct(0.9)),
            ms(pct(1.0))
        );
    }
    handle.shutdown().await;
    Ok(())
}
