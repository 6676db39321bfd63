//! What main_server holds of a stdio MCP server (the stand-in, run by the
//! in-process daemon as its child): the prefix, `include` and `exclude`; a
//! paged listing in full; `list_changed` followed both ways on both protocol
//! generations; names and schemas refused one tool at a time; a manifest
//! edit that restarts the server without unregistering what did not change.

use neko_sidecar::devmcp::{BAD_SCHEMA_TOOL, EXTRA_TOOL, LONG_TOOL_NAME};
use neko_sidecar::mcp::Phase;
use serde_json::json;

use crate::support::mcp::*;
#[cfg(target_os = "linux")]
use crate::support::{WAIT, process_gone, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_include_and_exclude_decide_the_tools_main_server_holds() {
    let manifest = [
        stdio_server(
            "files",
            &[],
            "prefix = \"f_\"\ninclude = [\"echo\", \"add\", \"stats\"]\nexclude = [\"stats\"]",
        ),
        // No prefix: the server's name and `_`.
        stdio_server("dev", &[], "exclude = [\"hang\", \"toggle\"]"),
    ]
    .concat();
    let rig = Rig::start(&manifest).await;
    let dev: Vec<&str> = DEV_TOOLS
        .iter()
        .copied()
        .filter(|t| !["hang", "toggle"].contains(t))
        .collect();
    let mut expected = prefixed("dev_", &dev);
    expected.extend(prefixed("f_", &["add", "echo"]));
    expected.sort();
    wait_ours(&rig.h, &expected).await;

    let files = rig.status("files");
    assert_eq!(files.tools.len(), 2, "{files:#?}");
    assert_eq!(files.filtered, DEV_TOOLS.len() - 2, "{files:#?}");
    assert_eq!(rig.status("dev").filtered, 2);

    // The prefixed name calls the MCP tool of its server.
    let a = rig.call("f_echo", json!({"text": "through f_"})).await;
    echoed(&a, "through f_").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_of_a_paged_listing_is_registered() {
    let rig = Rig::start(&stdio_server("dev", &["--page-size", "2"], "")).await;
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    // The last tool is on the sixth page.
    let a = rig.call("dev_toggle", json!({})).await;
    assert!(!a.is_error, "{}", a.model_text);
}

/// `toggle` adds `extra` and says so: main_server gets it; again, and it
/// goes. The other tools stay registered all along.
async fn list_changed_is_followed_both_ways(flags: &[&str]) {
    let rig = Rig::start(&stdio_server("dev", flags, "")).await;
    let all = prefixed("dev_", &DEV_TOOLS);
    wait_ours(&rig.h, &all).await;

    let a = rig.call("dev_toggle", json!({})).await;
    assert_eq!(a.model_text, "extra added");
    let mut with_extra = prefixed("dev_", &DEV_TOOLS);
    with_extra.push(format!("dev_{EXTRA_TOOL}"));
    with_extra.sort();
    wait_ours(&rig.h, &with_extra).await;
    let a = rig.call("dev_extra", json!({"text": "here"})).await;
    echoed(&a, "here").unwrap();

    let a = rig.call("dev_toggle", json!({})).await;
    assert_eq!(a.model_text, "extra removed");
    wait_ours(&rig.h, &all).await;
    assert_eq!(removals(&rig.h, &all), vec![], "the other tools stayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_registers_and_unregisters_the_toggled_tool() {
    list_changed_is_followed_both_ways(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_of_a_legacy_server_registers_and_unregisters_the_toggled_tool() {
    list_changed_is_followed_both_ways(&["--legacy"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_current_server_is_spoken_to_in_2026_07_28() {
    let rig = Rig::start(&stdio_server("dev", &[], "")).await;
    let s = rig
        .wait_server("dev", "ready", |s| s.phase == Phase::Ready)
        .await;
    assert_eq!(s.protocol.as_deref(), Some(CURRENT_PROTOCOL), "{s:#?}");
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    echoed(&rig.call("dev_echo", json!({"text": "new"})).await, "new").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_server_is_spoken_to_in_2025_11_25() {
    let rig = Rig::start(&stdio_server("dev", &["--legacy"], "")).await;
    let s = rig
        .wait_server("dev", "ready", |s| s.phase == Phase::Ready)
        .await;
    assert_eq!(s.protocol.as_deref(), Some(LEGACY_PROTOCOL), "{s:#?}");
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    echoed(&rig.call("dev_echo", json!({"text": "old"})).await, "old").unwrap();
    let a = rig.call("dev_add", json!({"a": 2, "b": 3})).await;
    assert_eq!(a.output, json!({"sum": 5}), "{}", a.model_text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefixed_name_over_64_characters_is_rejected_with_its_length() {
    let rig = Rig::start(&stdio_server("files", &["--long-name"], "")).await;
    // The others are registered; the long one never is.
    wait_ours(&rig.h, &prefixed("files_", &DEV_TOOLS)).await;
    let long = format!("files_{LONG_TOOL_NAME}");
    let s = rig
        .wait_server("files", "the long name judged", |s| !s.rejected.is_empty())
        .await;
    assert_eq!(s.rejected.len(), 1, "{s:#?}");
    assert_eq!(s.rejected[0].name, long);
    let reason = &s.rejected[0].reason;
    assert!(reason.contains("66 characters"), "{reason}");
    assert!(reason.contains("at most 64"), "{reason}");
    assert!(!s.tools.contains(&long));
    assert!(
        !rig.h
            .requests()
            .iter()
            .any(|r| r.body["name"] == long.as_str()),
        "main_server was never asked to register it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_an_invalid_input_schema_is_rejected_naming_the_schema() {
    let rig = Rig::start(&stdio_server("dev", &["--bad-schema"], "")).await;
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    let bad = format!("dev_{BAD_SCHEMA_TOOL}");
    let s = rig
        .wait_server("dev", "the bad schema judged", |s| !s.rejected.is_empty())
        .await;
    assert_eq!(s.rejected.len(), 1, "{s:#?}");
    assert_eq!(s.rejected[0].name, bad);
    let reason = &s.rejected[0].reason;
    assert!(reason.contains("inputSchema is refused"), "{reason}");
    assert!(reason.contains("nonsense"), "{reason}");
    assert!(
        !rig.h
            .requests()
            .iter()
            .any(|r| r.body["name"] == bad.as_str()),
        "main_server was never asked to register it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_edit_restarts_the_server_and_unchanged_tools_stay_registered() {
    let rig = Rig::start(&stdio_server("dev", &[], "include = [\"echo\", \"add\"]")).await;
    wait_ours(&rig.h, &prefixed("dev_", &["add", "echo"])).await;
    let first = rig
        .wait_server("dev", "a pid", |s| s.pid.is_some())
        .await
        .pid
        .unwrap();

    rig.ws.write_tool(
        "mcp.toml",
        &stdio_server("dev", &[], "include = [\"echo\", \"stats\"]"),
    );
    wait_ours(&rig.h, &prefixed("dev_", &["echo", "stats"])).await;
    let s = rig
        .wait_server("dev", "a new process, ready", |s| {
            s.phase == Phase::Ready && s.pid.is_some_and(|p| p != first)
        })
        .await;
    assert_eq!(s.tools.len(), 2, "{s:#?}");
    // The process table is read from /proc.
    #[cfg(target_os = "linux")]
    assert!(
        wait_until(WAIT, || process_gone(first)).await,
        "the old process is gone"
    );

    let gone = removals(&rig.h, &prefixed("dev_", &["add", "echo", "stats"]));
    assert_eq!(gone.len(), 1, "only dev_add was unregistered: {gone:#?}");
    assert_eq!(gone[0].body["name"], "dev_add");
    echoed(
        &rig.call("dev_echo", json!({"text": "still"})).await,
        "still",
    )
    .unwrap();
    let a = rig.call("dev_stats", json!({})).await;
    assert!(!a.is_error, "{}", a.model_text);
}
