//! The daemon (`neko-sidecar run`): wires the manifest reloader, the
//! callback server, the registration engine and systemd together, and owns
//! the one shutdown path.
//!
//! The outside world is injected: listeners may be passed in (tests bind port
//! 0), the notifier is a value, and shutdown and reload are a token and a
//! channel that the binary feeds from OS signals (`signals`). So the whole
//! daemon runs in-process in a test, against the in-process stand-in.
//!
//! Ordering rules kept here:
//! - a tool is routed by the callback server before the engine may register
//!   it (the desired state reaches the engine through the callback bridge);
//! - `READY=1` once the listener is bound and the manifests are loaded, never
//!   waiting for main_server, which may be down for hours;
//! - shutdown: `STOPPING=1`, stop reconciling, then remove our tools (one
//!   `clear`) and drain calls at the same time, all within the deadline;
//! - every task is the daemon's (one `TaskTracker`), the admin endpoints
//!   included (`Daemon::spawn`), and shutdown waits for them within the
//!   same deadline.
//!
//! It never decides what to register (the planner does) nor how a call is
//! answered (the callback server does).

pub(crate) mod signals;
pub mod systemd_status;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backoff::{BackoffPolicy, Jitter};
use crate::callback::{CallbackError, CallbackHandle, CallbackServer, CallbackSettings, Drained};
use crate::client::{Client, ClientBuildError};
use crate::config::{self, AgentConfig};
use crate::desired::DesiredState;
use crate::diag::Diagnostic;
use crate::engine::{ClearError, ClearReport, Engine, EngineError};
use crate::mcp::McpServers;
use crate::registration::RegistrationStore;
use crate::reload::{ManifestSet, ManifestSource, ReloadHandle, ReloadSettings, Reloader};
use crate::systemd::{Heartbeat, Notifier};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot listen for callbacks on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Callback(#[from] CallbackError),
    #[error(transparent)]
    Client(#[from] ClientBuildError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("invalid reload settings: {0}")]
    Reload(String),
}

/// What `start` takes besides the config.
#[derive(Debug, Default)]
pub struct DaemonOptions {
    /// systemd's notify socket; `Notifier::disabled()` outside systemd.
    pub notifier: Option<Notifier>,
    /// An already bound callback listener (tests bind port 0); otherwise
    /// `[callback] listen` is bound.
    pub callback_listener: Option<TcpListener>,
    /// The reload channel, when the caller made it before `start` (the
    /// binary installs its signal handlers first, so that a signal during
    /// start-up is never lost); otherwise `start` makes one.
    pub reloads: Option<(mpsc::Sender<ReloadRequest>, mpsc::Receiver<ReloadRequest>)>,
}

/// A reload channel for `DaemonOptions::reloads`.
pub(crate) fn reload_channel() -> (mpsc::Sender<ReloadRequest>, mpsc::Receiver<ReloadRequest>) {
    mpsc::channel(4)
}

/// A request to reload, with an optional reply when it is done.
#[derive(Debug)]
pub struct ReloadRequest {
    pub done: Option<tokio::sync::oneshot::Sender<()>>,
}

/// How shutdown went.
#[derive(Debug)]
pub struct ShutdownReport {
    /// Removing our tools from main_server.
    pub cleared: Result<ClearReport, ClearError>,
    /// Finishing the calls in flight.
    pub drained: Drained,
    /// From the shutdown request to the end.
    pub took: Duration,
}

/// A running daemon: handles for the admin surface and tests, and the task
/// that ends when shutdown is done.
pub struct Daemon {
    pub registration: Arc<RegistrationStore>,
    pub callback: CallbackHandle,
    pub reload: ReloadHandle,
    /// The MCP servers' sessions, for status and tests.
    pub mcp: McpServers,
    /// The desired state the engine works to: the manifests' tools and the
    /// MCP servers' (`reload.desired()` has the manifests' alone).
    pub desired: watch::Receiver<Arc<DesiredState>>,
    pub config: AgentConfig,
    /// Keeps the reload channel open while the daemon lives, when the
    /// caller gave none (no SIGHUP to forward).
    _reloads: mpsc::Sender<ReloadRequest>,
    /// The daemon's tasks, shared with the supervisor, which waits for them
    /// at shutdown; `spawn` adds to them.
    tasks: TaskTracker,
    task: JoinHandle<ShutdownReport>,
}

impl Daemon {
    /// Runs `task` as one of the daemon's own tasks: the shutdown path waits
    /// for it, within the shutdown deadline, as for every other. The task
    /// must end when the shutdown token given to `start` is cancelled (the
    /// admin endpoints do: `admin::start_for`).
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Waits for the daemon to finish shutting down (after the shutdown
    /// token given to `start` was cancelled).
    pub async fn wait(self) -> ShutdownReport {
        match self.task.await {
            Ok(report) => report,
            Err(e) => {
                // A panic in the supervisor: nothing was cleaned up.
                tracing::error!("the daemon's supervisor task failed: {e}");
                ShutdownReport {
                    cleared: Err(ClearError::Deadline(Duration::ZERO)),
                    drained: Drained::Forced,
                    took: Duration::ZERO,
                }
            }
        }
    }
}

/// Starts the daemon on a validated config. Returns once the callback
/// listener is bound, the manifests are loaded and every task runs; the
/// daemon then runs until `shutdown` is cancelled.
pub async fn start(
    config: AgentConfig,
    opts: DaemonOptions,
    shutdown: CancellationToken,
) -> Result<Daemon, DaemonError> {
    let notifier = opts.notifier.unwrap_or_else(Notifier::disabled);
    let _ = notifier.status("loading manifests");

    // Manifests first: a file in error is logged and skipped (it is re-read
    // at every rescan), so one plugin's bad edit never keeps the others'
    // tools away.
    let source = ManifestSource::from_config(&config);
    let (set, first_load) = tokio::task::spawn_blocking(move || {
        let mut set = ManifestSet::new(source);
        let r = set.rescan(true);
        (set, r)
    })
    .await
    .map_err(|e| DaemonError::Reload(format!("loading manifests panicked: {e}")))?;
    first_load.problems.iter().for_each(Diagnostic::log);
    tracing::info!("{}", set.health().summary());
    let settings = ReloadSettings::new(config.reload.debounce, config.reload.rescan_interval)
        .map_err(|e| DaemonError::Reload(e.to_string()))?;
    let (reloader, reload) = Reloader::new(set, settings);

    let listener = match opts.callback_listener {
        Some(l) => l,
        None => crate::callback::listener::bind(config.callback.listen).map_err(|source| {
            DaemonError::Bind {
                addr: config.callback.listen,
                source,
            }
        })?,
    };
    // Never cancelled from outside: `drain` stops the callback server, so
    // that it keeps answering while our tools are being removed.
    let callback = CallbackServer::start(
        listener,
        CallbackSettings::from_config(&config.callback, &config.handlers),
        CancellationToken::new(),
    )?;

    let registration = Arc::new(RegistrationStore::new());
    let heartbeat = Heartbeat::new();
    let cb = callback.clone();
    let url_for: crate::engine::UrlFor = Arc::new(move |tool: &str| cb.url_for(tool));
    let mut engine = Engine::new(
        &config,
        Client::new(&config.main_server)?,
        url_for,
        Arc::clone(&registration),
    )?;
    if let Some(usec) = notifier.watchdog_interval() {
        engine = engine.with_heartbeat(heartbeat.clone(), usec / 4);
    }

    // Everything below stops on `inner`; the supervisor cancels it when
    // `shutdown` fires, then cleans up.
    let inner = CancellationToken::new();
    let tasks = TaskTracker::new();
    tasks.spawn(reloader.run(inner.clone()));

    // The MCP hub adds the tools of MCP servers to the manifests' own;
    // restarts follow the registration backoff.
    let policy = BackoffPolicy::new(
        config.registration.backoff_initial,
        config.registration.backoff_max,
    )
    .map_err(EngineError::from)?;
    let mcp = McpServers::new(policy, Jitter::random());
    callback.set_mcp(mcp.clone());
    callback.set_history(crate::admin::history::CallHistory::new(
        config.admin.call_history,
    ));
    let first = Arc::new(mcp.first(&reload.desired().borrow()));
    let (to_bridge, mut from_hub) = watch::channel(first.clone());
    tasks.spawn(mcp.clone().run(
        reload.desired(),
        to_bridge,
        config.shutdown_deadline,
        inner.clone(),
    ));

    // The bridge: route first, then let the engine register.
    callback.set_tools(&first);
    let (to_engine, engine_rx) = watch::channel(first);
    let desired = engine_rx.clone();
    {
        let callback = callback.clone();
        let inner = inner.clone();
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = inner.cancelled() => break,
                    r = from_hub.changed() => {
                        if r.is_err() {
                            break;
                        }
                        let d: Arc<DesiredState> = from_hub.borrow_and_update().clone();
                        callback.set_tools(&d);
                        let _ = to_engine.send(d);
                    }
                }
            }
        });
    }

    let engine_token = inner.clone();
    let engine_task = tasks.spawn(async move {
        engine.run(engine_rx, engine_token).await;
        engine
    });
    if let Some(w) = notifier.watchdog(heartbeat) {
        tasks.spawn(w.run(inner.clone()));
    }

    if let Err(e) = notifier.ready() {
        tracing::warn!("{e}");
    }
    tracing::info!(
        callback = %callback.base_url(),
        main_server = %crate::manifest::remote::redact_url(&config.main_server.url),
        source = %config.source,
        "neko-sidecar is running"
    );

    let (reload_tx, reload_rx) = opts.reloads.unwrap_or_else(reload_channel);
    let supervisor = Supervisor {
        config: config.clone(),
        notifier,
        registration: Arc::clone(&registration),
        callback: callback.clone(),
        reload: reload.clone(),
        mcp: mcp.clone(),
        inner,
        tasks: tasks.clone(),
    };
    let task = tokio::spawn(supervisor.run(shutdown, reload_rx, engine_task));
    Ok(Daemon {
        registration,
        callback,
        reload,
        mcp,
        desired,
        config,
        _reloads: reload_tx,
        tasks,
        task,
    })
}

/// The daemon's own task: reloads, systemd `STATUS=` lines, then the
/// shutdown path.
struct Supervisor {
    config: AgentConfig,
    notifier: Notifier,
    registration: Arc<RegistrationStore>,
    callback: CallbackHandle,
    reload: ReloadHandle,
    mcp: McpServers,
    inner: CancellationToken,
    tasks: TaskTracker,
}

impl Supervisor {
    async fn run(
        self,
        shutdown: CancellationToken,
        mut reloads: mpsc::Receiver<ReloadRequest>,
        engine_task: JoinHandle<Engine>,
    ) -> ShutdownReport {
        let mut registration_changes = self.registration.subscribe();
        let mut last_line = String::new();
        let mut refresh_at = self.send_systemd_status(&mut last_line);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                req = reloads.recv() => match req {
                    Some(req) => {
                        self.reload_now().await;
                        last_line.clear();
                        if let Some(done) = req.done {
                            let _ = done.send(());
                        }
                    }
                    // Nobody can ask for reloads any more; keep serving.
                    None => reloads = mpsc::channel(1).1,
                },
                _ = registration_changes.changed() => refresh_at = self.send_systemd_status(&mut last_line),
                // The branch is off without a deadline; the fallback is
                // never awaited.
                () = tokio::time::sleep_until(refresh_at.unwrap_or_else(Instant::now)), if refresh_at.is_some() => {
                    refresh_at = self.send_systemd_status(&mut last_line);
                }
            }
        }
        self.shut_down(engine_task).await
    }

    /// Sends the systemd `STATUS=` line if it reads differently, and says when to
    /// look again without a change: a second later while the line counts
    /// down ("retry in 3 s"), otherwise never, so an idle daemon keeps no
    /// timer here (and none at all without systemd listening).
    fn send_systemd_status(&self, last: &mut String) -> Option<Instant> {
        if !self.notifier.is_enabled() {
            return None;
        }
        let snap = self.registration.snapshot();
        let line = systemd_status::summary(&snap, SystemTime::now());
        if *last != line {
            if let Err(e) = self.notifier.status(&line) {
                tracing::debug!("{e}");
            }
            *last = line;
        }
        systemd_status::counts_down(&snap).then(|| Instant::now() + Duration::from_secs(1))
    }

    /// SIGHUP: manifests are re-read and applied; the agent config is
    /// re-read and compared, and a changed config is reported, not half
    /// applied (a new listen address cannot move under a running service).
    async fn reload_now(&self) {
        let _ = self.notifier.reloading();
        tracing::info!("reloading (SIGHUP)");
        let path = self.config.path.clone();
        let (fresh, diags) = tokio::task::spawn_blocking(move || config::load(&path))
            .await
            .unwrap_or_else(|e| {
                (
                    None,
                    vec![Diagnostic::error(
                        &self.config.path,
                        None,
                        format!("reading the config panicked: {e}"),
                    )],
                )
            });
        for d in diags.iter().filter(|d| d.is_error()) {
            tracing::error!("{d}");
        }
        match fresh {
            None => {
                tracing::error!("the agent config has errors; the running config stays in force")
            }
            Some(fresh) => {
                let changed = changed_sections(&self.config, &fresh);
                if !changed.is_empty() {
                    tracing::warn!(
                        "the agent config changed ({}); these settings apply at the next restart: the running config stays in force",
                        changed.join(", ")
                    );
                }
            }
        }
        match self.reload.reload_now().await {
            Ok(summary) => tracing::info!(
                changed = summary.changed,
                "manifests reloaded: {}",
                summary.health.summary()
            ),
            Err(e) => tracing::error!("cannot reload manifests: {e}"),
        }
        let _ = self.notifier.ready();
    }

    async fn shut_down(self, engine_task: JoinHandle<Engine>) -> ShutdownReport {
        let started = Instant::now();
        let deadline = started + self.config.shutdown_deadline;
        let _ = self.notifier.stopping();
        tracing::info!(
            deadline = ?self.config.shutdown_deadline,
            "shutting down: removing our tools from main_server and finishing calls in flight"
        );
        self.inner.cancel();
        self.tasks.close();
        let engine = engine_task.await;
        let clear = async {
            match &engine {
                Ok(engine) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    engine.clear_all(left).await
                }
                Err(_) => Err(ClearError::Deadline(Duration::ZERO)),
            }
        };
        // MCP servers serve the calls being drained; they stop after
        // them (stdin closed, SIGTERM, SIGKILL), by the same deadline.
        let drain = async {
            let drained = self.callback.drain(deadline).await;
            self.mcp.stop_all(deadline).await;
            drained
        };
        let (cleared, drained) = tokio::join!(clear, drain);
        // Success is logged by the engine's clear; a failure is one warning.
        if let Err(e) = &cleared {
            tracing::warn!("our tools could not be removed from main_server: {e}");
        }
        let _ = tokio::time::timeout_at(deadline, self.tasks.wait()).await;
        let took = started.elapsed();
        tracing::info!(took = ?took, "stopped");
        ShutdownReport {
            cleared,
            drained,
            took,
        }
    }
}

/// Which sections of the agent config differ, for the reload message.
fn changed_sections(old: &AgentConfig, new: &AgentConfig) -> Vec<&'static str> {
    [
        (old.source != new.source, "source"),
        (old.manifest_dirs != new.manifest_dirs, "manifest_dirs"),
        (
            old.handlers != new.handlers,
            "[handlers] / allow_remote_handlers",
        ),
        (old.main_server != new.main_server, "[main_server]"),
        (old.callback != new.callback, "[callback]"),
        (old.registration != new.registration, "[registration]"),
        (old.shutdown_deadline != new.shutdown_deadline, "[shutdown]"),
        (old.log != new.log, "[log]"),
        (old.admin != new.admin, "[admin]"),
        (old.reload != new.reload, "[reload]"),
    ]
    .into_iter()
    .filter_map(|(changed, section)| changed.then_some(section))
    .collect()
}
