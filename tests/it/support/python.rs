//! The official Python MCP SDK, for the tests that run a real Python MCP
//! server (`tests/fixtures/mcp/sse_server.py`, the legacy HTTP+SSE
//! transport): which interpreter has the SDK, and that server started on a
//! port and killed.
//!
//! The interpreter is, in this order: `NEKO_TEST_MCP_PYTHON` (then it must
//! have the SDK); the venv that `.ci/run` and `bench/mcp.sh` keep,
//! `${XDG_CACHE_HOME:-~/.cache}/neko-sidecar/bench-mcp-venv/bin/python3`;
//! `python3` on PATH. When none has it, the test makes that venv and
//! installs the SDK from PyPI itself, as `bench/mcp.sh` does, so
//! `cargo test --all-targets` stays green on a fresh machine; when that
//! fails too (no python3-venv, no network), the test fails, saying how to
//! install it: a test that passes without running its server would hide a
//! broken SSE transport.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;

use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

use super::{WAIT, repo};

/// The pip requirement the fixture is written for (as `bench/mcp.sh`'s).
pub const MCP_SDK: &str = "mcp>=2,<3";

/// A Python interpreter with the MCP SDK; panics, saying how to get one,
/// when there is none.
pub fn mcp_python() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(find)
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn find() -> Result<PathBuf, String> {
    if let Some(given) = std::env::var_os("NEKO_TEST_MCP_PYTHON") {
        let given = PathBuf::from(given);
        return if has_sdk(&given) {
            Ok(given)
        } else {
            Err(format!(
                "NEKO_TEST_MCP_PYTHON={} has no MCP SDK (`{MCP_SDK}`, with uvicorn): install it there with `{} -m pip install '{MCP_SDK}'`",
                given.display(),
                given.display()
            ))
        };
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    let venv = cache.map(|c| c.join("neko-sidecar/bench-mcp-venv"));
    let venv_python = venv.as_ref().map(|v| v.join("bin/python3"));
    let candidates = venv_python
        .iter()
        .cloned()
        .chain([PathBuf::from("python3")]);
    let mut tried = Vec::new();
    for python in candidates {
        if has_sdk(&python) {
            return Ok(python);
        }
        tried.push(python.display().to_string());
    }
    let installed = match (&venv, &venv_python) {
        (Some(venv), Some(python)) => install_sdk(venv, python).map(|()| python.clone()),
        _ => Err("neither XDG_CACHE_HOME nor HOME is set".to_string()),
    };
    installed.map_err(|why| {
        format!(
            "this test runs a real Python MCP server and needs the official SDK (`{MCP_SDK}`), found in none of {}, and installing it failed ({why}): run .ci/run once, which installs it, or \
             `python3 -m venv ~/.cache/neko-sidecar/bench-mcp-venv && ~/.cache/neko-sidecar/bench-mcp-venv/bin/pip install '{MCP_SDK}'`, \
             or set NEKO_TEST_MCP_PYTHON to a python3 that has it",
            tried.join(", ")
        )
    })
}

/// Makes the venv (if missing) and installs the SDK into it from PyPI.
fn install_sdk(venv: &std::path::Path, python: &std::path::Path) -> Result<(), String> {
    let run = |program: &std::path::Path, args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {:?} exited with {}: {}",
                program.display(),
                args,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    if !python.exists() {
        if let Some(parent) = venv.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        run(
            std::path::Path::new("python3"),
            &["-m".as_ref(), "venv".as_ref(), venv.as_os_str()],
        )?;
    }
    run(
        python,
        &[
            "-m".as_ref(),
            "pip".as_ref(),
            "install".as_ref(),
            "--quiet".as_ref(),
            "--disable-pip-version-check".as_ref(),
            MCP_SDK.as_ref(),
        ],
    )?;
    if has_sdk(python) {
        Ok(())
    } else {
        Err(format!(
            "{} still has no SDK after pip install",
            python.display()
        ))
    }
}

fn has_sdk(python: &std::path::Path) -> bool {
    std::process::Command::new(python)
        .args(["-c", "import mcp.server.mcpserver, uvicorn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `tests/fixtures/mcp/sse_server.py` serving; killed when dropped.
pub struct PySseServer {
    child: Child,
    /// Its event stream, `http://127.0.0.1:PORT/sse`.
    pub url: String,
    pub port: u16,
}

impl PySseServer {
    /// Starts it on `port` (0: any free one) and waits until it serves.
    pub async fn start(port: u16) -> Self {
        let script = repo().join("tests/fixtures/mcp/sse_server.py");
        let mut child = Command::new(mcp_python())
            .arg(&script)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python SSE server starts");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("sse_server.py prints its URL in time")
            .unwrap()
            .unwrap_or_else(|| panic!("sse_server.py ended before printing its URL"));
        let port = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|rest| rest.strip_suffix("/sse"))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {url:?}"));
        Self { child, url, port }
    }

    /// Kills it (SIGKILL: no goodbye on its streams) and waits until it is
    /// gone.
    pub async fn kill(mut self) {
        self.child
            .kill()
            .await
            .expect("the Python SSE server is killed");
    }
}

/// `tests/fixtures/mcp/oauth_server.py` serving: a protected MCP server
/// and its authorization server, built with the SDK's `mcp.server.auth`;
/// killed when dropped.
pub struct PyOAuthServer {
    _child: Child,
    /// Its MCP endpoint, `http://127.0.0.1:PORT/mcp` (`/sse` with `--sse`).
    pub url: String,
    /// `http://127.0.0.1:PORT`: its authorization server and test controls.
    pub base: String,
}

impl PyOAuthServer {
    /// Starts it with `args` (see the script) and waits until it serves.
    pub async fn start(args: &[&str]) -> Self {
        let script = repo().join("tests/fixtures/mcp/oauth_server.py");
        let mut child = Command::new(mcp_python())
            .arg(&script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python OAuth server starts");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("oauth_server.py prints its URL in time")
            .unwrap()
            .unwrap_or_else(|| panic!("oauth_server.py ended before printing its URL"));
        let base = url
            .strip_suffix("/mcp")
            .or_else(|| url.strip_suffix("/sse"))
            .unwrap_or_else(|| panic!("unexpected first line {url:?}"))
            .to_string();
        Self {
            _child: child,
            url,
            base,
        }
    }

    /// What its authorization server saw (`GET /__test/log`).
    pub async fn log(&self) -> serde_json::Value {
        super::http_client()
            .get(format!("{}/__test/log", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// `POST /__test/{what}` (`expire`, `refuse-refresh`).
    pub async fn control(&self, what: &str) {
        let r = super::http_client()
            .post(format!("{}/__test/{what}", self.base))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{what}: {}", r.status());
    }
}
