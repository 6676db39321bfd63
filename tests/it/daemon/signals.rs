//! Signals and exit codes of the real binary (`neko-sidecar run`): SIGTERM
//! (and SIGINT) remove our tools with one `clear` and exit 0 within
//! `[shutdown] deadline`, whether main_server is up, down or hanging, with a
//! single warning when the tools could not be removed; a second SIGTERM
//! during a slow shutdown exits at once with 130; an invalid config exits
//! 78 with every problem on stderr.

use std::time::{Duration, Instant};

use neko_sidecar::devserver::DevServerHandle;
use rustix::process::Signal;
use serde_json::json;

use crate::support::daemon::*;
use crate::support::{WAIT, Workspace, count_requests, dev_server, wait_stand_in, wait_until};

/// Scheduling slack on top of a deadline, on a busy 2-core machine.
const MARGIN: Duration = Duration::from_millis(1500);

/// A daemon with `alpha` and `beta` registered on a fresh stand-in.
async fn registered(tweak: impl FnOnce(&mut AgentToml)) -> (Workspace, DevServerHandle, Sidecar) {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha", "beta"], "v1"));
    let mut agent = ws.agent(&h.url());
    tweak(&mut agent);
    let sidecar = Sidecar::spawn(&ws.write_config(&agent));
    wait_holds(&h, &[("alpha", "v1"), ("beta", "v1")]).await;
    (ws, h, sidecar)
}

/// The stderr lines after the first one containing `marker`.
fn lines_after(lines: &[String], marker: &str) -> Vec<String> {
    match lines.iter().position(|l| l.contains(marker)) {
        Some(i) => lines[i + 1..].to_vec(),
        None => panic!("no line contains {marker:?}:\n{}", lines.join("\n")),
    }
}

fn warnings(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.contains(" WARN "))
        .cloned()
        .collect()
}

/// Writes the tool `hang`: an exec handler that appends its pid to the
/// returned file, then sleeps 300 s without answering.
fn hang_tool(ws: &Workspace) -> std::path::PathBuf {
    let started = ws.root.join("started");
    ws.write_tool(
        "hang.toml",
        &format!(
            "[[tool]]\nname = \"hang\"\ndescription = \"never answers\"\ntimeout_seconds = 60\nhandler = {{ type = \"exec\", command = [\"sh\", \"-c\", \"echo $$ >> {}; exec sleep 300\"] }}\n",
            started.display()
        ),
    );
    started
}

/// Waits until some role of `h` holds our `hang` tool.
async fn hang_registered(h: &DevServerHandle) {
    assert!(
        h.wait_for(WAIT, |h| {
            let snap = h.registry_snapshot();
            snap.roles
                .iter()
                .any(|r| our_names(&snap, &r.role) == ["hang"])
        })
        .await,
        "hang was never registered"
    );
}

/// Sends `sig` and checks the clean stop: exit 0 within the 2 s deadline,
/// one `clear` of our source, none of our tools left, built-ins untouched.
async fn stops_cleanly_on(sig: Signal) {
    let (_ws, h, mut sidecar) = registered(|_| {}).await;
    let before = h.requests().len();
    let sent = Instant::now();
    sidecar.signal(sig);
    let status = sidecar.exit_within(Duration::from_secs(2) + MARGIN).await;
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());
    eprintln!("stopped {:?} after the signal", sent.elapsed());

    cleared_once(&h, before);
    assert!(
        warnings(&sidecar.stderr()).is_empty(),
        "{:#?}",
        sidecar.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_clears_our_tools_in_one_request_and_exits_0() {
    stops_cleanly_on(Signal::TERM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_like_sigterm() {
    stops_cleanly_on(Signal::INT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_main_server_down_exits_0_with_one_warning() {
    let (_ws, h, mut sidecar) = registered(|_| {}).await;
    h.stop_listener().await;
    // The engine has seen the outage (it says so once) before the signal,
    // so every warning after the signal belongs to the shutdown.
    sidecar
        .wait_log("the engine noticing the outage", |l| {
            l.contains(" WARN ") && l.contains("cannot read main_server's tool list")
        })
        .await;

    sidecar.signal(Signal::TERM);
    let status = sidecar.exit_within(Duration::from_secs(2) + MARGIN).await;
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());

    let shutdown = lines_after(&sidecar.stderr(), "SIGTERM: shutting down");
    let warned = warnings(&shutdown);
    assert_eq!(warned.len(), 1, "exactly one warning: {warned:#?}");
    assert!(
        warned[0].contains("our tools could not be removed from main_server")
            && warned[0].contains("unreachable"),
        "{}",
        warned[0]
    );
    assert!(
        !shutdown.iter().any(|l| l.contains("ERROR")),
        "{shutdown:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_main_server_hanging_exits_0_at_the_deadline() {
    // Requests may take 10 s, the whole shutdown only 1 s.
    let (_ws, h, mut sidecar) = registered(|a| {
        a.request_timeout = "10s".into();
        a.shutdown_deadline = "1s".into();
    })
    .await;
    h.set_delay(Duration::from_secs(30));
    let sent = Instant::now();
    sidecar.signal(Signal::TERM);
    let status = sidecar.exit_within(Duration::from_secs(1) + MARGIN).await;
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());
    assert!(
        took >= Duration::from_secs(1),
        "it waited for the clear until the deadline, not less: {took:?}"
    );
    assert_eq!(count_requests(&h.requests(), "POST", "/api/tools/clear"), 1);

    let warned = warnings(&lines_after(&sidecar.stderr(), "SIGTERM: shutting down"));
    assert_eq!(warned.len(), 1, "exactly one warning: {warned:#?}");
    assert!(
        warned[0].contains("our tools could not be removed from main_server")
            && warned[0].contains("did not finish within"),
        "{}",
        warned[0]
    );
}

/// The worst stop: main_server hanging, a handler hanging and its call in
/// flight. The process has exited by `deadline` + 0.5 s, exit 0, and the
/// handler's process is gone with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_main_server_and_a_handler_hanging_exits_by_the_deadline() {
    let h = dev_server().await;
    let ws = Workspace::new();
    let started = hang_tool(&ws);
    let mut agent = ws.agent(&h.url());
    agent.request_timeout = "10s".into();
    agent.shutdown_deadline = "1s".into();
    let mut sidecar = Sidecar::spawn(&ws.write_config(&agent));
    hang_registered(&h).await;
    let call = {
        let h = h.clone();
        tokio::spawn(async move {
            h.invoke(serde_json::from_value(json!({"name": "hang", "arguments": {}})).unwrap())
                .await
        })
    };
    let read_pid = || {
        std::fs::read_to_string(&started)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
    };
    assert!(
        wait_until(WAIT, || read_pid().is_some()).await,
        "the handler never started"
    );
    let pid = read_pid().unwrap();
    h.set_delay(Duration::from_secs(30));
    let sent = Instant::now();
    sidecar.signal(Signal::TERM);
    let status = sidecar.exit_within(Duration::from_secs(5)).await;
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());
    assert!(
        took <= Duration::from_millis(1500),
        "exited {took:?} after SIGTERM, past the 1 s deadline + 0.5 s"
    );
    let gone =
        rustix::process::test_kill_process(rustix::process::Pid::from_raw(pid).unwrap()).is_err();
    assert!(gone, "the handler (pid {pid}) outlived the sidecar");
    call.abort();
}

/// SIGKILL leaves the sidecar no chance to stop anything: the kernel's
/// parent-death signal ends its handlers (Linux), set by the sidecar's own
/// spawn (src/os/linux_spawn.rs). Two calls at once: the first handler is
/// started from the daemon's main thread, the second (the first still
/// alive) from a spawning thread; neither survives.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_in_flight_die_with_a_sidecar_killed_by_sigkill() {
    let h = dev_server().await;
    let ws = Workspace::new();
    let started = hang_tool(&ws);
    let mut sidecar = Sidecar::spawn(&ws.write_config(&ws.agent(&h.url())));
    hang_registered(&h).await;
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move {
                h.invoke(serde_json::from_value(json!({"name": "hang", "arguments": {}})).unwrap())
                    .await
            })
        })
        .collect();
    let read_pids = || -> Vec<u32> {
        std::fs::read_to_string(&started)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    assert!(
        wait_until(WAIT, || read_pids().len() == 2).await,
        "the two handlers never started: {:?}",
        read_pids()
    );
    let pids = read_pids();
    sidecar.kill().await;
    assert!(
        wait_until(WAIT, || pids
            .iter()
            .all(|&p| crate::support::process_gone(p)))
        .await,
        "a handler of {pids:?} outlived the sidecar killed by SIGKILL"
    );
    for c in calls {
        c.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_a_slow_shutdown_exits_at_once_with_130() {
    let (_ws, h, mut sidecar) = registered(|a| {
        a.request_timeout = "20s".into();
        a.shutdown_deadline = "20s".into();
    })
    .await;
    h.set_delay(Duration::from_secs(30));
    sidecar.signal(Signal::TERM);
    // The clear has reached the stand-in and is being held.
    wait_stand_in(&h, "the clear held by the stand-in", |h| {
        h.requests()
            .iter()
            .any(|r| r.path == "/api/tools/clear" && r.status.is_none())
    })
    .await;

    sidecar.signal(Signal::TERM);
    let status = sidecar.exit_within(MARGIN).await;
    assert_eq!(status.code(), Some(130), "{:#?}", sidecar.stderr());
    let last = sidecar.stderr();
    assert!(
        last.iter()
            .any(|l| l.contains("SIGTERM again: exiting at once")),
        "{last:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_config_exits_78_with_every_problem_on_stderr() {
    let ws = Workspace::new();
    let config = ws.root.join("agent.toml");
    std::fs::write(
        &config,
        "source = \"builtin\"\n[registration]\npoll_interval = \"fast\"\nbogus = 1\n",
    )
    .unwrap();
    let mut sidecar = Sidecar::spawn(&config);
    let status = sidecar.exit_within(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(78), "{:#?}", sidecar.stderr());

    let stderr = sidecar.stderr();
    let p = config.display().to_string();
    for expected in [
        format!("{p}:1:10: error: `source` must not be \"builtin\""),
        format!("{p}:3:17: error: `poll_interval` in [registration]: `fast` is not a duration"),
        format!("{p}:4:1: error: unknown key `bogus` in [registration]"),
        format!("neko-sidecar: the agent config {p} is invalid"),
    ] {
        assert!(
            stderr.iter().any(|l| l.starts_with(&expected)),
            "missing {expected:?} in {stderr:#?}"
        );
    }
    assert_eq!(stderr.len(), 4, "only the diagnostics: {stderr:#?}");
}

/// Regression (found by the second-SIGTERM test, which hung): reading the
/// stand-in's request log notified its change watchers, so a `wait_for`
/// condition that read the log woke itself forever and its deadline never
/// fired. Runs on its own thread, so a relapse fails instead of hanging.
#[test]
fn wait_for_on_the_request_log_ends_at_its_deadline() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let held = rt.block_on(async {
            let h = dev_server().await;
            h.wait_for(Duration::from_millis(200), |h| {
                h.requests().iter().any(|r| r.path == "/never")
            })
            .await
        });
        let _ = tx.send(held);
    });
    let held = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("wait_for returns at its deadline");
    assert!(!held);
}

/// Regression: the binary installed its signal handlers only after the
/// daemon had started, so a SIGTERM arriving while the first tools were
/// being registered killed the process (the default action) with its tools
/// left behind. Now the handlers come first: a SIGTERM as soon as the
/// daemon logs anything still runs the shutdown path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_start_up_still_shuts_down_cleanly() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha", "beta"], "v1"));
    let mut sidecar = Sidecar::spawn(&ws.write_config(&ws.agent(&h.url())));
    // The first line is the manifest summary, logged before anything is
    // registered.
    sidecar.wait_log("the first log line", |_| true).await;
    sidecar.signal(Signal::TERM);
    let status = sidecar.exit_within(Duration::from_secs(2) + MARGIN).await;
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());
    assert!(
        sidecar
            .stderr()
            .iter()
            .any(|l| l.contains("SIGTERM: shutting down")),
        "{:#?}",
        sidecar.stderr()
    );
    assert!(
        h.registry_snapshot()
            .roles
            .iter()
            .all(|r| r.tools.iter().all(|t| t.source == "builtin")),
        "no tool of ours may be left behind"
    );
}
