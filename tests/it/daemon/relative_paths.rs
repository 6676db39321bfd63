//! Hot reload of the real binary run as the README runs it: from the
//! folder of a relative `--config`, whose `manifest_dirs`, schema file and
//! imported server list are relative too (issue 33: notify names events by
//! absolute paths, which a watcher comparing them with relative ones never
//! matched, so no edit was ever reloaded). Every kind of save is followed:
//! a manifest rewritten in place, replaced by rename, deleted then
//! re-created; a schema file outside the manifest directory replaced by
//! rename; an imported Claude Desktop list rewritten in place (a server
//! removed, so no server start is waited for). The
//! periodic rescan is a day away, so only the watch can pick up an edit,
//! and each one must be registered within the debounce plus a second.

use std::path::{Path, PathBuf};
use std::time::Duration;

use neko_sidecar::devserver::DevServerHandle;
use serde_json::{Value, json};

use crate::support::daemon::*;
use crate::support::{BIN, Workspace, describe, dev_server, exec_tool};

/// The reload debounce of this test's config.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// What the stand-in should hold of ours: `alpha` at `alpha`'s tag, `beta`
/// with the schema of `beta`'s tag, and the imported servers' `echo` tools.
struct Expect<'a> {
    alpha: &'a str,
    beta: &'a str,
    imported: &'a [&'a str],
}

fn holds(h: &DevServerHandle, e: &Expect<'_>) -> bool {
    let snap = h.registry_snapshot();
    let mut names: Vec<String> = vec!["alpha".into(), "beta".into()];
    names.extend(e.imported.iter().map(|s| format!("{s}_echo")));
    names.sort();
    snap.role_names().iter().all(|role| {
        let mine = ours(&snap, role);
        let find = |n: &str| mine.iter().find(|t| t.name == n);
        our_names(&snap, role) == names
            && find("alpha").is_some_and(|t| {
                t.description == format!("alpha {}", e.alpha) && t.parameters == schema_of(e.alpha)
            })
            && find("beta").is_some_and(|t| t.parameters == schema_of(e.beta))
    })
}

/// Waits at most the debounce plus a second for `e`; the periodic rescan
/// cannot help within that.
async fn registered(h: &DevServerHandle, step: &str, e: Expect<'_>) {
    let within = DEBOUNCE + Duration::from_secs(1);
    if !h.wait_for(within, |h| holds(h, &e)).await {
        panic!(
            "{step}: not registered within {within:?}; registry: {}",
            describe(&h.registry_snapshot())
        );
    }
}

/// Claude Desktop's list of stand-in MCP servers named `names`.
fn claude(names: &[&str]) -> String {
    let servers: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| (n.to_string(), json!({"command": BIN, "args": ["dev-mcp"]})))
        .collect();
    serde_json::to_string_pretty(&json!({ "mcpServers": servers })).unwrap()
}

/// Writes `text` to a temporary file beside `path`, then renames it over
/// `path`, as editors save.
fn rename_over(path: &Path, text: &str) {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_config_follows_edits_of_manifests_schemas_and_imported_files() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("alpha.toml", &tool("alpha", "v1"));
    std::fs::create_dir(ws.root.join("schemas")).unwrap();
    let schema = ws.root.join("schemas/beta.json");
    std::fs::write(&schema, schema_of("s1").to_string()).unwrap();
    let shell: &[&str] = if cfg!(windows) {
        &["cmd", "/c", "echo beta"]
    } else {
        &["sh", "-c", "cat >/dev/null; echo beta"]
    };
    ws.write_tool(
        "beta.toml",
        &exec_tool(
            "beta",
            "beta",
            shell,
            "parameters_file = \"../schemas/beta.json\"",
        ),
    );
    let imported = ws.root.join("claude.json");
    std::fs::write(&imported, claude(&["a", "b"])).unwrap();
    ws.write_tool(
        "import.toml",
        "[[mcp_import]]\npath = \"../claude.json\"\ninclude = [\"echo\"]\n",
    );

    let mut agent = ws.agent(&h.url());
    // As the user writes them: relative to the config's folder.
    agent.manifest_dirs = vec![PathBuf::from("tools")];
    agent.debounce = format!("{}ms", DEBOUNCE.as_millis());
    agent.rescan_interval = "24h".into();
    ws.write_config(&agent);
    let mut cmd = run_command(Path::new("agent.toml"));
    cmd.current_dir(&ws.root);
    let _sidecar = Sidecar::spawn_command(cmd);

    // The first load has no deadline of the watch's: MCP servers start.
    wait_stand_in_expect(
        &h,
        Expect {
            alpha: "v1",
            beta: "s1",
            imported: &["a", "b"],
        },
    )
    .await;

    let alpha = ws.tool_path("alpha.toml");
    std::fs::write(&alpha, tool("alpha", "v2")).unwrap();
    registered(
        &h,
        "a manifest written in place",
        Expect {
            alpha: "v2",
            beta: "s1",
            imported: &["a", "b"],
        },
    )
    .await;

    rename_over(&alpha, &tool("alpha", "v3"));
    registered(
        &h,
        "a manifest replaced by rename",
        Expect {
            alpha: "v3",
            beta: "s1",
            imported: &["a", "b"],
        },
    )
    .await;

    std::fs::remove_file(&alpha).unwrap();
    std::fs::write(&alpha, tool("alpha", "v4")).unwrap();
    registered(
        &h,
        "a manifest deleted and created again",
        Expect {
            alpha: "v4",
            beta: "s1",
            imported: &["a", "b"],
        },
    )
    .await;

    rename_over(&schema, &schema_of("s2").to_string());
    registered(
        &h,
        "a schema file outside the manifest directory replaced by rename",
        Expect {
            alpha: "v4",
            beta: "s2",
            imported: &["a", "b"],
        },
    )
    .await;

    // A server removed: its tools go without waiting for any start.
    std::fs::write(&imported, claude(&["b"])).unwrap();
    registered(
        &h,
        "an imported server list rewritten in place",
        Expect {
            alpha: "v4",
            beta: "s2",
            imported: &["b"],
        },
    )
    .await;
}

/// Waits for `e` with the suite's deadline ([`crate::support::WAIT`]).
async fn wait_stand_in_expect(h: &DevServerHandle, e: Expect<'_>) {
    crate::support::wait_stand_in(h, "our tools", |h| holds(h, &e)).await;
}
