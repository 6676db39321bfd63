//! Load and soak measurements of the real binary (not a test: it prints
//! figures for RELIABILITY.md). It starts `neko-sidecar dev-server` and
//! `neko-sidecar run` as child processes on free loopback ports, plays an
//! http handler in-process, calls the sidecar's callback URL exactly as
//! main_server does, and reads the sidecar's memory, descriptors and CPU
//! time from /proc.
//!
//! ```sh
//! cargo build --release
//! CARGO_TARGET_DIR=target cargo build --release --manifest-path bench/drivers/Cargo.toml
//! target/release/soak_calls calls   # 100,000 calls at concurrency 64
//! target/release/soak_calls slow    # 1,000 concurrent calls of a 1 s handler
//! target/release/soak_calls idle    # 100 tools, default 5 s poll, CPU over 300 s
//! ```
//!
//! Knobs: `SOAK_CALLS` (100000), `SOAK_CONCURRENCY` (64), `SOAK_WARM_CALLS`
//! (10000: RSS growth counts from the first sample, taken every 5,000
//! calls, at or after it), `SOAK_SLOW` (1000), `SOAK_IDLE_SECS` (300),
//! `SOAK_IDLE_SETTLE_SECS` (30, before the idle window starts),
//! `SOAK_NOFILE` (run the sidecar under this soft descriptor limit, e.g.
//! 1024 as systemd gives a service by default), `NEKO_SIDECAR_BIN`
//! (default: `neko-sidecar` next to this driver). It owns no library code
//! and asserts nothing the suite does not; it exits non-zero when a call
//! goes wrong.
//!
//! Besides the lines for people (`calls: ...`), `calls` and `idle` print
//! their figures as `key=value` lines, which `bench/run.sh` (benchmarks 8
//! and 9) reads.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::net::TcpListener;

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One line of /proc/PID/status, in kB (VmRSS, VmHWM) or a count (Threads).
fn proc_status(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3, utime 14, stime 15 (1-based).
    let n = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    n(14) + n(15)
}

fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

fn mib(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

/// VmRSS with its anonymous (heap, stacks) and file-backed (the mapped
/// binary and libraries) parts.
fn rss(pid: u32) -> String {
    format!(
        "{} (anon {}, file {})",
        mib(proc_status(pid, "VmRSS")),
        mib(proc_status(pid, "RssAnon")),
        mib(proc_status(pid, "RssFile"))
    )
}

/// `{what}_rss_kb`, `{what}_anon_kb` and `{what}_file_kb` lines.
fn kv_rss(what: &str, pid: u32) {
    println!("{what}_rss_kb={}", proc_status(pid, "VmRSS"));
    println!("{what}_anon_kb={}", proc_status(pid, "RssAnon"));
    println!("{what}_file_kb={}", proc_status(pid, "RssFile"));
}

/// A child process, stopped with SIGTERM (then SIGKILL) when dropped.
struct Proc {
    child: Child,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sidecar_bin() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("NEKO_SIDECAR_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("cannot locate the target directory")?;
    let bin = dir.join("neko-sidecar");
    if !bin.exists() {
        bail!(
            "{} is missing: cargo build --release (in the repository's root)",
            bin.display()
        );
    }
    Ok(bin)
}

async fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    Ok(l.local_addr()?.port())
}

/// The plugin: `/echo` answers at once, `/slow` after one second.
async fn handler() -> Result<String> {
    async fn echo(Json(body): Json<Value>) -> Json<Value> {
        Json(
            json!({"output": {"q": body["arguments"]["q"], "call_id": body["call_id"]}, "is_error": false}),
        )
    }
    async fn slow(Json(body): Json<Value>) -> Json<Value> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        echo(Json(body)).await
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/echo", post(echo))
        .route("/slow", post(slow));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}"))
}

/// A dev-server, a sidecar with `tools` tools on `path` with `timeout`
/// seconds and `poll` interval, registered; the callback URLs by tool.
struct Rig {
    _tmp: tempfile::TempDir,
    _dev: Proc,
    sidecar: Proc,
    urls: Vec<String>,
    log: PathBuf,
}

async fn rig(handler: &str, path: &str, tools: usize, timeout: u32, poll: &str) -> Result<Rig> {
    let bin = sidecar_bin()?;
    let tmp = tempfile::tempdir()?;
    let port = free_port().await?;
    let main_server = format!("http://127.0.0.1:{port}");
    let dev = Proc {
        child: Command::new(&bin)
            .args(["dev-server", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    };
    let http = reqwest::Client::builder().no_proxy().build()?;
    let up = wait_for(Duration::from_secs(10), || async {
        http.get(format!("{main_server}/api/tools"))
            .send()
            .await
            .is_ok()
    })
    .await;
    if !up {
        bail!("the dev-server never answered");
    }

    std::fs::create_dir(tmp.path().join("tools"))?;
    let mut manifest = String::new();
    for i in 0..tools {
        manifest.push_str(&format!(
            "[[tool]]\nname = \"soak_{i:03}\"\ndescription = \"Echoes q (soak test tool {i})\"\n\
             timeout_seconds = {timeout}\nhandler = {{ type = \"http\", url = \"{handler}{path}\" }}\n\
             parameters = {{ type = \"object\", required = [\"q\"], properties = {{ q = {{ type = \"string\" }} }} }}\n\n"
        ));
    }
    std::fs::write(tmp.path().join("tools/soak.toml"), manifest)?;
    let config = tmp.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "source = \"plugin:soak\"\nmanifest_dirs = [\"tools\"]\n\
             [main_server]\nurl = \"{main_server}\"\n\
             [registration]\npoll_interval = \"{poll}\"\n\
             [admin]\nlisten = \"\"\n"
        ),
    )?;
    let log = tmp.path().join("sidecar.log");
    let mut cmd = match std::env::var("SOAK_NOFILE") {
        Ok(n) => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")])
                .arg(&bin);
            c
        }
        Err(_) => Command::new(&bin),
    };
    cmd.args(["run", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    let sidecar = Proc {
        child: cmd.spawn()?,
    };

    let mut urls = Vec::new();
    let listed = wait_for(Duration::from_secs(60), || {
        let http = http.clone();
        let url = format!("{main_server}/api/tools?role=Lanlan");
        async move {
            let Ok(r) = http.get(url).send().await else {
                return false;
            };
            let Ok(v) = r.json::<Value>().await else {
                return false;
            };
            v["tools_by_role"]["Lanlan"]
                .as_array()
                .is_some_and(|t| t.iter().filter(|t| t["source"] == "plugin:soak").count() == tools)
        }
    })
    .await;
    if !listed {
        bail!(
            "the sidecar never registered its {tools} tools; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let v: Value = http
        .get(format!("{main_server}/api/tools?role=Lanlan"))
        .send()
        .await?
        .json()
        .await?;
    for t in v["tools_by_role"]["Lanlan"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if t["source"] == "plugin:soak" {
            urls.push(t["callback_url"].as_str().unwrap_or_default().to_owned());
        }
    }
    Ok(Rig {
        _tmp: tmp,
        _dev: dev,
        sidecar,
        urls,
        log,
    })
}

/// Re-checks `cond` every 50 ms until it holds or `within` passes.
async fn wait_for<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// One call as main_server makes it; `Err` says what was wrong.
async fn call(http: &reqwest::Client, url: &str, q: &str) -> Result<(), String> {
    let call_id = format!("call_{q}");
    let body = json!({"name": url.rsplit('/').next(), "arguments": {"q": q}, "call_id": call_id,
        "raw_arguments": json!({"q": q}).to_string()});
    let r = http
        .post(url)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("transport: {e}"))?;
    let status = r.status();
    let v: Value = r.json().await.map_err(|e| format!("not JSON: {e}"))?;
    if status != 200 || v["is_error"] != false || v["output"] != json!({"q": q, "call_id": call_id})
    {
        return Err(format!("{status} {v}"));
    }
    Ok(())
}

fn log_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

async fn scenario_calls(handler: &str) -> Result<()> {
    let total = env_num("SOAK_CALLS", 100_000);
    let concurrency = env_num("SOAK_CONCURRENCY", 64);
    // RSS grows while the allocator and the connection pools reach their
    // working set; growth is measured from here on.
    let warm_calls = env_num("SOAK_WARM_CALLS", 10_000);
    let rig = rig(handler, "/echo", 4, 30, "5s").await?;
    let pid = rig.sidecar.pid();
    println!(
        "calls: {total} calls at concurrency {concurrency} to 4 tools; sidecar pid {pid}, RSS after registration {}",
        rss(pid)
    );
    println!("calls={total}");
    println!("concurrency={concurrency}");
    kv_rss("registered", pid);
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(concurrency as usize)
        .build()?;
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(std::sync::Mutex::new(Vec::<(u64, u64)>::new()));
    let urls = Arc::new(rig.urls.clone());
    let cpu0 = cpu_ticks(pid);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (http, next, errors, samples, urls) = (
            http.clone(),
            next.clone(),
            errors.clone(),
            samples.clone(),
            urls.clone(),
        );
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let url = &urls[n as usize % urls.len()];
                if let Err(e) = call(&http, url, &n.to_string()).await {
                    if errors.fetch_add(1, Ordering::Relaxed) < 5 {
                        eprintln!("call {n}: {e}");
                    }
                }
                if (n + 1) % 5000 == 0 {
                    samples
                        .lock()
                        .unwrap()
                        .push((n + 1, proc_status(pid, "VmRSS")));
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let took = started.elapsed();
    let cpu = (cpu_ticks(pid) - cpu0) as f64 / clock_ticks_per_second() as f64;
    let mut samples = samples.lock().unwrap().clone();
    samples.sort();
    let warm = samples
        .iter()
        .find(|(n, _)| *n >= warm_calls)
        .or(samples.first())
        .copied()
        .unwrap_or((0, 0));
    let end = samples.last().copied().unwrap_or((0, 0));
    println!(
        "calls: done in {:.1} s ({:.0} calls/s), {} errors",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64(),
        errors.load(Ordering::Relaxed)
    );
    println!(
        "calls: RSS every 5000 calls (kB): {}",
        samples
            .iter()
            .map(|(n, r)| format!("{}k={r}", n / 1000))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "calls: RSS after {} calls {}, after {} calls {}, growth {} kB; now {}; VmHWM {}; threads {}; fds {}; log lines {}",
        warm.0,
        mib(warm.1),
        end.0,
        mib(end.1),
        end.1 as i64 - warm.1 as i64,
        rss(pid),
        mib(proc_status(pid, "VmHWM")),
        proc_status(pid, "Threads"),
        open_fds(pid),
        log_lines(&rig.log)
    );
    println!("errors={}", errors.load(Ordering::Relaxed));
    println!("took_s={:.2}", took.as_secs_f64());
    println!("calls_per_s={:.0}", total as f64 / took.as_secs_f64());
    // The sidecar's own CPU per call: steadier than calls/s on a shared
    // machine, where the caller and the handler compete for the same cores.
    println!("cpu_us_per_call={:.1}", cpu * 1e6 / total as f64);
    println!("warm_calls={}", warm.0);
    println!("warm_rss_kb={}", warm.1);
    println!("end_calls={}", end.0);
    println!("end_sampled_rss_kb={}", end.1);
    println!("growth_kb={}", end.1 as i64 - warm.1 as i64);
    kv_rss("end", pid);
    println!("hwm_kb={}", proc_status(pid, "VmHWM"));
    println!("threads_end={}", proc_status(pid, "Threads"));
    println!("fds_end={}", open_fds(pid));
    println!(
        "rss_samples_kb={}",
        samples
            .iter()
            .map(|(n, r)| format!("{n}:{r}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    if errors.load(Ordering::Relaxed) > 0 {
        bail!("some calls failed");
    }
    Ok(())
}

async fn scenario_slow(handler: &str) -> Result<()> {
    let n = env_num("SOAK_SLOW", 1000);
    let rig = rig(handler, "/slow", 1, 30, "5s").await?;
    let pid = rig.sidecar.pid();
    let limit = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default()
        .split_whitespace()
        .nth(3)
        .unwrap_or("?")
        .to_owned();
    println!(
        "slow: {n} concurrent calls of a 1 s handler; sidecar pid {pid} (open files soft limit {limit}), RSS {} fds {} before",
        rss(pid),
        open_fds(pid)
    );
    // Fresh connections, as main_server's one request per call would use.
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()?;
    let url = rig.urls[0].clone();
    let done = Arc::new(AtomicU64::new(0));
    let sampler = {
        let done = done.clone();
        tokio::spawn(async move {
            let (mut max_fds, mut max_threads) = (0, 0);
            while done.load(Ordering::Relaxed) < n {
                max_fds = max_fds.max(open_fds(pid));
                max_threads = max_threads.max(proc_status(pid, "Threads"));
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            (max_fds, max_threads)
        })
    };
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (http, url, done) = (http.clone(), url.clone(), done.clone());
        tasks.spawn(async move {
            let t = Instant::now();
            let r = call(&http, &url, &format!("slow{i}")).await;
            done.fetch_add(1, Ordering::Relaxed);
            (r, t.elapsed())
        });
    }
    let mut errors = Vec::new();
    let mut slowest = Duration::ZERO;
    while let Some(r) = tasks.join_next().await {
        let (r, took) = r?;
        slowest = slowest.max(took);
        if let Err(e) = r {
            errors.push(e);
        }
    }
    let took = started.elapsed();
    let (max_fds, max_threads) = sampler.await?;
    println!(
        "slow: all {n} answered in {:.2} s (slowest call {:.2} s), {} errors; peak fds {max_fds}, peak threads {max_threads}, VmHWM {}",
        took.as_secs_f64(),
        slowest.as_secs_f64(),
        errors.len(),
        mib(proc_status(pid, "VmHWM"))
    );
    for e in errors.iter().take(5) {
        println!("slow: error: {e}");
    }
    // Descriptors after the burst: the sidecar's pooled connections to the
    // handler stay open until the pool's idle timeout.
    let after = Instant::now();
    let mut timeline = Vec::new();
    let mut settled = None;
    while after.elapsed() < Duration::from_secs(150) {
        let fds = open_fds(pid);
        let at = after.elapsed().as_secs();
        if timeline.last().is_none_or(|(_, f)| *f != fds) {
            timeline.push((at, fds));
        }
        if fds < 64 {
            settled = Some(after.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "slow: after: fds (s=count) {}; {}; RSS {}, log lines {}",
        timeline
            .iter()
            .map(|(s, f)| format!("{s}={f}"))
            .collect::<Vec<_>>()
            .join(" "),
        match settled {
            Some(d) => format!("below 64 after {:.1} s", d.as_secs_f64()),
            None => "NOT below 64 after 150 s".into(),
        },
        rss(pid),
        log_lines(&rig.log)
    );
    if !errors.is_empty() {
        bail!("{} calls failed", errors.len());
    }
    Ok(())
}

async fn scenario_idle(handler: &str) -> Result<()> {
    let secs = env_num("SOAK_IDLE_SECS", 300);
    let rig = rig(handler, "/echo", 100, 30, "5s").await?;
    let pid = rig.sidecar.pid();
    let tck = clock_ticks_per_second();
    // The registrations are confirmed and logged in the first seconds;
    // the window measures the steady state after that.
    let settle = env_num("SOAK_IDLE_SETTLE_SECS", 30);
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let threads0 = thread_ticks(pid);
    let t0 = cpu_ticks(pid);
    let lines0 = log_lines(&rig.log);
    println!("idle_tools=100");
    println!("settle_s={settle}");
    kv_rss("start", pid);
    println!(
        "idle: 100 tools registered, {settle} s ago; RSS {} (VmHWM {}), threads {}, fds {}; CPU so far {:.2} s; measuring {secs} s",
        rss(pid),
        mib(proc_status(pid, "VmHWM")),
        proc_status(pid, "Threads"),
        open_fds(pid),
        t0 as f64 / tck as f64
    );
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let window = start.elapsed().as_secs_f64();
    let ticks = cpu_ticks(pid) - t0;
    let used = ticks as f64 / tck as f64;
    println!(
        "idle: over {window:.0} s: CPU {used:.2} s ({:.3} % of one core, {:.1} s per hour); RSS {} at the end; log lines {}",
        used / window * 100.0,
        used / window * 3600.0,
        rss(pid),
        log_lines(&rig.log)
    );
    println!("window_s={window:.1}");
    // utime + stime come in clock ticks: one tick is the resolution.
    println!("cpu_ticks={ticks}");
    println!("clk_tck={tck}");
    println!("cpu_s={used:.2}");
    println!("cpu_pct={:.4}", used / window * 100.0);
    println!("cpu_s_per_hour={:.2}", used / window * 3600.0);
    kv_rss("end", pid);
    println!("hwm_kb={}", proc_status(pid, "VmHWM"));
    println!("threads={}", proc_status(pid, "Threads"));
    println!("fds={}", open_fds(pid));
    println!("log_lines_in_window={}", log_lines(&rig.log) - lines0);
    let threads1 = thread_ticks(pid);
    println!(
        "idle: CPU by thread (s): {}",
        threads1
            .iter()
            .map(|(tid, name, t)| {
                let before = threads0
                    .iter()
                    .find(|(id, _, _)| id == tid)
                    .map_or(0, |x| x.2);
                format!("{name}[{tid}]={:.2}", (t - before) as f64 / tck as f64)
            })
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}

/// Every thread of a process: id, name and utime + stime in ticks.
fn thread_ticks(pid: u32) -> Vec<(String, String, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<_> = dir
        .flatten()
        .filter_map(|e| {
            let tid = e.file_name().to_string_lossy().into_owned();
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some((tid, name.trim().to_owned(), ticks))
        })
        .collect();
    out.sort();
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let handler = handler().await?;
    if matches!(which.as_str(), "calls" | "all") {
        scenario_calls(&handler).await?;
    }
    if matches!(which.as_str(), "slow" | "all") {
        scenario_slow(&handler).await?;
    }
    if matches!(which.as_str(), "idle" | "all") {
        scenario_idle(&handler).await?;
    }
    if !matches!(which.as_str(), "calls" | "slow" | "idle" | "all") {
        bail!("usage: soak_calls [calls|slow|idle|all]");
    }
    Ok(())
}
