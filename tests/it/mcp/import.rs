//! `[[mcp_import]]` end to end: the MCP server lists of Claude Desktop, VS
//! Code and N.E.K.O's `mcp_adapter` (fixtures in `tests/fixtures/import/`,
//! whose servers are the stand-in MCP server) imported as they are, their
//! tools registered with the stand-in main_server and called as the model
//! calls them; N.E.K.O's three transports (stdio, the legacy HTTP+SSE and
//! Streamable HTTP) all bridged; and the imported file edited while the daemon runs (in place and by
//! rename, a server added, changed, disabled, broken and removed), which
//! only the watch can see, since the periodic rescan is a day away.

use std::path::Path;

use neko_sidecar::devmcp::{self, DevMcpOptions, HTTP_PATH, SseEndpoint};
use neko_sidecar::reload::FileHealth;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::support::admin::start;
use crate::support::daemon::InProcess;
use crate::support::mcp::*;
use crate::support::{BIN, WAIT, Workspace, dev_server, repo, wait_stand_in, wait_until};

/// A fixture of `tests/fixtures/import/`, with `@BIN@` made the sidecar
/// binary, `@URL@` the given URL and `@SSE_URL@` the given SSE URL,
/// written to `to`.
fn fixture(name: &str, to: &Path, url: &str, sse_url: &str) {
    let text = std::fs::read_to_string(repo().join("tests/fixtures/import").join(name))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"));
    let text = text
        .replace("@BIN@", BIN)
        .replace("@URL@", url)
        .replace("@SSE_URL@", sse_url);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::write(to, text).unwrap();
}

/// The stand-in MCP server over Streamable HTTP on a port-0 listener;
/// stops with the token.
async fn http_mcp() -> (String, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{HTTP_PATH}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(devmcp::serve_http(
        listener,
        DevMcpOptions::default(),
        stop.clone(),
    ));
    (url, stop)
}

/// The in-process daemon on `tools/import.toml` = `manifest`.
async fn rig(ws: Workspace, manifest: &str) -> Rig {
    let h = dev_server().await;
    ws.write_tool("import.toml", manifest);
    let mut agent = fast_agent(&ws, &h.url());
    // Only the watch can pick up an edit within a test's wait.
    agent.rescan_interval = "24h".into();
    let config = ws.write_config(&agent);
    let daemon = InProcess::start(&config).await;
    Rig { daemon, h, ws }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_desktop_servers_are_registered_and_called_as_they_are() {
    let ws = Workspace::new();
    let file = ws.root.join("Claude/claude_desktop_config.json");
    fixture("claude_desktop_config.json", &file, "", "");
    let rig = rig(
        ws,
        "[[mcp_import]]\npath = \"../Claude/claude_desktop_config.json\"\n",
    )
    .await;
    // Both stdio servers of the file; the https one is not bridged.
    let mut all = prefixed("dev_", &DEV_TOOLS);
    all.extend(prefixed("legacy_", &DEV_TOOLS));
    all.sort();
    wait_ours(&rig.h, &all).await;
    echoed(
        &rig.call("dev_echo", json!({"text": "from Claude's list"}))
            .await,
        "from Claude's list",
    )
    .unwrap();
    assert_eq!(
        rig.status("legacy").protocol.as_deref(),
        Some(LEGACY_PROTOCOL)
    );
    // The entry's env reached the server's process (the stand-in has no
    // tool that shows it; Linux's /proc does).
    #[cfg(target_os = "linux")]
    {
        let pid = pid_by_tool(&rig.h, "dev_").await;
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            environ
                .split(|b| *b == 0)
                .any(|v| v == b"NEKO_IMPORTED=from-claude"),
            "{}",
            String::from_utf8_lossy(&environ)
        );
    }
    let health = rig.daemon.daemon().reload.health();
    let unbridged = &health.files[0].unbridged;
    assert_eq!(unbridged.len(), 1, "{unbridged:#?}");
    assert_eq!(unbridged[0].name, "remote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vscode_servers_over_streamable_http_with_our_overrides() {
    let (url, stop) = http_mcp().await;
    let ws = Workspace::new();
    fixture(
        "vscode_mcp.json",
        &ws.root.join("proj/.vscode/mcp.json"),
        &url,
        "",
    );
    let manifest = "[[mcp_import]]\npath = \"../proj/.vscode/mcp.json\"\n\n[mcp_import.servers.web]\nprefix = \"w_\"\ninclude = [\"echo\", \"add\"]\nmax_concurrency = 2\n";
    let rig = rig(ws, manifest).await;
    wait_ours(&rig.h, &prefixed("w_", &["add", "echo"])).await;
    echoed(
        &rig.call("w_echo", json!({"text": "over http"})).await,
        "over http",
    )
    .unwrap();
    let s = rig.status("web");
    assert_eq!(s.transport, format!("http {url}"));
    assert_eq!(s.filtered, DEV_TOOLS.len() - 2);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neko_mcp_adapter_stdio_sse_and_streamable_http_servers_are_all_bridged() {
    let (url, stop) = http_mcp().await;
    let sse = SseMcp::start(SseEndpoint::Relative).await;
    let h = dev_server().await;
    let ws = Workspace::new();
    let plugin = ws
        .root
        .join("N.E.K.O/plugin/plugins/mcp_adapter/plugin.toml");
    fixture("neko_plugin.toml", &plugin, &url, &sse.url);
    ws.write_tool(
        "neko.toml",
        &format!(
            "[[mcp_import]]\npath = {:?}\n",
            plugin.display().to_string()
        ),
    );
    let run = start(&ws.admin_config(&h.url(), "")).await;
    let ready = wait_until(WAIT, || {
        let st = run.daemon.mcp.statuses();
        st.len() == 3 && st.iter().all(|s| s.tools.len() == DEV_TOOLS.len())
    })
    .await;
    assert!(ready, "{:#?}", run.daemon.mcp.statuses());
    // (This daemon's source is the admin tests', so `wait_ours` does not
    // apply: every tool of the three servers held in every role is the same.)
    wait_stand_in(&h, "the three servers' tools registered", |h| {
        let snap = h.registry_snapshot();
        snap.role_names().iter().all(|role| {
            let names = snap.names(role);
            DEV_TOOLS.iter().all(|t| {
                ["files", "search", "web"]
                    .iter()
                    .all(|server| names.contains(&format!("{server}_{t}").as_str()))
            })
        })
    })
    .await;
    for tool in ["web_add", "search_add"] {
        let a =
            crate::support::invoke(&h, crate::support::call(tool, json!({"a": 2, "b": 3}))).await;
        assert!(!a.is_error, "{tool}: {a:?}");
    }

    let s = run.status_json().await;
    let file = &s["manifests"]["files"][0];
    assert_eq!(file["not_bridged"], json!([]), "{s:#}");
    let transports: Vec<(&str, &str)> = s["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["transport"].as_str().unwrap(),
            )
        })
        .collect();
    // `paused` is `enabled = false`.
    let names: Vec<&str> = transports.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["files", "search", "web"]);
    assert!(transports[0].1.starts_with("stdio "), "{transports:?}");
    assert_eq!(transports[1].1, format!("sse {}", sse.url));
    assert_eq!(transports[2].1, format!("http {url}"));
    let warnings: Vec<&str> = file["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["text"].as_str().unwrap())
        .filter(|t| t.contains("not bridged"))
        .collect();
    assert_eq!(warnings, Vec::<&str>::new());
    run.stop().await;
    stop.cancel();
}

/// Claude Desktop's list with `servers` (name, argv after the binary).
fn claude(servers: &[(&str, Value)]) -> String {
    let mut list = serde_json::Map::new();
    for (name, v) in servers {
        list.insert(name.to_string(), v.clone());
    }
    serde_json::to_string_pretty(&json!({ "mcpServers": list })).unwrap()
}

fn dev(flags: &[&str]) -> Value {
    let mut args = vec!["dev-mcp"];
    args.extend_from_slice(flags);
    json!({"command": BIN, "args": args})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_of_the_imported_file_are_followed_in_place_and_by_rename_keeping_the_last_good() {
    let ws = Workspace::new();
    let file = ws.root.join("claude.json");
    std::fs::write(&file, claude(&[("a", dev(&[]))])).unwrap();
    let manifest = "[[mcp_import]]\npath = \"../claude.json\"\ninclude = [\"echo\"]\n";
    let rig = rig(ws, manifest).await;
    wait_ours(&rig.h, &prefixed("a_", &["echo"])).await;

    // Rewritten in place: a server added.
    std::fs::write(&file, claude(&[("a", dev(&[])), ("b", dev(&[]))])).unwrap();
    wait_ours(&rig.h, &["a_echo".to_string(), "b_echo".to_string()]).await;
    assert_eq!(rig.status("b").protocol.as_deref(), Some(CURRENT_PROTOCOL));

    // Replaced by rename, as editors save: `b` changed (restarted on the
    // older protocol), `a` disabled.
    let tmp = file.with_extension("json.tmp");
    let mut a = dev(&[]);
    a["disabled"] = json!(true);
    std::fs::write(&tmp, claude(&[("a", a), ("b", dev(&["--legacy"]))])).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    wait_ours(&rig.h, &["b_echo".to_string()]).await;
    rig.wait_server("b", "b on the legacy protocol", |s| {
        s.protocol.as_deref() == Some(LEGACY_PROTOCOL)
    })
    .await;

    // Broken: the file is in error at its line and column, and the last
    // good version keeps serving.
    std::fs::write(
        &file,
        "{\n  \"mcpServers\": {\n    \"b\": {}\n    \"c\": {}\n",
    )
    .unwrap();
    let health = rig.daemon.daemon().reload.health_updates();
    let ok = wait_until(WAIT, || {
        health
            .borrow()
            .files
            .first()
            .is_some_and(|f| f.health == FileHealth::Error)
    })
    .await;
    assert!(ok, "the broken file never showed: {:#?}", health.borrow());
    let report = health.borrow().files[0].clone();
    let text: Vec<String> = report.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [format!(
            "{}:4:5: error: not JSON: expected `,` or `}}` after an object member",
            rig.ws.tools.join("..").join("claude.json").display()
        )]
    );
    assert!(report.serving_last_good());
    echoed(
        &rig.call("b_echo", json!({"text": "still here"})).await,
        "still here",
    )
    .unwrap();

    // Fixed with every server removed: their tools go.
    std::fs::write(&file, claude(&[])).unwrap();
    wait_ours(&rig.h, &[]).await;
    let ok = wait_until(WAIT, || rig.statuses().is_empty()).await;
    assert!(ok, "{:#?}", rig.statuses());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_file_in_the_manifest_directory_spelled_another_way_and_the_manifest_are_both_followed()
 {
    let ws = Workspace::new();
    // Not a *.toml, so not a manifest itself; named through `..`, so its
    // folder is the manifest directory under another spelling.
    let file = ws.tools.join("claude.json");
    std::fs::write(&file, claude(&[("a", dev(&[]))])).unwrap();
    let manifest = "[[mcp_import]]\npath = \"../tools/claude.json\"\ninclude = [\"echo\"]\n";
    let rig = rig(ws, manifest).await;
    wait_ours(&rig.h, &prefixed("a_", &["echo"])).await;

    std::fs::write(&file, claude(&[("a", dev(&[])), ("b", dev(&[]))])).unwrap();
    wait_ours(&rig.h, &prefixed("", &["a_echo", "b_echo"])).await;

    // The manifest's own edit is seen too.
    rig.ws.write_tool(
        "import.toml",
        "[[mcp_import]]\npath = \"../tools/claude.json\"\ninclude = [\"add\"]\n",
    );
    wait_ours(&rig.h, &prefixed("", &["a_add", "b_add"])).await;
}
