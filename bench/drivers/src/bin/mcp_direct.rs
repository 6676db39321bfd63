//! The MCP benchmark's direct call: the Python MCP server called straight
//! from an rmcp client over its stdio, with no sidecar and no HTTP in
//! between. It is the floor under the MCP handler's figures: what the
//! server itself costs per call, so `bench/mcp.sh` can tell the sidecar's
//! share from the SDK's.
//!
//! Run: `mcp_direct --python PY --script weather_mcp.py --concurrency 8
//! --duration 5 [--tool get_weather]`. Spawns the server, does the
//! handshake (both protocol generations, as the sidecar), then keeps
//! `concurrency` calls in flight for `duration` seconds and prints the line
//! `bench/wrk/call.lua` prints (`RESULT p50_us=… p99_us=… rps=…
//! requests=… socket_errors=… non2xx=…`), so the same script reads both.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_support::*;
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use tokio::process::Command;
use tokio::sync::Mutex;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let python: String = arg("python").ok_or("--python is required")?;
    let script: String = arg("script").ok_or("--script is required")?;
    let concurrency: usize = arg_or("concurrency", 1)?;
    let duration = Duration::from_secs_f64(arg_or("duration", 5.0)?);
    let tool: String = arg_or("tool", "get_weather".to_string())?;

    let mut child = Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let (stdout, stdin) = (
        child.stdout.take().ok_or("no stdout")?,
        child.stdin.take().ok_or("no stdin")?,
    );
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    let client = ().serve_with_lifecycle((stdout, stdin), lifecycle).await?;
    let peer = client.peer().clone();
    let mut args = serde_json::Map::new();
    args.insert("city".into(), "Tokyo".into());
    let params = CallToolRequestParams::new(tool).with_arguments(args);
    // Warm up, and check that the tool answers at all.
    peer.call_tool(params.clone()).await?;

    let samples = Arc::new(Mutex::new(Vec::<u64>::new()));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let end = started + duration;
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (peer, params) = (peer.clone(), params.clone());
        let (samples, errors) = (samples.clone(), errors.clone());
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while Instant::now() < end {
                let t = Instant::now();
                match peer.call_tool(params.clone()).await {
                    Ok(r) if r.is_error != Some(true) => mine.push(t.elapsed().as_micros() as u64),
                    _ => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            samples.lock().await.extend(mine);
        }));
    }
    for w in workers {
        w.await?;
    }
    let took = started.elapsed().as_secs_f64();
    let mut all = samples.lock().await.clone();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "RESULT p50_us={} p99_us={} rps={:.1} requests={} socket_errors={} non2xx=0",
        pct(0.50),
        pct(0.99),
        all.len() as f64 / took,
        all.len(),
        errors.load(std::sync::atomic::Ordering::Relaxed)
    );
    drop(client);
    let _ = child.kill().await;
    Ok(())
}
