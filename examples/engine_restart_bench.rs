//! Measures how fast the registration engine puts every tool back after a
//! main_server restart (the in-process stand-in forgetting everything), and
//! how long 1,000 tools take to register from cold.
//!
//! Run: `cargo run --release --example engine_restart_bench [-- POLL_MS RESTARTS]`
//! (defaults: 500 ms poll, 20 restarts, for N = 100 and N = 1,000).
//!
//! "Back" is the moment the engine's own GET confirmed every tool again, so
//! it includes one GET after the last register: an upper bound of "visible".
//! Restarts happen at a random phase of the poll cycle (a random pause after
//! convergence), so the wait for the next poll is uniform in [0, poll].
//! A measurement, not a test: it asserts nothing about time.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use neko_sidecar::client::Client;
use neko_sidecar::config;
use neko_sidecar::desired::DesiredState;
use neko_sidecar::devserver::{DevServer, DevServerHandle};
use neko_sidecar::engine::{Engine, UrlFor};
use neko_sidecar::manifest::{LoadContext, parse_manifest};
use neko_sidecar::registration::{RegistrationSnapshot, RegistrationStore, ToolState};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const SOURCE: &str = "plugin:bench";

fn desired(n: usize) -> Result<DesiredState, String> {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[[tool]]\nname = \"tool_{i:04}\"\ndescription = \"Looks up the weather of a city and answers in Celsius.\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/w\" }}\nparameters = {{ type = \"object\", properties = {{ city = {{ type = \"string\" }} }}, required = [\"city\"] }}\n"
        ));
    }
    let f = parse_manifest(Path::new("bench.toml"), &text, &LoadContext::default());
    if f.has_errors() {
        return Err(format!("{:?}", f.diagnostics));
    }
    Ok(DesiredState::assemble(SOURCE, &[f]).0)
}

/// Every tool registered and confirmed at or after `since`.
fn back_since(s: &RegistrationSnapshot, n: usize, since: SystemTime) -> bool {
    s.tools.len() == n
        && s.tools.values().all(|t| {
            t.state == ToolState::Registered && t.last_registered.is_some_and(|at| at >= since)
        })
}

struct Bench {
    server: DevServerHandle,
    status: Arc<RegistrationStore>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start(n: usize, poll_ms: u64) -> Result<(Bench, Duration), Box<dyn std::error::Error>> {
    let server = DevServer::builder().start(tokio::net::TcpListener::bind("127.0.0.1:0").await?)?;
    let text = format!(
        "source = \"{SOURCE}\"\n[main_server]\nurl = \"{}\"\n[registration]\npoll_interval = \"{poll_ms}ms\"\n",
        server.url()
    );
    let (cfg, diags) = config::parse(Path::new("bench-agent.toml"), &text);
    let cfg = cfg.ok_or_else(|| format!("{diags:?}"))?;
    let status = Arc::new(RegistrationStore::new());
    let url_for: UrlFor = Arc::new(|name: &str| format!("http://127.0.0.1:9/cb/tok/{name}"));
    let mut engine = Engine::new(
        &cfg,
        Client::new(&cfg.main_server)?,
        url_for,
        status.clone(),
    )?;
    let (_tx, rx) = watch::channel(Arc::new(desired(n)?));
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let since = SystemTime::now();
    let t0 = Instant::now();
    let task = tokio::spawn(async move {
        let _keep_sender = _tx;
        engine.run(rx, token).await;
    });
    status
        .wait_until(Duration::from_secs(60), |s| back_since(s, n, since))
        .await
        .map_err(|_| "cold registration did not finish in 60 s")?;
    let cold = t0.elapsed();
    Ok((
        Bench {
            server,
            status,
            shutdown,
            task,
        },
        cold,
    ))
}

fn summary(mut xs: Vec<Duration>) -> String {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "median {:.0} ms, min {:.0} ms, max {:.0} ms",
        ms(xs[xs.len() / 2]),
        ms(xs[0]),
        ms(xs[xs.len() - 1])
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let poll_ms: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(500);
    let restarts: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    println!("poll interval {poll_ms} ms, {restarts} restarts per N, default max_in_flight (16)");

    for n in [100usize, 1000] {
        let (b, cold) = start(n, poll_ms).await?;
        println!(
            "N = {n}: cold registration {:.0} ms",
            cold.as_secs_f64() * 1000.0
        );
        let mut back = Vec::with_capacity(restarts);
        let mut registering = Vec::with_capacity(restarts);
        for _ in 0..restarts {
            // A random phase of the poll cycle.
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..poll_ms))).await;
            b.server.clear_request_log();
            let since = SystemTime::now();
            let t0 = Instant::now();
            b.server.restart();
            b.status
                .wait_until(Duration::from_secs(60), |s| back_since(s, n, since))
                .await
                .map_err(|_| "tools did not come back in 60 s")?;
            let took = t0.elapsed();
            back.push(took);
            // The part after the engine noticed: from its first register.
            let since_ms = since
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            if let Some(first) = b
                .server
                .requests()
                .iter()
                .find(|r| r.path == "/api/tools/register")
            {
                let noticed = Duration::from_millis(first.at_unix_ms.saturating_sub(since_ms));
                registering.push(took.saturating_sub(noticed));
            }
        }
        println!("N = {n}: restart -> all confirmed again: {}", summary(back));
        println!(
            "N = {n}:   of which registering (first register -> confirmed): {}",
            summary(registering)
        );
        b.shutdown.cancel();
        let _ = b.task.await;
    }
    Ok(())
}
