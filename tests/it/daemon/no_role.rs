//! The daemon against a main_server that has no role at all yet
//! (CONTRACT.md: a global register then answers `ok:false` with empty
//! `failed_roles` and records nothing): the tools wait for a role, the
//! daemon only polls, and the first role that appears gets every global
//! tool. The daemon runs in-process, to read its status.

use std::time::{Duration, SystemTime};

use neko_sidecar::daemon::systemd_status;
use neko_sidecar::devserver::DevServer;
use neko_sidecar::registration::ToolState;

use crate::support::daemon::{InProcess, our_names, tools, wait_holds};
use crate::support::{Workspace, dev_server_with, wait_stand_in, wait_status};

/// `AgentToml`'s poll interval.
const POLL: Duration = Duration::from_millis(150);
/// Idle GETs to watch before judging the daemon's pace.
const IDLE_POLLS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_tools_wait_for_any_role_polling_quietly_then_register_on_the_first() {
    let h = dev_server_with(DevServer::builder().roles(Vec::<String>::new())).await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha", "beta"], "v1"));
    let d = InProcess::start(&ws.write_config(&ws.agent(&h.url()))).await;

    // (a) Nothing to register on: both tools wait for any role.
    let waiting = ToolState::WaitingForRole { role: None };
    wait_status(
        &d.daemon().registration,
        "both tools waiting for any role",
        |s| s.state("alpha") == Some(&waiting) && s.state("beta") == Some(&waiting),
    )
    .await;
    let snap = d.daemon().registration.snapshot();
    assert_eq!(
        systemd_status::summary(&snap, SystemTime::now()),
        "0/2 tools registered, 2 waiting for a role"
    );

    // Watch a few polls: the daemon must not try to register, nor ask
    // faster than its poll interval.
    let mark = h.requests().len();
    wait_stand_in(&h, "a few more polls", |h| {
        h.requests().len() >= mark + IDLE_POLLS
    })
    .await;
    let log = h.requests();
    assert!(
        log.iter()
            .all(|r| r.method == "GET" && r.path == "/api/tools"),
        "only GETs while there is no role: {log:#?}"
    );
    let idle = &log[mark..];
    for pair in idle.windows(2) {
        let gap = pair[1].at_unix_ms.saturating_sub(pair[0].at_unix_ms);
        // The poll is timed from the start of a pass; half of it leaves
        // room for a slow pass without letting a busy loop through.
        assert!(
            u128::from(gap) >= POLL.as_millis() / 2,
            "GETs {gap} ms apart: {idle:#?}"
        );
    }
    assert!(h.ledger().is_empty());
    let counts = d.daemon().registration.snapshot().registrations;
    assert_eq!((counts.accepted, counts.failed), (0, 0));

    // (b) A role appears: every global tool is registered on it.
    assert!(h.add_role("Lanlan"));
    wait_holds(&h, &[("alpha", "v1"), ("beta", "v1")]).await;
    assert_eq!(
        our_names(&h.registry_snapshot(), "Lanlan"),
        ["alpha", "beta"]
    );
    wait_status(&d.daemon().registration, "both tools registered", |s| {
        s.all_registered() && s.converged
    })
    .await;
    d.stop().await;
}
