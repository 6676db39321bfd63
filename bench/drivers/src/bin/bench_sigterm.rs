//! Benchmark 7: SIGTERM → every tool gone from main_server and the process
//! exited, through the real binaries (`neko-sidecar run` with `--tools`
//! tools against `neko-sidecar dev-server`).
//!
//! Each run starts a daemon, waits until all its tools are visible, sends
//! SIGTERM, waits for the process to exit, then checks the stand-in: the
//! tools must already be gone (if not, it polls until they are, and that
//! time counts). The baseline, interleaved with the runs: the same
//! SIGTERM-and-wait on `sleep 60`, a process that exits at once.
//!
//! Run: `bench_sigterm [--runs 10] [--tools 100]`. Prints `key=value`;
//! timings from `Instant` (monotonic).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bench_support::*;
use rustix::process::{Pid, Signal, kill_process};

const SOURCE: &str = "plugin:bench-sigterm";

fn term(pid: u32) -> Result<(), BoxError> {
    let pid = Pid::from_raw(pid as i32).ok_or("pid 0")?;
    kill_process(pid, Signal::TERM)?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let runs: usize = arg_or("runs", 10)?;
    let tools: usize = arg_or("tools", 100)?;
    let c = http();
    let ds = DevServerProc::start().await?;
    let mut stop = Vec::with_capacity(runs);
    let mut exit_only = Vec::with_capacity(runs);
    let mut baseline = Vec::with_capacity(runs);
    let mut gone_at_exit = 0;
    let mut clean_exits = 0;
    for _ in 0..runs {
        // Baseline: a process that exits on SIGTERM at once.
        let mut sleeper = Command::new("sleep")
            .arg("60")
            .stdin(Stdio::null())
            .spawn()?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        term(sleeper.id())?;
        sleeper.wait()?;
        baseline.push(t0.elapsed());

        let dir = scratch()?;
        std::fs::write(
            dir.path().join("tools.d/tools.toml"),
            http_tools_manifest("tool_", tools, "http://127.0.0.1:9/w"),
        )?;
        let mut sc = SidecarProc::start(
            dir.path(),
            &AgentSettings {
                source: SOURCE,
                main_server: &ds.url,
                poll_interval: "5s",
                debounce: "200ms",
            },
        )?;
        let count = || {
            let fut = ds.get(&c, "/api/tools");
            async move {
                fut.await
                    .map(|v| count_source(&v, SOURCE))
                    .unwrap_or(usize::MAX)
            }
        };
        wait_for(
            Duration::from_secs(30),
            Duration::from_millis(10),
            || async { count().await == 2 * tools },
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(200)).await;

        let t0 = Instant::now();
        term(sc.proc.pid())?;
        let status = sc.proc.child.wait()?;
        let exited = t0.elapsed();
        if status.success() {
            clean_exits += 1;
        }
        // Gone at exit: the time is the exit. Otherwise: when seen gone.
        let done = if count().await == 0 {
            gone_at_exit += 1;
            exited
        } else {
            wait_for(
                Duration::from_secs(30),
                Duration::from_millis(5),
                || async { count().await == 0 },
            )
            .await?;
            t0.elapsed()
        };
        stop.push(done);
        exit_only.push(exited);
    }
    println!("runs={runs}");
    println!("tools={tools}");
    println!("clean_exits={clean_exits}");
    println!("gone_at_exit={gone_at_exit}");
    Summary::of(&stop).print("stop");
    Summary::of(&exit_only).print("exit");
    Summary::of(&baseline).print("baseline");
    Ok(())
}
