//! The registration engine alone, against the stand-in: an agent config,
//! desired states built from manifest text (or directly, for bodies our
//! manifest checks would refuse), and an engine running in a task with its
//! status, desired-state sender and shutdown.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use neko_sidecar::client::Client;
use neko_sidecar::config::{self, AgentConfig};
use neko_sidecar::desired::{DesiredState, DesiredTool, Fingerprint};
use neko_sidecar::devserver::{DevServerHandle, RequestRecord};
use neko_sidecar::engine::{Engine, UrlFor};
use neko_sidecar::registration::{RegistrationSnapshot, RegistrationStore};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{WAIT, desired_state, http_tool, wait_status};

pub const SOURCE: &str = "plugin:test";

/// The registration settings of most tests: fast polls, short backoff.
pub const FAST: &str =
    "poll_interval = \"100ms\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"400ms\"\n";

/// An agent config pointing at `url`, with `registration` as the body of
/// its `[registration]` table.
pub fn agent_config(url: &str, registration: &str) -> AgentConfig {
    agent_config_with(url, registration, "500ms")
}

pub fn agent_config_with(url: &str, registration: &str, request_timeout: &str) -> AgentConfig {
    let text = format!(
        "source = \"{SOURCE}\"\n[main_server]\nurl = \"{url}\"\nrequest_timeout = \"{request_timeout}\"\n[registration]\n{registration}"
    );
    let (cfg, diags) = config::parse(Path::new("/tmp/agent.toml"), &text);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    cfg.unwrap()
}

/// One tool of a test manifest.
#[derive(Clone)]
pub struct T {
    pub name: String,
    pub role: Option<String>,
    pub description: String,
    pub property: String,
}

pub fn tool(name: &str) -> T {
    T {
        name: name.into(),
        role: None,
        description: format!("{name} does things"),
        property: "city".into(),
    }
}

impl T {
    pub fn role(mut self, role: &str) -> Self {
        self.role = Some(role.into());
        self
    }

    pub fn description(mut self, d: &str) -> Self {
        self.description = d.into();
        self
    }

    pub fn property(mut self, p: &str) -> Self {
        self.property = p.into();
        self
    }
}

/// The desired state of these tools, through the real manifest parser.
pub fn desired(tools: &[T]) -> DesiredState {
    if tools.is_empty() {
        return DesiredState {
            source: SOURCE.into(),
            tools: BTreeMap::new(),
            mcp_servers: Default::default(),
        };
    }
    let text: String = tools
        .iter()
        .map(|t| {
            let role = t.role.as_ref().map(|r| format!("role = \"{r}\"\n"));
            http_tool(
                &t.name,
                &t.description,
                &format!("http://127.0.0.1:9/{}", t.name),
                &format!(
                    "parameters = {{ type = \"object\", properties = {{ {} = {{ type = \"string\" }} }} }}\n{}",
                    t.property,
                    role.unwrap_or_default()
                ),
            )
        })
        .collect();
    desired_state(SOURCE, Path::new(""), &text)
}

/// `n` global tools named `tool_0000`..
pub fn many(n: usize) -> DesiredState {
    let tools: Vec<T> = (0..n).map(|i| tool(&format!("tool_{i:04}"))).collect();
    desired(&tools)
}

/// Adds a copy of `template` renamed to `name`, bypassing the manifest
/// checks: the honest way to get a body main_server refuses (e.g. a name
/// longer than its 64 characters), since our own checks refuse it first.
pub fn with_unchecked(mut d: DesiredState, template: &str, name: &str) -> DesiredState {
    let mut spec = (*d.tools[template].spec).clone();
    spec.name = name.into();
    let fingerprint = Fingerprint::of(&spec, SOURCE);
    d.tools.insert(
        name.into(),
        DesiredTool {
            spec: Arc::new(spec),
            fingerprint,
        },
    );
    d
}

/// Our callback URLs: `http://127.0.0.1:PORT/cb/TOKEN/NAME`.
pub fn url_for(port: u16, token: &str) -> UrlFor {
    let token = token.to_string();
    Arc::new(move |name: &str| format!("http://127.0.0.1:{port}/cb/{token}/{name}"))
}

/// An engine running in a task.
pub struct Running {
    pub status: Arc<RegistrationStore>,
    pub desired: watch::Sender<Arc<DesiredState>>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Engine>,
    pub url_for: UrlFor,
}

pub fn start(cfg: &AgentConfig, d: DesiredState, url_for: UrlFor) -> Running {
    start_engine(cfg, d, url_for, |e| e)
}

/// Starts an engine; `adjust` may e.g. fix its jitter.
pub fn start_engine(
    cfg: &AgentConfig,
    d: DesiredState,
    url_for: UrlFor,
    adjust: impl FnOnce(Engine) -> Engine,
) -> Running {
    let status = Arc::new(RegistrationStore::new());
    let client = Client::new(&cfg.main_server).unwrap();
    let engine = Engine::new(cfg, client, url_for.clone(), status.clone()).unwrap();
    let mut engine = adjust(engine);
    let (tx, rx) = watch::channel(Arc::new(d));
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        engine.run(rx, token).await;
        engine
    });
    Running {
        status,
        desired: tx,
        shutdown,
        task,
        url_for,
    }
}

impl Running {
    /// Waits until `pred` holds for the status, or fails the test.
    pub async fn wait(
        &self,
        what: &str,
        pred: impl FnMut(&RegistrationSnapshot) -> bool,
    ) -> RegistrationSnapshot {
        wait_status(&self.status, what, pred).await
    }

    /// Waits for `n` more completed passes.
    pub async fn passes(&self, n: u64) -> RegistrationSnapshot {
        let start = self.status.snapshot().passes;
        self.wait(&format!("{n} more passes"), |s| s.passes >= start + n)
            .await
    }

    /// Stops the engine (without clearing) and returns it.
    pub async fn stop(self) -> Engine {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the engine must stop at once on shutdown")
            .unwrap()
    }
}

/// Every desired tool is listed in every role with our source and `url_for`.
pub fn all_present(h: &DevServerHandle, d: &DesiredState, url_for: &UrlFor) -> bool {
    let snap = h.registry_snapshot();
    d.tools.iter().all(|(name, t)| {
        let roles: Vec<&str> = match &t.spec.role {
            Some(r) => vec![r.as_str()],
            None => snap.role_names(),
        };
        roles.iter().all(|r| {
            snap.tool(r, name).is_some_and(|x| {
                x.source == SOURCE && x.callback_url.as_deref() == Some(url_for(name).as_str())
            })
        })
    })
}

/// Our register requests (our source) for one tool name.
pub fn registers_of(log: &[RequestRecord], name: &str) -> usize {
    log.iter()
        .filter(|r| {
            r.path == "/api/tools/register" && r.body["name"] == name && r.body["source"] == SOURCE
        })
        .count()
}

/// Every tool of `d` is `Registered` in the status (checked by name, so an
/// engine that has not read its desired state yet does not pass).
pub fn registered(s: &RegistrationSnapshot, d: &DesiredState) -> bool {
    d.tools
        .keys()
        .all(|n| s.state(n) == Some(&neko_sidecar::registration::ToolState::Registered))
}
