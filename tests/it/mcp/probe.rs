//! `neko-sidecar check --probe`, the real binary: every MCP server started
//! once and its listing judged as the daemon would; a tool that would not be
//! offered fails the check with its reason at the server's PATH:LINE:COL,
//! and a clean deployment passes and lists what it offers.

use std::process::Output;

use neko_sidecar::devmcp::{LONG_TOOL_NAME, SseEndpoint};
use tokio::process::Command;

use crate::support::daemon::clean_env;
use crate::support::mcp::*;
use crate::support::{BIN, WAIT, Workspace, bin_as_written};

/// `check --probe` on a workspace whose `tools/mcp.toml` is `manifest`;
/// main_server is never contacted.
async fn probe(manifest: &str) -> (Workspace, Output) {
    let ws = Workspace::new();
    ws.write_tool("mcp.toml", manifest);
    let config = ws.write_config(&fast_agent(&ws, "http://127.0.0.1:9"));
    let mut cmd = Command::new(BIN);
    cmd.arg("check").arg("--probe").arg("--config").arg(&config);
    clean_env(&mut cmd);
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("check --probe ends")
        .expect("running check --probe");
    (ws, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_probe_fails_naming_a_rejected_tool_at_its_servers_place() {
    // The table starts on line 2, column 1.
    let manifest = format!(
        "# a server whose one tool is too long once prefixed\n{}",
        stdio_server("files", &["--long-name"], "")
    );
    let (ws, out) = probe(&manifest).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let long = format!("files_{LONG_TOOL_NAME}");
    let at = format!("{}:2:1: error: ", ws.tool_path("mcp.toml").display());
    let line = stdout
        .lines()
        .find(|l| l.contains(&long))
        .unwrap_or_else(|| panic!("no line names {long}:\n{stdout}"));
    assert!(line.starts_with(&at), "{line}");
    assert!(line.contains("would not be offered"), "{line}");
    assert!(line.contains("66 characters long"), "{line}");
    assert!(stdout.contains("11 tools offered"), "{stdout}");
    assert!(stdout.contains("probe of 1 MCP server: failed"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_probe_of_a_clean_deployment_passes_and_lists_the_tools() {
    let (_ws, out) = probe(&stdio_server("dev", &[], "")).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<String> = DEV_TOOLS.iter().map(|t| format!("dev_{t}")).collect();
    let offered = format!(
        "protocol {CURRENT_PROTOCOL}: 11 tools offered: {}",
        listed.join(", ")
    );
    assert!(stdout.contains(&offered), "{offered:?} missing:\n{stdout}");
    assert!(stdout.contains("probe of 1 MCP server: ok"), "{stdout}");
    assert!(!stdout.contains(": error: "), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_probe_lists_the_tools_of_each_imported_server() {
    let sse = SseMcp::start(SseEndpoint::Relative).await;
    let ws = Workspace::new();
    let claude = ws.root.join("claude_desktop_config.json");
    let list = serde_json::json!({"mcpServers": {
        "dev": {"command": BIN, "args": ["dev-mcp"]},
        "old": {"type": "sse", "url": sse.url},
    }});
    std::fs::write(&claude, list.to_string()).unwrap();
    ws.write_tool(
        "import.toml",
        "[[mcp_import]]\npath = \"../claude_desktop_config.json\"\ninclude = [\"echo\", \"add\"]\n",
    );
    let config = ws.write_config(&fast_agent(&ws, "http://127.0.0.1:9"));
    let mut cmd = Command::new(BIN);
    cmd.arg("check").arg("--probe").arg("--config").arg(&config);
    clean_env(&mut cmd);
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("check --probe ends")
        .expect("running check --probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // The program as found: on Windows, with the separators Windows writes.
    let bin = bin_as_written();
    assert!(
        stdout.contains(&format!(
            "MCP server `dev` (stdio {bin} dev-mcp), protocol {CURRENT_PROTOCOL}: 2 tools offered: dev_echo, dev_add (0 rejected, 9 left out by include/exclude)"
        )),
        "{stdout}"
    );
    // The legacy SSE server, bridged like the others.
    assert!(
        stdout.contains(&format!(
            "MCP server `old` (sse {}), protocol {LEGACY_PROTOCOL}: 2 tools offered: old_echo, old_add (0 rejected, 9 left out by include/exclude)",
            sse.url
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("not bridged"), "{stdout}");
    assert!(stdout.contains("probe of 2 MCP servers: ok"), "{stdout}");
}
