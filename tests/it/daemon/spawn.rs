//! The real binary's process handling on Linux (issue 47): started by a
//! parent that ignores SIGCHLD (the setting survives `exec`), its handlers
//! still answer; killed outright (`kill -9`), it leaves no process of a
//! handler's group behind, the handler's own children included (the
//! guardian, `src/os/linux_guard.rs`).

use std::time::Duration;

use neko_sidecar::devserver::DevServerHandle;
use rustix::process::Signal;
use serde_json::json;

use crate::support::daemon::*;
use crate::support::{WAIT, Workspace, call, dev_server, invoke, wait_until};

/// Waits until a role of `h` holds all of `names` of ours.
async fn registered(h: &DevServerHandle, names: &[&str]) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
    assert!(
        h.wait_for(WAIT, |h| {
            let snap = h.registry_snapshot();
            snap.roles
                .iter()
                .any(|r| our_names(&snap, &r.role) == names)
        })
        .await,
        "{names:?} never registered"
    );
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

#[tokio::test]
async fn handlers_answer_under_a_parent_that_ignores_sigchld() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha", "beta"], "v1"));
    let config = ws.write_config(&ws.agent(&h.url()));
    // What starts the daemon ignores SIGCHLD, and the daemon inherits it
    // (a shell's `trap '' CHLD` would not do: the shell keeps its own
    // handler, which `exec` resets).
    let mut cmd = run_command(&config);
    // SAFETY: between fork and exec only `signal`, async-signal-safe, on
    // the child's own disposition.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    let sidecar = Sidecar::spawn_command(cmd);
    registered(&h, &["alpha", "beta"]).await;
    for name in ["alpha", "beta", "alpha"] {
        let a = invoke(&h, call(name, json!({}))).await;
        assert!(!a.is_error, "{name}: {}", a.model_text);
        assert_eq!(a.model_text, format!("{name}:v1"));
    }
    // The daemon put it back at start.
    let status = std::fs::read_to_string(format!("/proc/{}/status", sidecar.pid())).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap()
        .trim();
    let mask = u64::from_str_radix(ignored, 16).unwrap();
    assert_eq!(
        mask & (1 << (17 - 1)),
        0,
        "SIGCHLD is still ignored: {ignored}"
    );
}

#[tokio::test]
async fn a_sidecar_killed_outright_leaves_no_process_of_a_handler_s_group() {
    let h = dev_server().await;
    let ws = Workspace::new();
    let pids = ws.root.join("pids");
    ws.write_tool(
        "hold.toml",
        &format!(
            "[[tool]]\nname = \"hold\"\ndescription = \"starts a job and waits\"\ntimeout_seconds = 60\n\
             handler = {{ type = \"exec\", command = [\"sh\", \"-c\", \"sleep 300 & echo $$ $! > {}; wait\"] }}\n",
            pids.display()
        ),
    );
    let mut sidecar = Sidecar::spawn(&ws.write_config(&ws.agent(&h.url())));
    registered(&h, &["hold"]).await;
    let call = {
        let h = h.clone();
        tokio::spawn(async move {
            h.invoke(serde_json::from_value(json!({"name": "hold", "arguments": {}})).unwrap())
                .await
        })
    };
    let read = || -> Option<(i32, i32)> {
        let text = std::fs::read_to_string(&pids).ok()?;
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().ok());
        Some((it.next()??, it.next()??))
    };
    assert!(
        wait_until(WAIT, || read().is_some()).await,
        "the handler never started"
    );
    let (root, job) = read().unwrap();
    assert!(alive(root) && alive(job));
    sidecar.signal(Signal::KILL);
    let _ = sidecar.exit_within(WAIT).await;
    assert!(
        wait_until(Duration::from_secs(10), || !alive(root) && !alive(job)).await,
        "left running: root {root} {}, its job {job} {}",
        alive(root),
        alive(job)
    );
    call.abort();
}
