//! The chaos test's rig (`under_chaos.rs`): the seed, a panic recorder, the
//! workspace (agent config, manifests, the exec handler), the in-process
//! echo handler, the faults carried out on the stand-in, and the
//! convergence check against the stand-in's full registry.
//!
//! The schedule lives in `plan`, the tools and their expected registry
//! entries in `manifests`, the model's calls in `calls`.

pub mod calls;
pub mod manifests;
pub mod plan;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use neko_sidecar::desired::DesiredState;
use neko_sidecar::devserver::{DevServerHandle, RegistrySnapshot, Scope};
use serde_json::{Value as Json_, json};
use tokio::sync::watch;

use super::{WAIT, serve_http, wait_until};
use manifests::{ECHO_SCRIPT, Expected, FILES, SOURCE, render};
use plan::{Action, FLAKY_ROLE};

/// The name of the chaos runtime's threads, whose panics count.
pub const THREADS: &str = "chaos-runtime";

/// The seed: `NEKO_CHAOS_SEED` when set, else a fresh random one.
pub fn seed() -> u64 {
    match std::env::var("NEKO_CHAOS_SEED") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("NEKO_CHAOS_SEED={s:?} is not a u64: {e}")),
        _ => fastrand::u64(..),
    }
}

/// How long the faults go on: `NEKO_CHAOS_SECS` (for longer runs by hand),
/// 40 s by default.
pub fn chaos_length() -> Duration {
    let secs = std::env::var("NEKO_CHAOS_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(40);
    Duration::from_secs(secs.max(1))
}

/// Ends the process if the test is still running after `limit`: a hung
/// run must fail with its seed, not wait forever. A plain thread, so that
/// it fires even when the async runtime is wedged.
pub fn hang_guard(seed: u64, limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("chaos: seed {seed}: still running after {limit:?}: hung; aborting");
        std::process::exit(101);
    });
}

/// Every panic in this test process, whichever thread or task it hit (a
/// panicking tokio task is caught by the runtime and would go unnoticed),
/// except on the threads of the suite's other tests.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Whether a panic on this thread is another test's: the suite is one
/// process, and its other tests run on their own test threads (named after
/// the test) and on their runtimes' workers (tokio's default name), while
/// the chaos test runs on its own thread and on [`THREADS`].
fn another_tests_thread(thread: &str) -> bool {
    thread == "tokio-runtime-worker" || (thread.contains("::") && !thread.contains("chaos"))
}

/// Installs the recording hook (once), keeping the default report.
pub fn record_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current()
                .name()
                .unwrap_or("<unnamed>")
                .to_owned();
            if !another_tests_thread(&thread)
                && let Ok(mut p) = PANICS.lock()
            {
                p.push(format!("thread {thread}: {info}"));
            }
            previous(info);
        }));
    });
}

pub fn panics() -> Vec<String> {
    PANICS.lock().map(|p| p.clone()).unwrap_or_default()
}

/// Logs to the test's output when `NEKO_CHAOS_LOG` holds a filter (e.g.
/// `neko_sidecar=debug`).
pub fn maybe_log() {
    if let Ok(filter) = std::env::var("NEKO_CHAOS_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// The http handler every http tool points at: echoes the tool, `q` and
/// the call id; `mode` makes it lag (300 ms), hang past the timeout (4 s)
/// or report a failure.
pub async fn echo_handler() -> String {
    async fn echo(Json(body): Json<Json_>) -> Json<Json_> {
        let args = &body["arguments"];
        match args["mode"].as_str() {
            Some("lag") => tokio::time::sleep(Duration::from_millis(300)).await,
            Some("slow") => tokio::time::sleep(Duration::from_secs(4)).await,
            Some("fail") => {
                return Json(json!({"output": null, "is_error": true, "error": "asked to fail"}));
            }
            _ => {}
        }
        Json(json!({
            "output": {"tool": body["name"], "q": args["q"], "call_id": body["call_id"]},
            "is_error": false,
        }))
    }
    let addr = serve_http(axum::Router::new().route("/echo", post(echo))).await;
    format!("http://{addr}/echo")
}

/// A workspace with `tools/` (the manifests), `handlers/echo.sh` and
/// `agent.toml`, and the generation of each file.
pub struct Workspace {
    pub ws: super::Workspace,
    pub handler_url: String,
    /// The generation last written to each file.
    pub written: Vec<u32>,
    /// The generation of each file's last good write: what must be in force.
    pub good: Vec<u32>,
    /// A file's last write, when it was good and the daemon may not have
    /// read it yet (see `edit`).
    unread_good: Vec<Option<u32>>,
    /// The daemon's desired state, once it runs (see `watch`).
    desired: Option<watch::Receiver<Arc<DesiredState>>>,
}

impl Workspace {
    pub fn new(handler_url: String) -> Self {
        let files = super::Workspace::new();
        std::fs::create_dir(files.root.join("handlers")).unwrap();
        std::fs::write(files.root.join("handlers/echo.sh"), ECHO_SCRIPT).unwrap();
        let ws = Self {
            ws: files,
            handler_url,
            written: vec![0; FILES.len()],
            good: vec![0; FILES.len()],
            unread_good: vec![None; FILES.len()],
            desired: None,
        };
        for file in 0..FILES.len() {
            ws.write_file(file, 0, None, false);
        }
        ws
    }

    fn manifest_path(&self, file: usize) -> PathBuf {
        self.ws.tool_path(&format!("{}.toml", FILES[file].name))
    }

    fn write_file(
        &self,
        file: usize,
        generation: u32,
        broken: Option<manifests::Breakage>,
        atomic: bool,
    ) {
        let text = render(file, generation, &self.handler_url, broken);
        let path = self.manifest_path(file);
        if atomic {
            let tmp = self
                .ws
                .tool_path(&format!(".{}.toml.tmp", FILES[file].name));
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        } else {
            std::fs::write(&path, text).unwrap();
        }
    }

    /// From now on, `edit` waits for the daemon behind `desired`.
    pub fn watch(&mut self, desired: watch::Receiver<Arc<DesiredState>>) {
        self.desired = Some(desired);
    }

    /// Writes the next generation of `file`, broken or not. A good write is
    /// read by the daemon before the next write of the same file: one the
    /// debounce folded into the next could never be the last good version
    /// the daemon keeps. (Late steps bunch up when a fault delays the
    /// schedule: a good and a broken edit of one file once landed 1 ms
    /// apart.)
    pub async fn edit(&mut self, file: usize, broken: Option<manifests::Breakage>, atomic: bool) {
        if let (Some(generation), Some(desired)) = (self.unread_good[file], &self.desired) {
            let read = || manifests::loaded(&desired.borrow(), file, generation);
            assert!(
                wait_until(WAIT, read).await,
                "the daemon never read generation {generation} of file {file}"
            );
        }
        let generation = self.written[file] + 1;
        self.write_file(file, generation, broken, atomic);
        self.written[file] = generation;
        self.unread_good[file] = None;
        if broken.is_none() {
            self.good[file] = generation;
            self.unread_good[file] = Some(generation);
        }
    }

    /// What main_server must hold now.
    pub fn expected(&self) -> BTreeMap<&'static str, Expected> {
        manifests::expected(&self.good)
    }

    /// The agent config: fast polls (100 ms), backoff 50 to 500 ms, a
    /// 500 ms request timeout, debounce 50 ms, admin endpoints off.
    pub fn config(&self, main_server: &str) -> PathBuf {
        let mut agent = self.ws.agent(main_server);
        agent.source = SOURCE.into();
        agent.request_timeout = "500ms".into();
        agent.poll_interval = "100ms".into();
        agent.backoff_initial = "50ms".into();
        agent.backoff_max = "500ms".into();
        agent.debounce = "50ms".into();
        agent.rescan_interval = "2s".into();
        agent.shutdown_deadline = "3s".into();
        self.ws.write_config(&agent)
    }
}

/// Every difference between the stand-in's registry and `expected`: a
/// tool missing from a role that should hold it, a stale description,
/// parameters or timeout, a wrong scope or callback URL, one of ours where
/// it should not be, a role missing. Empty when converged.
pub fn mismatches(
    snap: &RegistrySnapshot,
    expected: &BTreeMap<&'static str, Expected>,
    url_for: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    for role in ["小八", "Lanlan"] {
        let Some(tools) = snap.tools(role) else {
            out.push(format!("role {role} is missing"));
            continue;
        };
        for (name, e) in expected {
            if e.role.is_some_and(|r| r != role) {
                continue;
            }
            let Some(t) = tools.iter().find(|t| t.name == *name) else {
                out.push(format!("{role}: {name} is missing"));
                continue;
            };
            let scope = if e.role.is_some() {
                Scope::Role
            } else {
                Scope::Global
            };
            let url = url_for(name);
            if t.source != SOURCE
                || t.callback_url.as_deref() != Some(url.as_str())
                || t.description != e.description
                || t.parameters != e.parameters
                || t.timeout_seconds != e.timeout_seconds
                || t.scope != scope
            {
                out.push(format!(
                    "{role}: {name} differs: holds {:?}, {}, {}, {} s, {:?} from {} at {:?}; want {:?}, {}, {} s, {scope:?}",
                    t.description,
                    t.parameters,
                    t.callback_url.as_deref().unwrap_or("-"),
                    t.timeout_seconds,
                    t.scope,
                    t.source,
                    t.callback_url,
                    e.description,
                    e.parameters,
                    e.timeout_seconds
                ));
            }
        }
        for t in tools.iter().filter(|t| t.source == SOURCE) {
            let wanted_here = expected
                .get(t.name.as_str())
                .is_some_and(|e| e.role.is_none_or(|r| r == role));
            if !wanted_here {
                out.push(format!("{role}: {} is ours but not wanted there", t.name));
            }
        }
    }
    out
}

/// How removals and faults went, for the bounds checked at the end.
#[derive(Debug, Default)]
pub struct Effects {
    /// Steps that can take registered tools away (restart, down with
    /// forgetting, eviction, unregister, role gone), attempted.
    pub removals: u64,
    /// API requests of the test itself (evict, unregister) that failed
    /// because a fault was on at that moment.
    pub refused_by_fault: u64,
}

/// Carries out one step of the plan on the stand-in and the workspace.
/// Returns a short note of what happened.
pub async fn execute(
    action: &Action,
    h: &DevServerHandle,
    ws: &mut Workspace,
    http: &reqwest::Client,
    effects: &mut Effects,
) -> String {
    match action {
        Action::Restart => {
            h.restart();
            effects.removals += 1;
            "forgot everything".into()
        }
        Action::ListenerDown { forget } => {
            h.stop_listener().await;
            if *forget {
                h.restart();
                effects.removals += 1;
            }
            "down".into()
        }
        Action::ListenerUp => listener_up(h).await,
        Action::Evict => {
            effects.removals += 1;
            api(
                h,
                http,
                "/api/tools/clear",
                json!({"source": SOURCE, "role": null}),
                effects,
            )
            .await
        }
        Action::Unregister { tool } => {
            effects.removals += 1;
            api(
                h,
                http,
                "/api/tools/unregister",
                json!({"name": tool, "role": null}),
                effects,
            )
            .await
        }
        Action::StorageBlocked(on) => {
            h.set_storage_blocked(*on);
            String::new()
        }
        Action::FailNext { count, status } => {
            h.fail_next(
                *count,
                axum::http::StatusCode::from_u16(*status).expect("a valid status"),
            );
            String::new()
        }
        Action::Delay(d) => {
            h.set_delay(d.unwrap_or(Duration::ZERO));
            String::new()
        }
        Action::RoleSyncFails(on) => {
            h.fail_role_sync(FLAKY_ROLE, *on);
            String::new()
        }
        Action::RoleGone(gone) => {
            if *gone {
                effects.removals += 1;
                format!("removed: {}", h.remove_role(FLAKY_ROLE))
            } else {
                format!("added: {}", h.add_role(FLAKY_ROLE))
            }
        }
        Action::Edit {
            file,
            broken,
            atomic,
        } => {
            ws.edit(*file, *broken, *atomic).await;
            format!("generation {}", ws.written[*file])
        }
    }
}

/// Re-binds the stand-in's port. The port was ours a moment ago, but an
/// outgoing connection may hold it briefly: retry with a deadline.
async fn listener_up(h: &DevServerHandle) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match h.start_listener().await {
            Ok(()) => return "up".into(),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!("re-binding the stand-in: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot re-bind the stand-in: {e}"),
        }
    }
}

/// One request of the test itself to the tool API; faults apply to it too.
async fn api(
    h: &DevServerHandle,
    http: &reqwest::Client,
    path: &str,
    body: Json_,
    effects: &mut Effects,
) -> String {
    let r = http
        .post(format!("{}{path}", h.url()))
        .json(&body)
        .send()
        .await;
    match r {
        Ok(r) if r.status().is_success() => {
            let v: Json_ = r.json().await.unwrap_or(Json_::Null);
            format!("removed {}", v["removed"])
        }
        Ok(r) => {
            effects.refused_by_fault += 1;
            format!("refused: {}", r.status())
        }
        Err(e) => {
            effects.refused_by_fault += 1;
            format!("failed: {e}")
        }
    }
}

/// Switches every fault off and brings main_server up with every role.
pub async fn clear_faults(h: &DevServerHandle) {
    h.set_storage_blocked(false);
    h.fail_next(0, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    h.set_delay(Duration::ZERO);
    h.fail_role_sync(FLAKY_ROLE, false);
    h.add_role(FLAKY_ROLE);
    listener_up(h).await;
}
