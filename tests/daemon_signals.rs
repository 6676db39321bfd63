//! Signals and exit codes of the real binary (`neko-sidecar run`), and a
//! regression of the stand-in found by them.

mod daemon_support;

use std::time::Duration;

use daemon_support::*;

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
