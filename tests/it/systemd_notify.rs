//! The notify protocol as systemd sees it: a datagram socket bound in a
//! tempdir stands in for `NOTIFY_SOCKET`, so these tests never touch the
//! process environment (tests run in parallel threads).

use std::time::{Duration, Instant};

use neko_sidecar::systemd::{Heartbeat, Notifier};
use tokio_util::sync::CancellationToken;

use crate::support::notify::Manager;

#[tokio::test]
async fn messages_arrive_in_order_with_the_protocol_keys() {
    let mut m = Manager::new();
    let n = Notifier::with_socket(&m.path).unwrap();
    assert!(n.is_enabled());
    n.status("loading manifests").unwrap();
    n.ready().unwrap();
    n.status("12/12 tools registered").unwrap();
    n.reloading().unwrap();
    n.ready().unwrap();
    n.stopping().unwrap();

    assert_eq!(m.expect().await, "STATUS=loading manifests\n");
    assert_eq!(m.expect().await, "READY=1\n");
    assert_eq!(m.expect().await, "STATUS=12/12 tools registered\n");

    let reloading = m.expect().await;
    let lines: Vec<&str> = reloading.lines().collect();
    assert_eq!(lines.len(), 2, "{reloading:?}");
    assert_eq!(lines[0], "RELOADING=1");
    let usec: u64 = lines[1]
        .strip_prefix("MONOTONIC_USEC=")
        .unwrap_or_else(|| panic!("{reloading:?}"))
        .parse()
        .unwrap();
    // CLOCK_MONOTONIC counts from boot: positive, and far below wall time
    // since the epoch (which would be the bug of sending the wrong clock).
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(usec > 0 && usec < wall / 2, "{usec}");

    assert_eq!(m.expect().await, "READY=1\n");
    assert_eq!(m.expect().await, "STOPPING=1\n");
}

#[tokio::test]
async fn a_status_line_cannot_smuggle_a_second_key() {
    let mut m = Manager::new();
    let n = Notifier::with_socket(&m.path).unwrap();
    n.status("main_server unreachable\nREADY=1").unwrap();
    assert_eq!(m.expect().await, "STATUS=main_server unreachable READY=1\n");
}

#[tokio::test]
async fn a_missing_socket_is_an_error_the_caller_can_log() {
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::with_socket(dir.path().join("nobody-listens")).unwrap();
    let e = n.ready().unwrap_err().to_string();
    assert!(e.contains("cannot send `READY=1`"), "{e}");
}

#[tokio::test]
async fn no_watchdog_is_run_unless_one_is_configured() {
    let m = Manager::new();
    let n = Notifier::with_socket(&m.path).unwrap();
    assert!(n.watchdog(Heartbeat::new()).is_none());
    let w = n
        .with_watchdog(Duration::from_secs(30))
        .watchdog(Heartbeat::new())
        .unwrap();
    assert_eq!(w.ping_every(), Duration::from_secs(15));
    assert_eq!(w.stale_after(), Duration::from_secs(30));
}

#[tokio::test]
async fn the_watchdog_pings_at_half_the_interval_while_the_loop_beats_and_stops_when_it_wedges() {
    let mut m = Manager::new();
    let interval = Duration::from_millis(400);
    let heartbeat = Heartbeat::new();
    let watchdog = Notifier::with_socket(&m.path)
        .unwrap()
        .with_watchdog(interval)
        .watchdog(heartbeat.clone())
        .unwrap();
    assert_eq!(watchdog.ping_every(), Duration::from_millis(200));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(watchdog.run(shutdown.clone()));

    // Before the loop's first beat nothing proves it alive: no ping.
    assert_eq!(m.next(Duration::from_millis(700)).await, None);

    // A loop beating every 50 ms: pings every 200 ms. Over 2 s that is
    // about 10; generous bounds absorb a slow, shared CI machine.
    let beating = CancellationToken::new();
    let beater = {
        let heartbeat = heartbeat.clone();
        let beating = beating.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_millis(50));
            while !beating.is_cancelled() {
                heartbeat.beat();
                t.tick().await;
            }
        })
    };
    let window = Duration::from_secs(2);
    let start = Instant::now();
    let mut pings = 0;
    while let Some(left) = window.checked_sub(start.elapsed()) {
        match m.next(left).await {
            Some(msg) => {
                assert_eq!(msg, "WATCHDOG=1\n");
                pings += 1;
            }
            None => break,
        }
    }
    assert!((5..=14).contains(&pings), "{pings} pings in {window:?}");

    // The loop wedges: pings stop once the last beat is older than the
    // interval, so at most a few more arrive, then silence.
    beating.cancel();
    beater.await.unwrap();
    let mut after = 0;
    while m.next(Duration::from_millis(1200)).await.is_some() {
        after += 1;
        assert!(after <= 4, "pings go on after the loop stopped beating");
    }

    // The loop comes back: so do the pings.
    heartbeat.beat();
    assert_eq!(
        m.next(Duration::from_secs(5)).await.as_deref(),
        Some("WATCHDOG=1\n")
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the watchdog ends at shutdown")
        .unwrap();
}
