//! Manifest reloads of the real binary (`neko-sidecar run`), judged by what
//! the stand-in main_server ends up holding, schema included: every way an
//! editor or a deployment replaces a manifest (in-place write, truncate then
//! write, rename over, vim's backup-and-rename, delete and re-create, a
//! Kubernetes ConfigMap symlink swap) registers the new version; dotfiles
//! and editor leftovers are never read; a broken edit keeps the last good
//! tools; a deleted file unregisters its tools; SIGHUP re-reads what no
//! file event announces (a schema file outside the watched directory).

use std::io::Write;
use std::os::unix::fs::symlink;

use neko_sidecar::devserver::DevServerHandle;
use rustix::process::Signal;
use serde_json::json;

use crate::support::daemon::*;
use crate::support::{WAIT, Workspace, dev_server, wait_stand_in};

/// A stand-in, a workspace and the daemon running on it.
struct Rig {
    ws: Workspace,
    h: DevServerHandle,
    sidecar: Sidecar,
}

/// Starts the daemon after `setup` wrote the manifests.
async fn rig(setup: impl FnOnce(&Workspace), tweak: impl FnOnce(&mut AgentToml)) -> Rig {
    let h = dev_server().await;
    let ws = Workspace::new();
    setup(&ws);
    let mut agent = ws.agent(&h.url());
    tweak(&mut agent);
    let config = ws.write_config(&agent);
    let sidecar = Sidecar::spawn(&config);
    Rig { ws, h, sidecar }
}

/// The daemon holding `alpha` v1 from `x.toml`.
async fn alpha_v1() -> Rig {
    let r = rig(
        |ws| drop(ws.write_tool("x.toml", &tool("alpha", "v1"))),
        |_| {},
    )
    .await;
    wait_holds(&r.h, &[("alpha", "v1")]).await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_overwrite_registers_the_new_version() {
    let r = alpha_v1().await;
    // Same inode, bytes rewritten from the start, no truncation first (the
    // new text is longer, then the length is fixed up).
    let text = tools(&["alpha", "beta"], "v2");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(r.ws.tool_path("x.toml"))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.set_len(text.len() as u64).unwrap();
    drop(f);
    wait_holds(&r.h, &[("alpha", "v2"), ("beta", "v2")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_then_write_registers_the_new_version() {
    let r = alpha_v1().await;
    let text = tool("alpha", "v2");
    let (head, rest) = text.split_at(text.len() / 2);
    // An empty file first, then the text in two flushed writes.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(r.ws.tool_path("x.toml"))
        .unwrap();
    f.sync_data().unwrap();
    f.write_all(head.as_bytes()).unwrap();
    f.sync_data().unwrap();
    f.write_all(rest.as_bytes()).unwrap();
    drop(f);
    wait_holds(&r.h, &[("alpha", "v2")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atomic_rename_over_registers_the_new_version() {
    let r = alpha_v1().await;
    let tmp = r.ws.write_tool("x.toml.tmp", &tool("alpha", "v2"));
    std::fs::rename(&tmp, r.ws.tool_path("x.toml")).unwrap();
    wait_holds(&r.h, &[("alpha", "v2")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vims_backup_and_rename_registers_the_new_version() {
    let r = alpha_v1().await;
    let x = r.ws.tool_path("x.toml");
    // What vim does with `backupcopy=no`: a swap file while editing, a
    // probe file for writability, the original renamed to a backup, the
    // new text written to a fresh file, the backup removed.
    let swap = r.ws.write_tool(".x.toml.swp", "\u{0}vim swap\u{0}");
    let probe = r.ws.write_tool("4913", "");
    std::fs::remove_file(&probe).unwrap();
    let backup = r.ws.tool_path("x.toml~");
    std::fs::rename(&x, &backup).unwrap();
    std::fs::write(&x, tool("alpha", "v2")).unwrap();
    std::fs::remove_file(&backup).unwrap();
    std::fs::remove_file(&swap).unwrap();
    wait_holds(&r.h, &[("alpha", "v2")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_recreate_registers_the_new_version() {
    let r = alpha_v1().await;
    let x = r.ws.tool_path("x.toml");
    std::fs::remove_file(&x).unwrap();
    std::fs::write(&x, tool("alpha", "v2")).unwrap();
    wait_holds(&r.h, &[("alpha", "v2")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_symlink_swap_registers_the_new_version() {
    // The kubelet's layout: x.toml -> ..data/x.toml, ..data -> ..v1.
    let r = rig(
        |ws| {
            let v1 = ws.tool_path("..v1");
            std::fs::create_dir(&v1).unwrap();
            std::fs::write(v1.join("x.toml"), tool("alpha", "v1")).unwrap();
            symlink("..v1", ws.tool_path("..data")).unwrap();
            symlink("..data/x.toml", ws.tool_path("x.toml")).unwrap();
        },
        |_| {},
    )
    .await;
    wait_holds(&r.h, &[("alpha", "v1")]).await;

    // An update: a new version directory, a new link renamed over ..data
    // (atomic), the old directory removed. x.toml itself never changes.
    let v2 = r.ws.tool_path("..v2");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(v2.join("x.toml"), tool("alpha", "v2")).unwrap();
    symlink("..v2", r.ws.tool_path("..data_tmp")).unwrap();
    std::fs::rename(r.ws.tool_path("..data_tmp"), r.ws.tool_path("..data")).unwrap();
    std::fs::remove_dir_all(r.ws.tool_path("..v1")).unwrap();
    wait_holds(&r.h, &[("alpha", "v2")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotfiles_and_editor_leftovers_are_never_read() {
    let r = rig(
        |ws| {
            ws.write_tool("x.toml", &tool("alpha", "v1"));
            // Valid manifests under names that must be skipped.
            ws.write_tool(".hidden.toml", &tool("hidden", "v1"));
            ws.write_tool("x.toml~", &tool("tilde", "v1"));
            ws.write_tool("x.toml.bak", &tool("bak", "v1"));
            // Emacs' lock file: a dangling symlink named like a manifest.
            symlink("user@host.1234:1", ws.tool_path(".#x.toml")).unwrap();
        },
        |_| {},
    )
    .await;
    wait_holds(&r.h, &[("alpha", "v1")]).await;

    // While running: a swap file with garbage and another hidden manifest,
    // then a real change, so the later state proves the junk was seen and
    // skipped (a rescan reads the whole directory).
    r.ws.write_tool(".x.toml.swp", "\u{0}\u{1}not toml at all [[[");
    r.ws.write_tool(".y.toml", &tool("hidden2", "v1"));
    r.ws.write_tool("#x.toml#", &tool("autosave", "v1"));
    r.ws.write_tool("y.toml", &tool("beta", "v1"));
    wait_holds(&r.h, &[("alpha", "v1"), ("beta", "v1")]).await;

    let errors: Vec<String> = r
        .sidecar
        .stderr()
        .into_iter()
        .filter(|l| l.contains("ERROR"))
        .collect();
    assert!(errors.is_empty(), "junk files caused errors: {errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_edit_keeps_the_last_good_tools_and_schema() {
    let r = alpha_v1().await;
    let x = r.ws.tool_path("x.toml");
    // Half a save: the text ends inside a string.
    let text = tool("alpha", "v2");
    std::fs::write(&x, &text[..text.find("v2").unwrap()]).unwrap();
    let x_name = x.display().to_string();
    r.sidecar
        .wait_log("an error about the broken x.toml", |l| {
            l.contains("ERROR") && l.contains(&x_name)
        })
        .await;

    // Another file's change is applied: the broken one was dealt with, and
    // alpha stayed as it was.
    r.ws.write_tool("y.toml", &tool("beta", "v1"));
    wait_holds(&r.h, &[("alpha", "v1"), ("beta", "v1")]).await;
    let alpha_requests =
        r.h.requests()
            .into_iter()
            .filter(|q| q.method == "POST" && q.body["name"] == "alpha")
            .map(|q| q.path)
            .collect::<Vec<_>>();
    assert_eq!(
        alpha_requests,
        ["/api/tools/register"],
        "alpha was registered once, never touched by the broken edit"
    );

    // Fixing the file applies the fix.
    std::fs::write(&x, tool("alpha", "v3")).unwrap();
    wait_holds(&r.h, &[("alpha", "v3"), ("beta", "v1")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_file_unregisters_its_tools() {
    let r = rig(
        |ws| {
            ws.write_tool("a.toml", &tool("alpha", "v1"));
            ws.write_tool("b.toml", &tools(&["beta", "gamma"], "v1"));
        },
        |_| {},
    )
    .await;
    wait_holds(&r.h, &[("alpha", "v1"), ("beta", "v1"), ("gamma", "v1")]).await;

    std::fs::remove_file(r.ws.tool_path("b.toml")).unwrap();
    wait_holds(&r.h, &[("alpha", "v1")]).await;
    let mut unregistered: Vec<String> =
        r.h.requests()
            .into_iter()
            .filter(|q| q.path == "/api/tools/unregister")
            .map(|q| q.body["name"].as_str().unwrap_or_default().to_owned())
            .collect();
    unregistered.sort();
    assert_eq!(unregistered, ["beta", "gamma"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_a_schema_file_no_event_announces() {
    // The schema lives outside the watched directory and the periodic
    // rescan is an hour away: only SIGHUP can notice its change.
    let r = rig(
        |ws| {
            let schemas = ws.root.join("schemas");
            std::fs::create_dir(&schemas).unwrap();
            std::fs::write(schemas.join("alpha.json"), schema_of("v1").to_string()).unwrap();
            ws.write_tool(
                "x.toml",
                r#"[[tool]]
name = "alpha"
description = "alpha v1"
parameters_file = "../schemas/alpha.json"
handler = { type = "exec", command = ["sh", "-c", "cat >/dev/null; echo alpha"] }
"#,
            );
        },
        |agent| agent.rescan_interval = "1h".into(),
    )
    .await;
    wait_holds(&r.h, &[("alpha", "v1")]).await;

    let v2 =
        json!({"type": "object", "properties": {"v2": {"type": "string"}}, "required": ["v2"]});
    std::fs::write(r.ws.root.join("schemas/alpha.json"), v2.to_string()).unwrap();

    r.sidecar.signal(Signal::HUP);
    r.sidecar
        .wait_log("the SIGHUP reload", |l| l.contains("reloading (SIGHUP)"))
        .await;
    wait_stand_in(&r.h, "alpha's schema v2 in every role", |h| {
        let snap = h.registry_snapshot();
        snap.role_names().iter().all(|role| {
            ours(&snap, role)
                .iter()
                .any(|t| t.name == "alpha" && t.parameters == v2)
        })
    })
    .await;
}

/// Regression: the daemon's own reads of the manifests (inotify `IN_OPEN` /
/// `IN_CLOSE_NOWRITE`, "access" events) counted as changes, so every rescan
/// scheduled the next one a debounce later, forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_manifests_does_not_trigger_rescans() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tool("alpha", "v1"));
    let mut agent = ws.agent(&h.url());
    agent.debounce = "20ms".into();
    agent.rescan_interval = "1h".into();
    let config = ws.write_config(&agent);
    let d = InProcess::start(&config).await;
    wait_holds(&h, &[("alpha", "v1")]).await;

    // The first load and the reloader's startup rescan: two reads.
    let mut updates = d.daemon().reload.health_updates();
    tokio::time::timeout(WAIT, updates.wait_for(|s| s.rescans >= 2))
        .await
        .expect("the startup rescan")
        .unwrap();
    // Nothing changes on disk: twenty-five debounce periods without a rescan.
    let more = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        updates.wait_for(|s| s.rescans > 2),
    )
    .await;
    assert!(
        more.is_err(),
        "a rescan ran with no change on disk: {} rescans",
        d.daemon().reload.health().rescans
    );
}
