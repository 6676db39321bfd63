//! The suite's helpers, each written once. Here: what every area uses (the
//! binary, the stand-in main_server on a port-0 listener, a port nothing
//! listens on, plain HTTP, waiting on a condition with a deadline, a
//! workspace of manifests in a tempdir, manifest text, calls as the model
//! makes them). Beside it, one module per kind of rig: `admin` (the daemon
//! with its admin endpoints), `callback` (the callback server alone),
//! `chaos`, `daemon` (agent configs, the real binary as a child, the daemon
//! in-process), `engine` (the registration engine alone), `mcp` (the
//! daemon with `[[mcp_server]]`s running the stand-in MCP server), `notify` (a
//! systemd notify socket), `python` (the Python MCP SDK and a server built
//! with it), `reload` (the reloader alone), `target` (the
//! contract's server under test and tiny plugins) and `tls` (a test CA,
//! a TLS front, a silent listener and a CONNECT proxy).
//!
//! Every wait is on a condition with a deadline, never a bare sleep: the
//! deadline only bounds a failing test.

pub mod admin;
pub mod callback;
// The chaos test's rig (Unix only, as that test is).
#[cfg(unix)]
pub mod chaos;
pub mod daemon;
pub mod engine;
pub mod mcp;
#[cfg(target_os = "linux")]
pub mod notify;
// The Python MCP SDK's server runs as a process of this machine; the suite
// built for Windows and run under Wine has no Python with the SDK.
#[cfg(unix)]
pub mod python;
pub mod reload;
pub mod target;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use neko_sidecar::desired::DesiredState;
use neko_sidecar::devserver::{
    DevServer, DevServerBuilder, DevServerHandle, InvokeAnswer, InvokeError, InvokeRequest,
    RegistrySnapshot, RequestRecord,
};
use neko_sidecar::manifest::{LoadContext, parse_manifest};
use neko_sidecar::registration::{RegistrationSnapshot, RegistrationStore};
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::net::TcpListener;

/// The daemon binary built with this suite. A Windows build made on Linux
/// and run under Wine gets a Unix path from cargo, which Windows would read
/// on the current drive; Wine shows the Unix root as drive Z:, so that is
/// the path a manifest on another drive (the temp folder is on C:) can name.
pub const BIN: &str = {
    const CARGO: &str = env!("CARGO_BIN_EXE_neko-sidecar");
    const UNDER_WINE: &str = concat!("Z:", env!("CARGO_BIN_EXE_neko-sidecar"));
    if cfg!(windows) && CARGO.as_bytes()[0] == b'/' {
        UNDER_WINE
    } else {
        CARGO
    }
};
/// [`BIN`] with the separators this platform writes (backslashes on
/// Windows): as `cmd` wants it, and as the sidecar shows a program it found.
pub fn bin_as_written() -> String {
    if cfg!(windows) {
        BIN.replace('/', "\\")
    } else {
        BIN.to_string()
    }
}

/// Bounds a failing wait; passing tests never come near it. Longer on
/// Windows, whose tests run here under Wine: its one wineserver process
/// serves every socket wait of every test, so a busy suite runs slower
/// there (a thousand registrations took over 15 s beside other tests).
pub const WAIT: Duration = Duration::from_secs(if cfg!(windows) { 60 } else { 15 });

/// The repository's root, where `examples/` and `agent.toml.example` are.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A stand-in main_server on a port-0 listener.
pub async fn dev_server() -> DevServerHandle {
    dev_server_with(DevServer::builder()).await
}

/// A stand-in configured by `builder`, on a port-0 listener.
pub async fn dev_server_with(builder: DevServerBuilder) -> DevServerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    builder.start(listener).unwrap()
}

/// A loopback port nothing listens on (bound, then released): connections
/// to it are refused, as to a dead plugin or main_server.
pub fn refused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A plain HTTP client that never goes through a proxy.
pub fn http_client() -> reqwest::Client {
    neko_sidecar::tls::plain_http().no_proxy().build().unwrap()
}

/// Like [`http_client`], giving up on a request after `timeout`.
pub fn impatient_client(timeout: Duration) -> reqwest::Client {
    neko_sidecar::tls::plain_http()
        .no_proxy()
        .timeout(timeout)
        .build()
        .unwrap()
}

/// Serves `router` on a loopback port.
pub async fn serve_http(router: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    addr
}

/// Polls `cond` until it holds or `within` passes; true when it held.
pub async fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `pred` holds for the registration status (re-checked at
/// every change of it), or fails the test.
pub async fn wait_status(
    status: &RegistrationStore,
    what: &str,
    pred: impl FnMut(&RegistrationSnapshot) -> bool,
) -> RegistrationSnapshot {
    match status.wait_until(WAIT, pred).await {
        Ok(s) => s,
        Err(s) => panic!("timed out waiting for {what}; last status: {s:#?}"),
    }
}

/// Waits until `cond` holds on the stand-in; panics with the registry and
/// the end of the request log otherwise.
pub async fn wait_stand_in(
    h: &DevServerHandle,
    what: &str,
    cond: impl FnMut(&DevServerHandle) -> bool,
) {
    if !h.wait_for(WAIT, cond).await {
        let log = h.requests();
        panic!(
            "timed out after {WAIT:?} waiting for: {what}\nregistry: {}\nlast requests: {:#?}",
            describe(&h.registry_snapshot()),
            &log[log.len().saturating_sub(8)..]
        );
    }
}

/// `role: name [source] (description) params` per tool, for messages.
pub fn describe(snap: &RegistrySnapshot) -> String {
    let mut out = String::new();
    for role in &snap.roles {
        for t in &role.tools {
            out.push_str(&format!(
                "\n  {}: {} [{}] ({}) {}",
                role.role, t.name, t.source, t.description, t.parameters
            ));
        }
    }
    out
}

/// How many requests of a log hit `path` with `method`, e.g. ("POST",
/// "/api/tools/register").
pub fn count_requests(log: &[RequestRecord], method: &str, path: &str) -> usize {
    log.iter()
        .filter(|r| r.method == method && r.path == path)
        .count()
}

/// Registers a tool directly, as another plugin would.
pub async fn register_foreign(url: &str, name: &str, source: &str, callback: &str) {
    let r = http_client()
        .post(format!("{url}/api/tools/register"))
        .json(&json!({"name": name, "source": source, "callback_url": callback, "role": null}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
}

/// Unregisters a tool directly, as another client would.
pub async fn unregister_foreign(url: &str, name: &str) {
    let r = http_client()
        .post(format!("{url}/api/tools/unregister"))
        .json(&json!({"name": name, "role": null}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// A call of `name` with `arguments`, as the model makes it (first role).
pub fn call(name: &str, arguments: Value) -> InvokeRequest {
    InvokeRequest {
        name: name.into(),
        arguments: Some(arguments),
        ..Default::default()
    }
}

/// Has the stand-in call a tool as the model would; an answer must come
/// within 20 s.
pub async fn try_invoke(
    h: &DevServerHandle,
    req: InvokeRequest,
) -> Result<InvokeAnswer, InvokeError> {
    tokio::time::timeout(Duration::from_secs(20), h.invoke(req))
        .await
        .expect("an answer within 20 s")
}

/// Like [`try_invoke`], for a tool the stand-in holds.
pub async fn invoke(h: &DevServerHandle, req: InvokeRequest) -> InvokeAnswer {
    let name = req.name.clone();
    try_invoke(h, req)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A tempdir holding a manifest directory `tools/`, and the agent config
/// or handlers a test puts beside it.
pub struct Workspace {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub tools: PathBuf,
}

impl Workspace {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let tools = root.join("tools");
        std::fs::create_dir(&tools).unwrap();
        Self {
            _tmp: tmp,
            root,
            tools,
        }
    }

    /// A path in the manifest directory.
    pub fn tool_path(&self, file: &str) -> PathBuf {
        self.tools.join(file)
    }

    /// Writes a file of the manifest directory.
    pub fn write_tool(&self, file: &str, text: &str) -> PathBuf {
        let p = self.tool_path(file);
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// A `[[tool]]` with an http handler posting to `url`; `extra` lines after
/// the handler.
pub fn http_tool(name: &str, description: &str, url: &str, extra: &str) -> String {
    format!(
        "[[tool]]\nname = \"{name}\"\ndescription = \"{description}\"\nhandler = {{ type = \"http\", url = \"{url}\" }}\n{extra}\n"
    )
}

/// A `[[tool]]` with an exec handler running `command`; `extra` lines
/// after the handler.
pub fn exec_tool(name: &str, description: &str, command: &[&str], extra: &str) -> String {
    format!(
        "[[tool]]\nname = \"{name}\"\ndescription = \"{description}\"\nhandler = {{ type = \"exec\", command = {command:?} }}\n{extra}\n"
    )
}

/// The desired state of manifest text, read as the file `dir/tools.toml`
/// by the real parser; the text must have no error.
pub fn desired_state(source: &str, dir: &Path, text: &str) -> DesiredState {
    let f = parse_manifest(&dir.join("tools.toml"), text, &LoadContext::default());
    assert!(!f.has_errors(), "{:#?}", f.diagnostics);
    let (state, diags) = DesiredState::assemble(source, &[f]);
    assert!(diags.is_empty(), "{diags:#?}");
    state
}

/// Writes an executable `sh` script.
#[cfg(unix)]
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A process is gone when /proc has no entry for it or it is a zombie
/// waiting for a parent that is not us (an orphan's reaper is init, which
/// in a container may be slow or absent): either way it runs no more.
#[cfg(target_os = "linux")]
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Whether a program is on PATH, for tests of example handlers.
pub fn have(program: &str) -> bool {
    neko_sidecar::manifest::find_in_path(program).is_some()
}

/// Says a test (or part of one) was skipped when `program` is missing;
/// true then.
pub fn skip_without(program: &str, what: &str) -> bool {
    if have(program) {
        return false;
    }
    println!("SKIPPED: `{program}` is not on PATH, so {what} was not run");
    true
}

/// `examples/handlers/weather_http.py` serving on a free port (killed when
/// dropped), and its address `127.0.0.1:PORT`.
pub async fn weather_http_server(script: &Path) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .arg("0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("weather_http.py prints its address")
        .unwrap()
        .unwrap_or_default();
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .trim()
        .to_owned();
    (child, addr)
}

/// The property tests' configuration: enough cases to cover the shapes,
/// fast in the normal suite. Past failures are kept beside the module that
/// found them (`MODULE.proptest-regressions`) and replayed first.
pub fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}
