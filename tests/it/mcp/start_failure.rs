//! A stdio MCP server that fails to start says why, wherever its failure
//! is shown: the end of its stderr, with a hint for the common causes, in
//! `/status`, the inspector's status part and `check --probe`. The servers
//! are `sh` scripts (Unix): one dies as a Python program whose import
//! fails does, one exits at once without a word, one is not installed.

use std::process::Output;

use serde_json::Value;

use crate::support::admin::start;
use crate::support::mcp::*;
use crate::support::{Workspace, dev_server};

/// What a Python server prints when the `mcp` package is missing, then
/// exit 1, as `python3 weather.py` does.
const TRACEBACK: &str = r#"cat >&2 <<'EOF'
Traceback (most recent call last):
  File "/srv/weather.py", line 3, in <module>
    from mcp.server.fastmcp import FastMCP
ModuleNotFoundError: No module named 'mcp'
EOF
exit 1
"#;

/// An `[[mcp_server]]` named `name` running `script` with `sh`.
fn sh_server(ws: &Workspace, name: &str, script: &str) -> String {
    let path = ws.root.join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    format!(
        "[[mcp_server]]\nname = \"{name}\"\ncommand = [\"sh\", \"{}\"]\n",
        path.display()
    )
}

/// The line of `check --probe`'s output that says why `name` failed.
fn probe_line(out: &Output, name: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    stdout
        .lines()
        .find(|l| {
            l.contains(&format!("MCP server `{name}` (stdio")) && l.contains("could not be probed")
        })
        .unwrap_or_else(|| panic!("no line about {name}:\n{stdout}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_server_missing_its_module_says_which_and_how_to_install_it() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("mcp.toml", &sh_server(&ws, "weather", TRACEBACK));
    let run = start(&ws.admin_config(&h.url(), "")).await;

    let error = eventually("/status to give weather's failure", || async {
        let s = run.status_json().await;
        match s["mcp_servers"][0]["last_error"].as_str() {
            Some(e) if e.contains("stderr") => Ok(e.to_string()),
            _ => Err(format!("{s:#}")),
        }
    })
    .await;
    assert!(error.starts_with("the handshake failed: "), "{error}");
    assert!(
        error.contains(
            " | from mcp.server.fastmcp import FastMCP | ModuleNotFoundError: No module named 'mcp' (hint: "
        ),
        "{error}"
    );
    assert!(
        error.contains("(hint: the Python module `mcp` is not installed")
            && error.contains("python3 -m pip install mcp"),
        "{error}"
    );
    // The inspector's status part shows the same reason (HTML-escaped).
    let (code, part) = run.get("/ui/status").await;
    assert_eq!(code, 200);
    assert!(
        part.contains("ModuleNotFoundError: No module named &#39;mcp&#39;"),
        "{part}"
    );
    assert!(part.contains("python3 -m pip install mcp"), "{part}");
    run.stop().await;

    let ws = Workspace::new();
    let out = probe(&ws, &sh_server(&ws, "weather", TRACEBACK)).await;
    let line = probe_line(&out, "weather");
    assert!(
        line.contains("could not be probed: the handshake failed: "),
        "{line}"
    );
    assert!(
        line.contains("ModuleNotFoundError: No module named 'mcp' (hint: the Python module `mcp`"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_at_once_without_a_word_says_so() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("mcp.toml", &sh_server(&ws, "mute", "exit 1\n"));
    let run = start(&ws.admin_config(&h.url(), "")).await;
    let error: Value = eventually("/status to give mute's failure", || async {
        let s = run.status_json().await;
        let e = s["mcp_servers"][0]["last_error"].clone();
        if e.as_str().is_some_and(|e| e.contains("stderr")) {
            Ok(e)
        } else {
            Err(format!("{s:#}"))
        }
    })
    .await;
    let error = error.as_str().unwrap();
    assert!(
        error.contains("exited with status 1")
            && error.contains(
                "; it exited at once and wrote nothing on stderr (hint: run its `command` by hand"
            ),
        "{error}"
    );
    run.stop().await;

    let ws = Workspace::new();
    let out = probe(&ws, &sh_server(&ws, "mute", "exit 1\n")).await;
    let line = probe_line(&out, "mute");
    assert!(
        line.contains("it exited at once and wrote nothing on stderr"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_program_is_not_installed_says_so() {
    let ws = Workspace::new();
    let manifest =
        "[[mcp_server]]\nname = \"gone\"\ncommand = [\"no-such-mcp-server-here\", \"--stdio\"]\n";
    let out = probe(&ws, manifest).await;
    let line = probe_line(&out, "gone");
    assert!(
        line.contains("cannot start `no-such-mcp-server-here`: not found on PATH")
            && line.contains("(hint: install it, or give its full path"),
        "{line}"
    );
}
