//! The log volume of an outage (issue 7): main_server down for 30 retries
//! produces a bounded number of lines at info level and above, however
//! many retries. Each retry is still visible at debug level.
//!
//! The engine runs on a current-thread runtime inside a scoped tracing
//! subscriber that writes JSON lines into a buffer, so every event of the
//! engine lands in this test's buffer and nowhere else.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value as Json;

use crate::support::engine::{agent_config_with, many, start, url_for};
use crate::support::refused_port;

/// A writer appending to a shared buffer.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn thirty_retries_against_a_dead_main_server_log_a_bounded_number_of_lines() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cfg = agent_config_with(
        &format!("http://127.0.0.1:{}", refused_port()),
        "backoff_initial = \"1ms\"\nbackoff_max = \"5ms\"\n",
        "500ms",
    );

    let buf = Buffer::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    // The suite is one process: other tests run the engine's code on their
    // own threads meanwhile. While this test's subscriber is the only
    // dispatcher registered, tracing caches the interest of a callsite that
    // such a thread hits first as that thread's (none: never), for every
    // thread; with a second one registered, each event asks its own thread's
    // subscriber.
    let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let attempts = tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let run = start(&cfg, many(50), url_for(1, "t"));
            let r = run
                .status
                .wait_until(Duration::from_secs(20), |s| {
                    s.main_server.failed_attempts >= 30
                })
                .await;
            run.stop().await;
            r.unwrap_or_else(|s| panic!("only {} failed attempts", s.main_server.failed_attempts))
                .main_server
                .failed_attempts
        })
    });
    assert!(attempts >= 30);

    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let levels: Vec<String> = text
        .lines()
        .map(|l| {
            let v: Json = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            v["level"].as_str().unwrap().to_owned()
        })
        .collect();
    let loud: Vec<&str> = text
        .lines()
        .zip(&levels)
        .filter(|(_, l)| !matches!(l.as_str(), "DEBUG" | "TRACE"))
        .map(|(line, _)| line)
        .collect();
    // One warning when the outage starts; the reminder comes only after a
    // minute. 50 tools do not add a line each.
    assert!(
        !loud.is_empty() && loud.len() <= 3,
        "{} lines at info or above for {attempts} retries:\n{}",
        loud.len(),
        loud.join("\n")
    );
    assert!(
        loud[0].contains("cannot read main_server's tool list"),
        "{}",
        loud[0]
    );
    // The retries themselves are there for whoever turns on debug.
    let debug = levels.iter().filter(|l| *l == "DEBUG").count();
    assert!(debug >= 29, "{debug} debug lines for {attempts} retries");
}
