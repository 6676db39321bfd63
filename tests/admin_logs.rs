//! The log volume of an outage (issue 7): main_server down for 30 retries
//! produces a bounded number of lines at info level and above, however
//! many retries. Each retry is still visible at debug level.
//!
//! The engine runs on a current-thread runtime inside a scoped tracing
//! subscriber that writes JSON lines into a buffer, so every event of the
//! engine lands in this test's buffer and nowhere else.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use neko_sidecar::client::Client;
use neko_sidecar::config;
use neko_sidecar::desired::DesiredState;
use neko_sidecar::engine::{Engine, UrlFor};
use neko_sidecar::manifest::{LoadContext, parse_manifest};
use neko_sidecar::registration::RegistrationStore;
use serde_json::Value as Json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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

fn desired(n: usize) -> DesiredState {
    let text: String = (0..n)
        .map(|i| {
            format!(
                "[[tool]]\nname = \"t{i}\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/t\" }}\n"
            )
        })
        .collect();
    let f = parse_manifest(Path::new("tools.toml"), &text, &LoadContext::default());
    assert!(!f.has_errors(), "{:?}", f.diagnostics);
    DesiredState::assemble("plugin:logs", &[f]).0
}

#[test]
fn thirty_retries_against_a_dead_main_server_log_a_bounded_number_of_lines() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let port = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    });
    let text = format!(
        "source = \"plugin:logs\"\n[main_server]\nurl = \"http://127.0.0.1:{port}\"\nrequest_timeout = \"500ms\"\n[registration]\nbackoff_initial = \"1ms\"\nbackoff_max = \"5ms\"\n"
    );
    let (cfg, diags) = config::parse(Path::new("/tmp/agent.toml"), &text);
    let cfg = cfg.unwrap_or_else(|| panic!("{diags:#?}"));

    let buf = Buffer::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let status = Arc::new(RegistrationStore::new());
    let attempts = tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let url_for: UrlFor = Arc::new(|n: &str| format!("http://127.0.0.1:1/cb/t/{n}"));
            let mut engine = Engine::new(
                &cfg,
                Client::new(&cfg.main_server).unwrap(),
                url_for,
                status.clone(),
            )
            .unwrap();
            let (_tx, rx) = watch::channel(Arc::new(desired(50)));
            let stop = CancellationToken::new();
            let token = stop.clone();
            let task = tokio::spawn(async move { engine.run(rx, token).await });
            let r = status
                .wait_until(Duration::from_secs(20), |s| {
                    s.main_server.failed_attempts >= 30
                })
                .await;
            stop.cancel();
            task.await.unwrap();
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
