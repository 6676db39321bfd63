//! Benchmark 5: main_server restart → every tool visible again, through the
//! real binaries: `neko-sidecar run` keeping N tools registered with the
//! stand-in (`neko-sidecar dev-server`), which is told to forget everything
//! (`POST /__dev/restart`, what a main_server restart does).
//!
//! "Visible" is seen from outside, as a client of main_server would: the
//! first `GET /api/tools` (polled every `--every-ms`) that lists all N tools
//! on both roles again. Restarts happen at a random phase of the daemon's
//! poll cycle (a random pause in [0, poll) after the tools are back), so the
//! wait until the daemon's next poll is uniform in [0, poll): the median
//! is expected near poll/2 plus the time to register N tools.
//!
//! Run: `bench_restart [--tools 100] [--restarts 20] [--poll-ms 1000] [--every-ms 10]`.
//! Prints `key=value`; timings from `Instant` (monotonic).

use std::time::{Duration, Instant};

use bench_support::*;

const SOURCE: &str = "plugin:bench-restart";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let n: usize = arg_or("tools", 100)?;
    let restarts: usize = arg_or("restarts", 20)?;
    let poll_ms: u64 = arg_or("poll-ms", 1000)?;
    let every = Duration::from_millis(arg_or("every-ms", 10)?);
    let c = http();
    let ds = DevServerProc::start().await?;
    let dir = scratch()?;
    std::fs::write(
        dir.path().join("tools.d/tools.toml"),
        http_tools_manifest("tool_", n, "http://127.0.0.1:9/w"),
    )?;
    let t0 = Instant::now();
    let _sc = SidecarProc::start(
        dir.path(),
        &AgentSettings {
            source: SOURCE,
            main_server: &ds.url,
            poll_interval: &format!("{poll_ms}ms"),
            debounce: "200ms",
        },
    )?;
    let all_visible = || {
        let fut = ds.get(&c, "/api/tools");
        async move { fut.await.is_ok_and(|v| count_source(&v, SOURCE) == 2 * n) }
    };
    wait_for(Duration::from_secs(60), every, all_visible).await?;
    let cold = t0.elapsed();

    let mut back = Vec::with_capacity(restarts);
    for _ in 0..restarts {
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..poll_ms))).await;
        let t0 = Instant::now();
        ds.post(&c, "/__dev/restart", serde_json::json!({})).await?;
        wait_for(Duration::from_secs(60), every, all_visible).await?;
        back.push(t0.elapsed());
    }
    println!("tools={n}");
    println!("poll_ms={poll_ms}");
    println!("every_ms={}", every.as_millis());
    println!("cold_start_ms={:.1}", cold.as_secs_f64() * 1e3);
    Summary::of(&back).print("back");
    Ok(())
}
