//! The whole daemon: its agent config written into a [`Workspace`],
//! manifest text whose schema tells versions apart, what the stand-in holds
//! of ours, the real binary as a child process (killed when the test ends,
//! its stderr collected line by line), and the daemon in-process.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use neko_sidecar::config;
use neko_sidecar::daemon::{self, Daemon, DaemonOptions};
use neko_sidecar::devserver::{DevServerHandle, RegistrySnapshot, Tool};
#[cfg(unix)]
use rustix::process::{Pid, Signal};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{BIN, WAIT, Workspace, exec_tool, wait_stand_in};

pub const SOURCE: &str = "plugin:daemontest";

// ---------------------------------------------------------------------------
// Agent config and manifests

/// The agent config of a test: fast polls, short backoff, no admin
/// listener unless asked for (its fixed default port would clash between
/// tests).
#[derive(Debug, Clone)]
pub struct AgentToml {
    pub source: String,
    pub main_server: String,
    pub manifest_dirs: Vec<PathBuf>,
    pub request_timeout: String,
    pub callback_listen: String,
    pub poll_interval: String,
    pub backoff_initial: String,
    pub backoff_max: String,
    pub shutdown_deadline: String,
    pub debounce: String,
    pub rescan_interval: String,
    /// `[admin] listen`; empty turns the admin endpoints off.
    pub admin_listen: String,
}

impl AgentToml {
    pub fn new(main_server: &str, dirs: &[&Path]) -> Self {
        Self {
            source: SOURCE.into(),
            main_server: main_server.into(),
            manifest_dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
            request_timeout: "1s".into(),
            callback_listen: "127.0.0.1:0".into(),
            poll_interval: "150ms".into(),
            backoff_initial: "100ms".into(),
            backoff_max: "500ms".into(),
            shutdown_deadline: "2s".into(),
            debounce: "100ms".into(),
            rescan_interval: "30s".into(),
            admin_listen: String::new(),
        }
    }

    pub fn render(&self) -> String {
        let dirs: Vec<String> = self
            .manifest_dirs
            .iter()
            .map(|d| format!("{:?}", d.display().to_string()))
            .collect();
        format!(
            r#"source = "{source}"
manifest_dirs = [{dirs}]

[main_server]
url = "{url}"
request_timeout = "{request_timeout}"

[callback]
listen = "{listen}"

[registration]
poll_interval = "{poll}"
backoff_initial = "{b0}"
backoff_max = "{b1}"

[shutdown]
deadline = "{deadline}"

[admin]
listen = "{admin}"

[reload]
debounce = "{debounce}"
rescan_interval = "{rescan}"
"#,
            source = self.source,
            dirs = dirs.join(", "),
            url = self.main_server,
            request_timeout = self.request_timeout,
            listen = self.callback_listen,
            poll = self.poll_interval,
            b0 = self.backoff_initial,
            b1 = self.backoff_max,
            deadline = self.shutdown_deadline,
            debounce = self.debounce,
            rescan = self.rescan_interval,
            admin = self.admin_listen,
        )
    }
}

impl Workspace {
    /// The default agent config of this workspace, for `main_server`.
    pub fn agent(&self, main_server: &str) -> AgentToml {
        AgentToml::new(main_server, &[&self.tools])
    }

    /// Writes `agent.toml` and returns its path.
    pub fn write_config(&self, agent: &AgentToml) -> PathBuf {
        let path = self.root.join("agent.toml");
        std::fs::write(&path, agent.render()).unwrap();
        path
    }
}

/// One exec tool (`sh`, or `cmd` on Windows, answering `NAME:TAG`). `tag` is in the description
/// and is the one property of the schema, so the registry shows which
/// version main_server holds. It must be a TOML bare key.
pub fn tool(name: &str, tag: &str) -> String {
    let answer = if cfg!(windows) {
        format!("echo {name}:{tag}")
    } else {
        format!("cat >/dev/null; echo {name}:{tag}")
    };
    let shell: [&str; 2] = if cfg!(windows) {
        ["cmd", "/c"]
    } else {
        ["sh", "-c"]
    };
    let schema = format!(
        "\n[tool.parameters]\ntype = \"object\"\n\n[tool.parameters.properties.{tag}]\ntype = \"string\"\n"
    );
    exec_tool(
        name,
        &format!("{name} {tag}"),
        &[shell[0], shell[1], &answer],
        &schema,
    )
}

/// Several tools of one version in one manifest.
pub fn tools(names: &[&str], tag: &str) -> String {
    names.iter().map(|n| tool(n, tag)).collect()
}

/// The schema `tool(_, tag)` registers.
pub fn schema_of(tag: &str) -> Value {
    json!({"type": "object", "properties": {tag: {"type": "string"}}})
}

// ---------------------------------------------------------------------------
// Reading the stand-in

/// The tools of our source that `role` holds, by name.
pub fn ours<'a>(snap: &'a RegistrySnapshot, role: &str) -> Vec<&'a Tool> {
    snap.tools(role)
        .unwrap_or_default()
        .iter()
        .filter(|t| t.source == SOURCE)
        .collect()
}

/// The clean stop as main_server saw it, in the requests after the first
/// `before`: exactly one write, a `clear` of our source that succeeded; none
/// of our tools left in any role, and the built-ins untouched.
pub fn cleared_once(h: &DevServerHandle, before: usize) {
    let writes: Vec<_> = h
        .requests()
        .into_iter()
        .skip(before)
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(
        writes.len(),
        1,
        "one request removes our tools: {writes:#?}"
    );
    assert_eq!(writes[0].path, "/api/tools/clear");
    assert_eq!(writes[0].body, json!({"source": SOURCE, "role": null}));
    assert_eq!(writes[0].status, Some(200));
    let snap = h.registry_snapshot();
    for role in snap.role_names() {
        assert!(ours(&snap, role).is_empty(), "{}", super::describe(&snap));
        assert!(
            snap.names(role).contains(&"recall_memory"),
            "built-ins stay"
        );
    }
}

/// Names of our tools in `role`, sorted.
pub fn our_names(snap: &RegistrySnapshot, role: &str) -> Vec<String> {
    let mut v: Vec<String> = ours(snap, role).iter().map(|t| t.name.clone()).collect();
    v.sort();
    v
}

/// Whether every role holds exactly `expected` (name, tag) of ours, each
/// with the description and schema of that tag.
pub fn holds_exactly(snap: &RegistrySnapshot, expected: &[(&str, &str)]) -> bool {
    snap.role_names().iter().all(|role| {
        let mine = ours(snap, role);
        mine.len() == expected.len()
            && expected.iter().all(|(name, tag)| {
                mine.iter().any(|t| {
                    t.name == *name
                        && t.description == format!("{name} {tag}")
                        && t.parameters == schema_of(tag)
                })
            })
    })
}

/// Waits until every role holds exactly `expected` of ours.
pub async fn wait_holds(h: &DevServerHandle, expected: &[(&str, &str)]) {
    wait_stand_in(h, &format!("our tools to be {expected:?}"), |h| {
        holds_exactly(&h.registry_snapshot(), expected)
    })
    .await;
}

// ---------------------------------------------------------------------------
// The real binary

/// Lines of a child's stderr as they arrive.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
}

/// `neko-sidecar run` as a child process. Killed (SIGKILL) when dropped, so
/// a failing test leaves nothing running. The tests that signal it and
/// read its log are Unix-only.
#[cfg_attr(not(unix), allow(dead_code))]
pub struct Sidecar {
    child: Child,
    pid: u32,
    lines: Arc<Lines>,
    changed: watch::Receiver<u64>,
    reader: Option<JoinHandle<()>>,
}

/// `neko-sidecar run --config CONFIG`, with none of systemd's variables and
/// no RUST_LOG from the environment running the tests.
pub fn run_command(config: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("run").arg("--config").arg(config);
    clean_env(&mut cmd);
    cmd
}

/// Removes what would change the daemon's behaviour from `cmd`'s environment.
pub fn clean_env(cmd: &mut Command) {
    for var in [
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "RUST_LOG",
        "NEKO_SIDECAR_CONFIG",
        "JOURNAL_STREAM",
    ] {
        cmd.env_remove(var);
    }
}

impl Sidecar {
    /// Runs the daemon on `config`.
    pub fn spawn(config: &Path) -> Self {
        Self::spawn_command(run_command(config))
    }

    /// Runs a prepared command (stdio and kill-on-drop are set here).
    pub fn spawn_command(cmd: Command) -> Self {
        Self::spawn_with_stdin(cmd, Stdio::null())
    }

    /// Runs a prepared command with `stdin` as its standard input (the
    /// read end of a pipe, for `run --stop-on-stdin-eof`).
    pub fn spawn_with_stdin(mut cmd: Command, stdin: Stdio) -> Self {
        cmd.stdin(stdin)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawning neko-sidecar");
        let pid = child.id().expect("a running child has a pid");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Lines::default());
        let (tx, changed) = watch::channel(0u64);
        let sink = Arc::clone(&lines);
        let reader = tokio::spawn(async move {
            let mut rd = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = rd.next_line().await {
                sink.lines.lock().unwrap().push(line);
                tx.send_modify(|n| *n += 1);
            }
        });
        Self {
            child,
            pid,
            lines,
            changed,
            reader: Some(reader),
        }
    }

    /// Sends `sig` to the daemon.
    #[cfg(unix)]
    pub fn signal(&self, sig: Signal) {
        let pid = Pid::from_raw(self.pid as i32).unwrap();
        rustix::process::kill_process(pid, sig).expect("signalling neko-sidecar");
    }

    /// Whether the process has exited by now (reaped if so).
    pub fn has_exited(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("checking on neko-sidecar")
            .is_some()
    }

    /// Every stderr line so far.
    /// The daemon's pid.
    #[cfg(target_os = "linux")]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn stderr(&self) -> Vec<String> {
        self.lines.lines.lock().unwrap().clone()
    }

    /// Waits until a stderr line satisfies `pred`; panics with the whole
    /// stderr otherwise. Returns the line.
    #[cfg_attr(not(unix), allow(dead_code))]
    pub async fn wait_log(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let mut changed = self.changed.clone();
        let found = tokio::time::timeout(WAIT, async {
            loop {
                changed.mark_unchanged();
                if let Some(l) = self.stderr().into_iter().find(|l| pred(l)) {
                    return Some(l);
                }
                if changed.changed().await.is_err() {
                    // stderr closed: the process is gone.
                    return self.stderr().into_iter().find(|l| pred(l));
                }
            }
        })
        .await;
        match found {
            Ok(Some(l)) => l,
            _ => panic!(
                "no stderr line of neko-sidecar shows {what}; stderr:\n{}",
                self.stderr().join("\n")
            ),
        }
    }

    /// Waits for the process to exit, at most `within`; panics (the drop
    /// then kills it) otherwise. Its stderr is read to the end.
    pub async fn exit_within(&mut self, within: Duration) -> ExitStatus {
        let status = match tokio::time::timeout(within, self.child.wait()).await {
            Ok(r) => r.expect("waiting for neko-sidecar"),
            Err(_) => panic!(
                "neko-sidecar did not exit within {within:?}; stderr:\n{}",
                self.stderr().join("\n")
            ),
        };
        if let Some(reader) = self.reader.take() {
            // Exec handlers could hold the pipe; never wait long for them.
            let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
        }
        status
    }

    /// SIGKILL, then reaps it.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("killing neko-sidecar");
        let _ = self.exit_within(WAIT).await;
    }
}

// ---------------------------------------------------------------------------
// The daemon in-process

/// A daemon running in the test's runtime; shut down when dropped.
pub struct InProcess {
    pub daemon: Option<Daemon>,
    pub shutdown: CancellationToken,
}

impl InProcess {
    /// Loads `config` and starts the daemon on a port-0 callback listener.
    pub async fn start(config: &Path) -> Self {
        let (cfg, diags) = config::load(config);
        let cfg = cfg.unwrap_or_else(|| panic!("invalid test config: {diags:?}"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shutdown = CancellationToken::new();
        let opts = DaemonOptions {
            notifier: None,
            callback_listener: Some(listener),
            reloads: None,
        };
        let daemon = daemon::start(cfg, opts, shutdown.clone())
            .await
            .expect("starting the daemon");
        Self {
            daemon: Some(daemon),
            shutdown,
        }
    }

    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().unwrap()
    }

    /// The daemon and its shutdown token, for a test that stops it itself.
    pub fn into_parts(mut self) -> (Daemon, CancellationToken) {
        (self.daemon.take().unwrap(), self.shutdown.clone())
    }

    /// Shuts down and waits for the report.
    pub async fn stop(mut self) -> daemon::ShutdownReport {
        self.shutdown.cancel();
        let d = self.daemon.take().unwrap();
        tokio::time::timeout(WAIT, d.wait())
            .await
            .expect("the daemon stops within its deadline")
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if self.daemon.is_some() {
            self.shutdown.cancel();
        }
    }
}
