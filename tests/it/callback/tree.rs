//! An exec handler's whole process tree is ended, grandchildren included,
//! on timeout and when a drain runs past its deadline. Written for every
//! platform: the handler is a shell (`sh` on Unix, `cmd` on Windows) whose
//! child is the sidecar binary's stand-in MCP server on a loopback port, so
//! "gone" is "the port no longer answers", which needs no process table.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use neko_sidecar::callback::Drained;
use serde_json::json;
use tokio::time::Instant;

use crate::support::callback::*;
use crate::support::{BIN, WAIT, bin_as_written, exec_tool, wait_until};

/// A handler that starts a grandchild serving on a loopback port, writes
/// the grandchild's URL to `url.txt` in `dir`, and never answers.
fn tree_tool(dir: &Path, extra: &str) -> String {
    let out = dir.join("url.txt");
    let argv: Vec<String> = if cfg!(windows) {
        // Unquoted: std quotes the whole line for cmd.exe, and cmd strips
        // that outer pair only when nothing inside is quoted (the test
        // binary's and the temporary folder's paths have no spaces).
        let bin = bin_as_written();
        let line = format!("{bin} dev-mcp --http 127.0.0.1:0 > {}", out.display());
        vec!["cmd".into(), "/c".into(), line]
    } else {
        // `; true` keeps sh from exec'ing the last command itself, so the
        // server is a grandchild of the sidecar, not the handler's own
        // process.
        let line = format!(
            "'{BIN}' dev-mcp --http 127.0.0.1:0 > '{}'; true",
            out.display()
        );
        vec!["sh".into(), "-c".into(), line]
    };
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    exec_tool("tree", "d", &argv, extra)
}

/// The grandchild's address, once it has written it.
async fn grandchild_addr(dir: &Path) -> String {
    let file = dir.join("url.txt");
    let mut url = String::new();
    let found = wait_until(WAIT, || {
        url = std::fs::read_to_string(&file).unwrap_or_default();
        url.ends_with('\n')
    })
    .await;
    assert!(found, "the grandchild wrote no URL to {}", file.display());
    let rest = url.trim().strip_prefix("http://").expect("an http URL");
    rest.split('/').next().unwrap().to_string()
}

/// A refused connection on loopback comes back at once.
fn answers(addr: &str) -> bool {
    std::net::TcpStream::connect(addr).is_ok()
}

/// Starts a sidecar with the tree tool (`timeout`, a manifest line), calls
/// it, and waits for its grandchild to serve: the sidecar, the call in
/// flight and the grandchild's address.
async fn call_the_tree(
    dir: &Path,
    timeout: &str,
) -> (
    Arc<Sidecar>,
    tokio::task::JoinHandle<(u16, serde_json::Value)>,
    String,
) {
    let sc = Arc::new(Sidecar::start(&state(dir, &tree_tool(dir, timeout))).await);
    let call = tokio::spawn({
        let sc = sc.clone();
        async move { sc.call("tree", json!({})).await }
    });
    let addr = grandchild_addr(dir).await;
    assert!(answers(&addr), "the grandchild is not serving");
    (sc, call, addr)
}

#[tokio::test]
async fn a_timeout_ends_the_grandchildren_too() {
    let dir = tempfile::tempdir().unwrap();
    let (_sc, call, addr) = call_the_tree(dir.path(), "timeout_seconds = 3").await;
    failure(&call.await.unwrap(), "TOOL_TIMEOUT");
    let gone = wait_until(WAIT, || !answers(&addr)).await;
    assert!(
        gone,
        "the grandchild at {addr} outlived the handler's timeout"
    );
}

#[tokio::test]
async fn a_forced_drain_ends_the_grandchildren_too() {
    let dir = tempfile::tempdir().unwrap();
    let (sc, call, addr) = call_the_tree(dir.path(), "timeout_seconds = 60").await;
    let drained = sc
        .handle
        .drain(Instant::now() + Duration::from_millis(200))
        .await;
    assert_eq!(drained, Drained::Forced);
    failure(&call.await.unwrap(), "SIDECAR_SHUTTING_DOWN");
    let gone = wait_until(WAIT, || !answers(&addr)).await;
    assert!(gone, "the grandchild at {addr} outlived the drain");
}
