//! The registration engine at scale: 1,000 tools from cold, and back after
//! a main_server restart, against the in-process stand-in. How long it takes
//! is a benchmark (BENCHMARKS.md), not an assertion here: a timed test fails
//! on a loaded machine without anything being wrong.

use crate::support::engine::*;
use crate::support::{count_requests, dev_server, refused_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tools_register_from_cold_and_after_a_restart() {
    let h = dev_server().await;
    // Default max_in_flight (16) and backoff.
    let cfg = agent_config(&h.url(), "poll_interval = \"300ms\"\n");
    let d = many(1000);
    let run = start(&cfg, d.clone(), url_for(refused_port(), "tok"));
    // Waiting on the engine's status (confirmed by its own GET) rather than
    // re-reading the stand-in's whole registry at each of its 1,000 changes.
    run.wait("registered", |s| registered(s, &d)).await;
    assert!(all_present(&h, &d, &run.url_for));
    let s = run
        .wait("converged", |s| s.converged && registered(s, &d))
        .await;
    assert_eq!(s.tools.len(), 1000);
    assert_eq!(
        count_requests(&h.requests(), "POST", "/api/tools/register"),
        1000
    );

    let restarted_at = std::time::SystemTime::now();
    h.restart();
    // Registered again means confirmed by a GET after the restart.
    run.wait("registered again", |s| {
        registered(s, &d)
            && s.tools
                .values()
                .all(|t| t.last_registered.is_some_and(|at| at >= restarted_at))
    })
    .await;
    assert!(all_present(&h, &d, &run.url_for));
    // Each tool registered once more, no more: the restart cost one round.
    assert_eq!(
        count_requests(&h.requests(), "POST", "/api/tools/register"),
        2000
    );
    run.stop().await;
}
