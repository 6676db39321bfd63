//! The notify protocol as systemd sees it from the real binary: a datagram
//! socket in a tempdir is `NOTIFY_SOCKET`, `WATCHDOG_USEC=400000`. `READY=1`
//! comes once the manifests are loaded, with main_server down; `STATUS=`
//! says what main_server does; `WATCHDOG=1` every 200 ms while the
//! reconcile loop runs (only when `WATCHDOG_PID` is ours); `RELOADING=1`
//! with `MONOTONIC_USEC=` then `READY=1` around SIGHUP; `STOPPING=1` at
//! SIGTERM, and nothing but watchdog pings after it.

use std::path::Path;
use std::time::Duration;

use rustix::process::Signal;
use tokio::process::Command;

use crate::support::daemon::{Sidecar, clean_env, tool, tools, wait_holds};
use crate::support::notify::Manager;
use crate::support::{BIN, Workspace, dev_server};

const WATCHDOG: &str = "WATCHDOG=1\n";

/// The daemon under a notify socket, its watchdog owned by `watchdog_pid`:
/// `None` means the daemon itself (the shell's pid, which `exec` keeps).
fn spawn_notified(config: &Path, socket: &Path, watchdog_pid: Option<u32>) -> Sidecar {
    let mut cmd = Command::new("sh");
    let pid = match watchdog_pid {
        Some(p) => p.to_string(),
        None => "$$".into(),
    };
    cmd.arg("-c")
        .arg(format!(
            "WATCHDOG_PID={pid} exec \"$0\" run --config \"$1\""
        ))
        .arg(BIN)
        .arg(config);
    clean_env(&mut cmd);
    cmd.env("NOTIFY_SOCKET", socket)
        .env("WATCHDOG_USEC", "400000");
    Sidecar::spawn_command(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_follow_the_daemons_life_in_order() {
    let h = dev_server().await;
    h.stop_listener().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha", "beta"], "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    let mut m = Manager::new();
    let mut sidecar = spawn_notified(&config, &m.path, None);

    // Ready with main_server down: it does not wait for it.
    m.until("READY=1", |s| s == "READY=1\n").await;
    assert!(!h.is_listening().await);
    assert_eq!(m.log[0], "STATUS=loading manifests\n", "{:#?}", m.log);
    let unreachable = m
        .until("an unreachable status", |s| {
            s.starts_with("STATUS=main_server unreachable")
        })
        .await;
    assert!(unreachable.contains("failed attempt"), "{unreachable}");

    h.start_listener().await.unwrap();
    m.until("2/2 registered", |s| s == "STATUS=2/2 tools registered\n")
        .await;
    wait_holds(&h, &[("alpha", "v1"), ("beta", "v1")]).await;

    // Pings every half interval (200 ms): about 7 in 1.5 s.
    let window = m.during(Duration::from_millis(1500)).await;
    let pings = window.iter().filter(|s| *s == WATCHDOG).count();
    assert!(
        (3..=10).contains(&pings),
        "{pings} pings in 1.5 s: {window:#?}"
    );

    sidecar.signal(Signal::HUP);
    let reloading = m
        .until("RELOADING=1", |s| s.starts_with("RELOADING=1\n"))
        .await;
    let lines: Vec<&str> = reloading.lines().collect();
    assert_eq!(lines.len(), 2, "{reloading:?}");
    let usec: u64 = lines[1]
        .strip_prefix("MONOTONIC_USEC=")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{reloading:?}"));
    assert!(usec > 0);
    m.until("READY=1 after the reload", |s| s == "READY=1\n")
        .await;

    sidecar.signal(Signal::TERM);
    m.until("STOPPING=1", |s| s == "STOPPING=1\n").await;
    let status = sidecar.exit_within(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0));
    m.during(Duration::from_millis(50)).await;

    // The whole story, in order.
    let ready = m.position(0, |s| s == "READY=1\n");
    let down = m.position(0, |s| s.starts_with("STATUS=main_server unreachable"));
    let up = m.position(0, |s| s == "STATUS=2/2 tools registered\n");
    let reload = m.position(0, |s| s.starts_with("RELOADING=1\n"));
    let ready_again = m.position(reload, |s| s == "READY=1\n");
    let stopping = m.position(0, |s| s == "STOPPING=1\n");
    assert!(
        ready < up && down < up && up < reload && reload < ready_again && ready_again < stopping,
        "{:#?}",
        m.log
    );
    assert_eq!(
        m.log.iter().filter(|s| *s == "READY=1\n").count(),
        2,
        "{:#?}",
        m.log
    );
    let after: Vec<&String> = m.log[stopping + 1..]
        .iter()
        .filter(|s| *s != WATCHDOG)
        .collect();
    assert!(after.is_empty(), "after STOPPING=1: {after:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_meant_for_another_process_is_never_pinged() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tool("alpha", "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    let mut m = Manager::new();
    // WATCHDOG_PID names pid 1: the watchdog is not ours.
    let _sidecar = spawn_notified(&config, &m.path, Some(1));

    m.until("READY=1", |s| s == "READY=1\n").await;
    m.until("1/1 registered", |s| s == "STATUS=1/1 tools registered\n")
        .await;
    // Four ping periods of a watchdog we must not feed.
    m.during(Duration::from_millis(800)).await;
    assert!(
        !m.log.iter().any(|s| s == WATCHDOG),
        "pinged another process's watchdog: {:#?}",
        m.log
    );
}

/// "retry in N s" out of a `STATUS=` line: the rest of the line and N.
fn countdown(msg: &str) -> Option<(&str, u64)> {
    let line = msg.strip_prefix("STATUS=")?.trim_end();
    let (what, secs) = line.rsplit_once(", retry in ")?;
    Some((what, secs.strip_suffix(" s")?.parse().ok()?))
}

/// While main_server is down the line counts down to the next attempt, so
/// it is refreshed without any change of state. (The refresh is armed only
/// then: an idle daemon keeps no status timer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_countdown_is_refreshed_while_main_server_is_down() {
    let h = dev_server().await;
    h.stop_listener().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tool("alpha", "v1"));
    let mut agent = ws.agent(&h.url());
    // Full jitter: each wait is random in [0, 20 s]; most are long enough
    // to count down.
    agent.backoff_initial = "20s".into();
    agent.backoff_max = "20s".into();
    let config = ws.write_config(&agent);
    let mut m = Manager::new();
    // The watchdog is not ours: no pings among the lines.
    let _sidecar = spawn_notified(&config, &m.path, Some(1));

    let first = m
        .until("a countdown of 3 s or more", |s| {
            countdown(s).is_some_and(|(_, n)| n >= 3)
        })
        .await;
    let (what, n) = countdown(&first).unwrap();
    let next = m
        .until("the next status line", |s| s.starts_with("STATUS="))
        .await;
    let (next_what, next_n) =
        countdown(&next).unwrap_or_else(|| panic!("not a countdown: {next:?} after {first:?}"));
    assert_eq!(next_what, what, "{:#?}", m.log);
    assert!(next_n < n, "{:#?}", m.log);
}
