//! Benchmark 4: `GET /api/tools` of the stand-in (`neko-sidecar
//! dev-server`, the real binary) holding `--tools` tools on each of its two
//! roles, against the same GET on an empty registry (built-ins only).
//!
//! Two stand-in processes run side by side, and the GETs alternate between
//! them, so that noise on a shared machine falls on both alike. "warm": the
//! registry is unchanged between GETs (the sidecar's polling case); "cold":
//! one registration precedes each GET, so the answer is built anew.
//! One keep-alive connection per server; only the GET is timed.
//!
//! Run: `bench_registry [--tools 1000] [--rounds 500]`; prints `key=value`.

use std::time::{Duration, Instant};

use bench_support::*;
use serde_json::json;

async fn timed_get(c: &reqwest::Client, url: &str) -> Result<(Duration, usize), BoxError> {
    let t0 = Instant::now();
    let r = c.get(url).send().await?;
    if !r.status().is_success() {
        return Err(format!("GET answered {}", r.status()).into());
    }
    let n = r.bytes().await?.len();
    Ok((t0.elapsed(), n))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let tools: usize = arg_or("tools", 1000)?;
    let rounds: usize = arg_or("rounds", 500)?;
    let empty = DevServerProc::start().await?;
    let full = DevServerProc::start().await?;
    let c = http();
    for i in 0..tools {
        let body = json!({
            "name": format!("tool_{i:04}"),
            "description": "Looks up the weather of a city and answers in Celsius.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "callback_url": format!("http://127.0.0.1:9000/cb/0123456789abcdef0123456789abcdef/tool_{i:04}"),
            "source": "plugin:bench",
        });
        let v = full.post(&c, "/api/tools/register", body).await?;
        if v["ok"] != true {
            return Err(format!("register answered {v}").into());
        }
    }
    let listing = full.get(&c, "/api/tools").await?;
    let pairs = count_source(&listing, "plugin:bench");
    if pairs != tools * 2 {
        return Err(format!("expected {} (tool, role) pairs, found {pairs}", tools * 2).into());
    }
    let (ue, uf) = (
        format!("{}/api/tools", empty.url),
        format!("{}/api/tools", full.url),
    );
    // Warm-up, not measured.
    for _ in 0..20 {
        timed_get(&c, &ue).await?;
        timed_get(&c, &uf).await?;
    }
    let (mut e, mut w, mut k) = (Vec::new(), Vec::new(), Vec::new());
    let (mut e_bytes, mut f_bytes) = (0, 0);
    let touch = json!({"name": "tool_0000", "description": "Looks up the weather of a city and answers in Celsius.", "callback_url": "http://127.0.0.1:9000/t", "source": "plugin:bench"});
    for _ in 0..rounds {
        let (d, n) = timed_get(&c, &ue).await?;
        e.push(d);
        e_bytes = n;
        let (d, n) = timed_get(&c, &uf).await?;
        w.push(d);
        f_bytes = n;
        full.post(&c, "/api/tools/register", touch.clone()).await?;
        k.push(timed_get(&c, &uf).await?.0);
    }
    println!("tools={tools}");
    println!("rounds={rounds}");
    println!("empty_bytes={e_bytes}");
    println!("full_bytes={f_bytes}");
    Summary::of(&e).print("empty");
    Summary::of(&w).print("warm");
    Summary::of(&k).print("cold");
    Ok(())
}
