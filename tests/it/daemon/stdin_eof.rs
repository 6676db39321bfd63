//! `run --stop-on-stdin-eof`: the end of stdin is a stop request, on the
//! path SIGTERM takes (one `clear`, exit 0). Its end comes either from the
//! parent closing the pipe (N.E.K.O's plugin, in its shutdown hook) or from
//! the parent dying (the plugin's process killed outright: no hook runs, and
//! N.E.K.O ends no plugin's children), so both are shown, with a real
//! process holding the pipe in the second. Not Unix-only: under Wine the
//! sidecar reads an anonymous pipe, whose read fails as broken once the
//! last write handle is gone.

use std::process::Stdio;
use std::time::Duration;

use neko_sidecar::devserver::DevServerHandle;
use tokio::process::Command;

use crate::support::daemon::*;
use crate::support::{BIN, Workspace, dev_server};

/// Scheduling slack on top of the 2 s shutdown deadline (Wine is slower).
const WITHIN: Duration = Duration::from_secs(if cfg!(windows) { 10 } else { 4 });

/// The sidecar still runs and has not taken the end of stdin as a stop
/// request (yet).
fn assert_still_running(sidecar: &mut Sidecar, why: &str) {
    assert!(
        !sidecar.has_exited(),
        "{why}: it exited: {:#?}",
        sidecar.stderr()
    );
    assert!(
        sidecar.stderr().iter().all(|l| !l.contains("stdin closed")),
        "{why}: {:#?}",
        sidecar.stderr()
    );
}

/// A daemon with `alpha` and `beta` registered, whose stdin is the read end
/// of a pipe; the write end is returned.
async fn registered_on_pipe() -> (Workspace, DevServerHandle, Sidecar, std::io::PipeWriter) {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha", "beta"], "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let mut cmd = run_command(&config);
    cmd.arg("--stop-on-stdin-eof");
    let sidecar = Sidecar::spawn_with_stdin(cmd, Stdio::from(reader));
    wait_holds(&h, &[("alpha", "v1"), ("beta", "v1")]).await;
    (ws, h, sidecar, writer)
}

/// What a clean stop leaves: exit 0, one `clear` of our source after
/// `before` requests, none of our tools in any role, built-ins kept, and
/// the log saying why.
async fn stopped_cleanly(h: &DevServerHandle, sidecar: &mut Sidecar, before: usize) {
    let status = sidecar.exit_within(WITHIN).await;
    assert_eq!(status.code(), Some(0), "{:#?}", sidecar.stderr());
    cleared_once(h, before);
    assert!(
        sidecar
            .stderr()
            .iter()
            .any(|l| l.contains("stdin closed") && l.contains("shutting down")),
        "{:#?}",
        sidecar.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_stdin_clears_our_tools_and_exits_0() {
    let (_ws, h, mut sidecar, writer) = registered_on_pipe().await;
    // Data before the end is read and ignored: only the end stops it.
    {
        use std::io::Write as _;
        let mut w = &writer;
        w.write_all(b"anything\n").unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_still_running(&mut sidecar, "data is not an end");
    let before = h.requests().len();
    drop(writer);
    stopped_cleanly(&h, &mut sidecar, before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_death_of_the_process_holding_the_pipe_stops_it_too() {
    let (_ws, h, mut sidecar, writer) = registered_on_pipe().await;
    // The parent: a long-running process (a second stand-in, on a port of
    // its own) that holds the write end as its stdout; ours is closed, so
    // the parent's is the last one, as for the plugin's process.
    let mut parent = Command::new(BIN);
    parent
        .args(["dev-server", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::null())
        .kill_on_drop(true);
    clean_env(&mut parent);
    let mut parent_child = parent.spawn().expect("spawning the parent");
    drop(parent);
    // Still running while the parent lives.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_still_running(&mut sidecar, "still running");
    let before = h.requests().len();
    parent_child.start_kill().expect("killing the parent");
    let _ = parent_child.wait().await;
    stopped_cleanly(&h, &mut sidecar, before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_the_end_of_stdin_changes_nothing() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha"], "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    // stdin is /dev/null (NUL): at its end from the start.
    let mut sidecar = Sidecar::spawn(&config);
    wait_holds(&h, &[("alpha", "v1")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_still_running(&mut sidecar, "still running");
    sidecar.kill().await;
}

/// The parent that dies held the read end of the sidecar's stderr too (the
/// plugin relays the sidecar's log): every log line then fails with a
/// broken pipe, and the stop must happen all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_that_also_read_its_log_dies_and_it_still_stops_cleanly() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha"], "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    let (stdin_r, stdin_w) = std::io::pipe().expect("a pipe");
    let (log_r, log_w) = std::io::pipe().expect("a pipe");
    let mut cmd = run_command(&config);
    cmd.arg("--stop-on-stdin-eof")
        .stdin(Stdio::from(stdin_r))
        .stdout(Stdio::null())
        .stderr(Stdio::from(log_w))
        .kill_on_drop(true);
    let mut sidecar = cmd.spawn().expect("spawning neko-sidecar");
    drop(cmd);
    let mut parent = Command::new(BIN);
    parent
        .args(["dev-server", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::from(log_r))
        .stdout(Stdio::from(stdin_w))
        .stderr(Stdio::null())
        .kill_on_drop(true);
    clean_env(&mut parent);
    let mut parent_child = parent.spawn().expect("spawning the parent");
    drop(parent);
    wait_holds(&h, &[("alpha", "v1")]).await;
    let before = h.requests().len();
    parent_child.start_kill().expect("killing the parent");
    let _ = parent_child.wait().await;
    let status = tokio::time::timeout(WITHIN, sidecar.wait())
        .await
        .expect("the sidecar exits by itself")
        .expect("waiting for it");
    assert_eq!(status.code(), Some(0));
    cleared_once(&h, before);
}
