//! Benchmark 3: 1,000 simultaneous slow calls through the real daemon.
//!
//! Starts the stand-in (`neko-sidecar dev-server`), the slow handler
//! (`bench_handler`, answering after `--slow-ms`) and `neko-sidecar run`
//! with one tool, reads the tool's callback URL from the stand-in's
//! `GET /api/tools`, then POSTs `--calls` callback bodies at once, each on
//! its own connection, as main_server would. Reports how many were answered
//! with a success envelope, the wall time of the burst against the handler's
//! sleep, and the daemon's memory and open descriptors from /proc: idle
//! (after a few warm-up calls) and at peak (VmHWM; fds sampled every 10 ms).
//!
//! Run: `bench_burst [--calls 1000] [--slow-ms 1000]`; prints `key=value`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bench_support::*;
use serde_json::json;

const SOURCE: &str = "plugin:bench-burst";

fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| {
            rest.trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let calls: usize = arg_or("calls", 1000)?;
    let slow_ms: u64 = arg_or("slow-ms", 1000)?;
    let c = http();

    let ds = DevServerProc::start().await?;
    let (_handler, handler_addr) = start_handler(slow_ms)?;
    let dir = scratch()?;
    let manifest = format!(
        "[[tool]]\nname = \"slow\"\ndescription = \"Answers after a while.\"\ntimeout_seconds = 30\nhandler = {{ type = \"http\", url = \"http://{handler_addr}/slow\" }}\nparameters = {{ type = \"object\", properties = {{ city = {{ type = \"string\" }} }}, required = [\"city\"] }}\n"
    );
    std::fs::write(dir.path().join("tools.d/slow.toml"), manifest)?;
    let sc = SidecarProc::start(
        dir.path(),
        &AgentSettings {
            source: SOURCE,
            main_server: &ds.url,
            poll_interval: "5s",
            debounce: "200ms",
        },
    )?;
    let pid = sc.proc.pid();

    // The callback URL, as main_server knows it.
    let url = callback_url(&ds, &c, "slow").await?;
    let body = json!({"name": "slow", "arguments": {"city": "Tokyo"}, "call_id": "x", "raw_arguments": "{\"city\":\"Tokyo\"}"}).to_string();

    // Warm-up: a few calls, so that idle means "has served calls".
    for _ in 0..3 {
        let t = c.post(&url).body(body.clone()).send().await?.text().await?;
        if !t.contains(r#""is_error":false"#) {
            return Err(format!("warm-up call failed: {t}").into());
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_rss = proc_status(pid, "VmRSS").unwrap_or(0);
    let idle_hwm = proc_status(pid, "VmHWM").unwrap_or(0);
    let idle_fds = open_fds(pid);
    let idle_threads = proc_status(pid, "Threads").unwrap_or(0);

    // The burst: every call on its own connection, started together.
    let ok = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(calls + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..calls {
        let (url, body, ok, start) = (url.clone(), body.clone(), ok.clone(), start.clone());
        tasks.spawn(async move {
            // One client per call: no connection is shared or queued.
            let c = reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client builds");
            start.wait().await;
            let t0 = Instant::now();
            if let Ok(r) = c.post(&url).body(body).send().await {
                if let Ok(t) = r.text().await {
                    if t.contains(r#""is_error":false"#) {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            t0.elapsed()
        });
    }
    let peak_fds = Arc::new(AtomicUsize::new(0));
    // RssAnon (heap, stacks) and RssFile (the binary's and libraries'
    // pages) apart, so a change of the peak can be told: the daemon's own
    // memory, or a larger executable.
    let peak_anon = Arc::new(AtomicUsize::new(0));
    let peak_file = Arc::new(AtomicUsize::new(0));
    let sampling = {
        let peak = peak_fds.clone();
        let (anon, file) = (peak_anon.clone(), peak_file.clone());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(open_fds(pid), Ordering::Relaxed);
                anon.fetch_max(proc_status(pid, "RssAnon").unwrap_or(0) as usize, Ordering::Relaxed);
                file.fetch_max(proc_status(pid, "RssFile").unwrap_or(0) as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    start.wait().await;
    let t0 = Instant::now();
    let mut per_call = Vec::with_capacity(calls);
    while let Some(r) = tasks.join_next().await {
        per_call.push(r?);
    }
    let wall = t0.elapsed();
    sampling.abort();
    let peak_hwm = proc_status(pid, "VmHWM").unwrap_or(0);
    let peak_threads = proc_status(pid, "Threads").unwrap_or(0);
    let after_fds = open_fds(pid);
    let s = Summary::of(&per_call);

    println!("calls={calls}");
    println!("slow_ms={slow_ms}");
    println!("answered_ok={}", ok.load(Ordering::Relaxed));
    println!("wall_ms={:.1}", wall.as_secs_f64() * 1e3);
    s.print("per_call");
    println!("idle_rss_kb={idle_rss}");
    println!("idle_hwm_kb={idle_hwm}");
    println!("peak_hwm_kb={peak_hwm}");
    println!("peak_anon_kb={}", peak_anon.load(Ordering::Relaxed));
    println!("peak_file_kb={}", peak_file.load(Ordering::Relaxed));
    println!("idle_fds={idle_fds}");
    println!("peak_fds={}", peak_fds.load(Ordering::Relaxed));
    println!("fds_after={after_fds}");
    println!("idle_threads={idle_threads}");
    println!("threads_after={peak_threads}");
    println!("nofile_limit={}", proc_limit(pid).unwrap_or_default());
    drop(sc);
    Ok(())
}

/// The daemon's soft limit on open files, from /proc/PID/limits.
fn proc_limit(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3).map(str::to_string)
}
