//! The stdio MCP server as a process of the sidecar: killed, it is started
//! again while its tools stay registered; the sidecar's SIGTERM stops it, and
//! the sidecar's own death by SIGKILL takes it along (the real binary, for
//! signals); and it never gets systemd's variables, which speak for the
//! sidecar alone (read from `/proc/PID/environ`, the stand-in has no tool
//! that shows its environment).

use std::time::Duration;

use neko_sidecar::devserver::DevServerHandle;
use neko_sidecar::mcp::Phase;
use rustix::process::{Pid, Signal, kill_process};
use serde_json::json;
use tokio::process::Command;

use crate::support::daemon::{Sidecar, run_command};
use crate::support::mcp::*;
use crate::support::notify::Manager;
use crate::support::{BIN, WAIT, Workspace, dev_server, process_gone, wait_until};

/// Scheduling slack on top of a deadline, on a busy 2-core machine.
const MARGIN: Duration = Duration::from_millis(1500);

fn kill(pid: u32, sig: Signal) {
    let pid = Pid::from_raw(pid as i32).expect("a positive pid");
    kill_process(pid, sig).expect("signalling the MCP server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_started_again_and_its_tools_never_leave_main_server() {
    let rig = Rig::start(&stdio_server("dev", &[], "")).await;
    let all = prefixed("dev_", &DEV_TOOLS);
    wait_ours(&rig.h, &all).await;
    let first = pid_by_tool(&rig.h, "dev_").await;
    assert_eq!(rig.status("dev").pid, Some(first));

    kill(first, Signal::KILL);
    let s = rig
        .wait_server("dev", "a new process, ready", |s| {
            s.phase == Phase::Ready && s.pid.is_some_and(|p| p != first)
        })
        .await;
    assert!(s.restarts >= 1, "{s:#?}");
    // Panics unless a call is answered again within the wait.
    eventually("a call answered again", || async {
        echoed(&rig.call("dev_echo", json!({"text": "back"})).await, "back")
    })
    .await;
    assert_eq!(pid_by_tool(&rig.h, "dev_").await, s.pid.unwrap());

    wait_ours(&rig.h, &all).await;
    assert_eq!(removals(&rig.h, &all), vec![], "no tool was taken off");
    assert!(process_gone(first));
}

/// Regression: when the session ended before the process did (its stdout
/// closed first), the session task polled its finished end again and
/// panicked ("`async fn` resumed after completion"): the server was never
/// started again and stayed "ready" with a dead session. Here the direct
/// child (`sh`) outlives the stand-in with its stdout closed, so the session
/// always ends first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_its_stdout_but_keeps_running_is_stopped_and_started_again() {
    let argv = ["sh", "-c", "\"$0\" dev-mcp; exec sleep 60 >/dev/null", BIN];
    let rig = Rig::start(&format!(
        "[[mcp_server]]\nname = \"dev\"\ncommand = {argv:?}\n"
    ))
    .await;
    let all = prefixed("dev_", &DEV_TOOLS);
    wait_ours(&rig.h, &all).await;
    let stand_in = pid_by_tool(&rig.h, "dev_").await;
    let server = rig.status("dev").pid.unwrap();
    assert_eq!(parent_of(stand_in), server);

    // The stand-in goes; `sh` stays, its stdout no longer the session's.
    kill(stand_in, Signal::KILL);
    let s = rig
        .wait_server("dev", "a new process, ready", |s| {
            s.phase == Phase::Ready && s.pid.is_some_and(|p| p != server)
        })
        .await;
    assert!(s.restarts >= 1, "{s:#?}");
    assert!(
        wait_until(WAIT, || process_gone(server)).await,
        "the sidecar stopped the old process"
    );
    eventually("a call answered again", || async {
        echoed(&rig.call("dev_echo", json!({"text": "back"})).await, "back")
    })
    .await;
    assert_eq!(removals(&rig.h, &all), vec![], "no tool was taken off");
}

/// Runs `cmd` (the real binary on a [`deployment`]) and waits until the
/// server's tools are registered; returns the sidecar and the stand-in's
/// pid (from its `pid` tool).
async fn spawn_ready(h: &DevServerHandle, cmd: Command) -> (Sidecar, u32) {
    let sidecar = Sidecar::spawn_command(cmd);
    wait_ours(h, &prefixed("dev_", &DEV_TOOLS)).await;
    let pid = pid_by_tool(h, "dev_").await;
    (sidecar, pid)
}

/// A workspace whose one manifest is `manifest`, and the command that runs
/// the real binary on it.
fn deployment(h: &DevServerHandle, manifest: &str) -> (Workspace, Command) {
    let ws = Workspace::new();
    ws.write_tool("mcp.toml", manifest);
    let config = ws.write_config(&fast_agent(&ws, &h.url()));
    let cmd = run_command(&config);
    (ws, cmd)
}

/// `dev`: a server that neither exits when its stdin closes nor on SIGTERM,
/// as some do. `sh` (the sidecar's child) runs the stand-in, and when that
/// has left (at the end of its stdin) becomes a `sleep` that ignores
/// SIGTERM: only the sidecar's SIGKILL, or the kernel's at the sidecar's
/// death, ends it before the tests do.
fn stubborn_server() -> String {
    let argv = [
        "sh",
        "-c",
        "\"$0\" dev-mcp; trap '' TERM; exec sleep 60",
        BIN,
    ];
    format!("[[mcp_server]]\nname = \"dev\"\ncommand = {argv:?}\n")
}

/// The parent of `pid`, from /proc.
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a running process");
    let (_, rest) = stat.rsplit_once(')').expect("a stat line");
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("a parent pid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_sidecar_and_leaves_no_server_process() {
    let h = dev_server().await;
    let (_ws, cmd) = deployment(&h, &stdio_server("dev", &[], ""));
    let (mut sidecar, pid) = spawn_ready(&h, cmd).await;

    sidecar.signal(Signal::TERM);
    // `[shutdown] deadline` is 2 s (AgentToml).
    let status = sidecar.exit_within(Duration::from_secs(2) + MARGIN).await;
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());
    assert!(
        process_gone(pid),
        "the MCP server {pid} outlived the sidecar"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_kills_a_server_that_ignores_its_stdin_and_sigterm_by_the_deadline() {
    let h = dev_server().await;
    let (_ws, cmd) = deployment(&h, &stubborn_server());
    let (mut sidecar, stand_in) = spawn_ready(&h, cmd).await;
    let server = parent_of(stand_in);

    sidecar.signal(Signal::TERM);
    let status = sidecar.exit_within(Duration::from_secs(2) + MARGIN).await;
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());
    for pid in [server, stand_in] {
        assert!(
            process_gone(pid),
            "{pid} outlived the sidecar: {:?}\n{}",
            std::fs::read_to_string(format!("/proc/{pid}/stat")),
            sidecar.stderr().join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_killed_by_sigkill_takes_its_server_process_along() {
    let h = dev_server().await;
    let (_ws, cmd) = deployment(&h, &stubborn_server());
    let (mut sidecar, stand_in) = spawn_ready(&h, cmd).await;
    let server = parent_of(stand_in);

    sidecar.kill().await;
    // The kernel's SIGKILL at the sidecar's death (PR_SET_PDEATHSIG): the
    // server would otherwise sleep on for a minute.
    assert!(
        wait_until(WAIT, || process_gone(server) && process_gone(stand_in)).await,
        "the MCP server {server} outlived the sidecar killed by SIGKILL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_gets_none_of_systemds_variables() {
    let h = dev_server().await;
    let (_ws, mut cmd) = deployment(
        &h,
        &stdio_server("dev", &[], "env = { FROM_MANIFEST = \"set\" }"),
    );
    // systemd's end of the socket, read as fast as the sidecar writes, so
    // that its notifications never wait on a full queue.
    let mut manager = Manager::new();
    cmd.env("NOTIFY_SOCKET", &manager.path)
        .env("WATCHDOG_USEC", "400000")
        .env("NEKO_SIDECAR_TEST_INHERITED", "yes");
    let drain = tokio::spawn(async move { while manager.next(WAIT).await.is_some() {} });
    let (mut sidecar, pid) = spawn_ready(&h, cmd).await;

    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("reading its environment");
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    // What it should get, it gets: the sidecar's environment and the manifest's.
    assert!(
        vars.iter().any(|v| v == "NEKO_SIDECAR_TEST_INHERITED=yes"),
        "{vars:#?}"
    );
    assert!(vars.iter().any(|v| v == "FROM_MANIFEST=set"), "{vars:#?}");
    for var in ["NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID="] {
        assert!(
            !vars.iter().any(|v| v.starts_with(var)),
            "{var} in {vars:#?}"
        );
    }

    sidecar.kill().await;
    drain.abort();
}
