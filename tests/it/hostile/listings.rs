//! Hostile listings: a `nextCursor` for ever (before issue 49, 4.66 GB
//! within the listing's 20 s, "got no answer" in the status), and tools
//! renamed at every listing under a flood of `list_changed` (before, every
//! notice a listing: the CPU pinned and ~9,500 requests a second to
//! main_server). Another server's tools stay registered and callable.

use std::time::Instant;

use neko_sidecar::devmcp::{CHURN_NOTICES, DevMcpOptions, Fault, SseEndpoint};
use serde_json::json;

use crate::support::mcp::*;
use crate::support::{WAIT, wait_until};

async fn hostile(fault: Fault) -> SseMcp {
    SseMcp::start_with(
        SseEndpoint::Relative,
        DevMcpOptions {
            fault: Some(fault),
            ..DevMcpOptions::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_listing_is_refused_at_100_pages_with_the_reason() {
    let server = hostile(Fault::EndlessPages).await;
    let manifest = format!(
        "{}{}",
        sse_server("pages", &server.url, ""),
        stdio_server("dev", &[], "")
    );
    let rig = Rig::start(&manifest).await;
    let status = rig
        .wait_server("pages", "the listing refused", |s| s.last_error.is_some())
        .await;
    assert_eq!(
        status.last_error.as_deref(),
        Some(
            "tools/list of the MCP server `pages` was refused: it gave a next page (100 pages so far, 100 tools); a listing may take at most 100 pages"
        )
    );
    assert!(status.tools.is_empty(), "{status:?}");
    let list_calls = server.server.stats().borrow().list_calls;
    assert!(
        list_calls % 100 == 0 && list_calls > 0,
        "{list_calls} pages asked for"
    );
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    let a = rig.call("dev_echo", json!({"text": "still here"})).await;
    assert_eq!(a.model_text, "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_list_changed_is_listed_at_most_once_a_second() {
    let server = hostile(Fault::RenameChurn).await;
    let manifest = format!(
        "{}{}",
        sse_server("churn", &server.url, "prefix = \"c_\""),
        stdio_server("dev", &[], "")
    );
    let started = Instant::now();
    let rig = Rig::start(&manifest).await;
    let stats = server.server.stats();
    // Each listing is followed by 500 notices: listed once each, the
    // server would be asked thousands of times within seconds.
    let ok = wait_until(WAIT, || stats.borrow().list_calls >= 3).await;
    assert!(
        ok,
        "the churning server was listed {} times",
        stats.borrow().list_calls
    );
    let elapsed = started.elapsed().as_secs();
    let lists = stats.borrow().list_calls;
    assert!(
        lists <= elapsed + 2,
        "{lists} listings in {elapsed} s after {} notices each",
        CHURN_NOTICES
    );
    // main_server was asked in proportion: each listing renames 5 tools.
    let writes = rig
        .h
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "POST" && r.body["name"].as_str().is_some_and(|n| n.starts_with("c_"))
        })
        .count() as u64;
    assert!(
        writes <= (lists + 1) * 10 * 3,
        "{writes} registrations and removals for {lists} listings"
    );
    // The well-behaved server's tools stay registered beside the churn.
    let ok = wait_until(WAIT, || {
        let snap = rig.h.registry_snapshot();
        snap.role_names().iter().all(|role| {
            DEV_TOOLS
                .iter()
                .all(|t| snap.tool(role, &format!("dev_{t}")).is_some())
        })
    })
    .await;
    assert!(ok, "the dev server's tools are not all registered");
    let a = rig.call("dev_echo", json!({"text": "still here"})).await;
    assert_eq!(a.model_text, "still here");
}
