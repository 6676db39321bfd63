//! The server on one end of a duplex pipe and rmcp's client on the other,
//! as the sidecar talks to a child: both lifecycles, paging, the tools'
//! answers, `toggle`'s notifications and `hang`'s cancellation.

use std::num::NonZeroUsize;

use rmcp::model::{ErrorCode, PaginatedRequestParams, ServerNotification, SubscriptionFilter};
use serde_json::json;

use super::*;
use crate::devmcp::{BAD_SCHEMA_TOOL, EXTRA_TOOL, LONG_TOOL_NAME, RPC_ERROR_MESSAGE, TOOLS};

#[tokio::test]
async fn a_modern_client_gets_2026_07_28_through_discover() {
    let s = over_pipes(DevMcpOptions::default(), auto()).await;
    assert_eq!(protocol(&s.client), Some(ProtocolVersion::V_2026_07_28));
    let echoed = call(&s.client, "echo", json!({"text": "hi"}))
        .await
        .expect("echo");
    assert_eq!(text(&echoed), "hi");
    s.stop().await;
}

#[tokio::test]
async fn a_legacy_server_makes_the_client_fall_back_to_initialize() {
    let legacy = DevMcpOptions {
        legacy: true,
        ..DevMcpOptions::default()
    };
    // The client asks for its default (2026-07-28, which has no
    // initialize), so the server answers with the newest version it can
    // serve over initialize.
    let s = over_pipes(legacy, auto()).await;
    assert_eq!(protocol(&s.client), Some(ProtocolVersion::V_2025_11_25));
    let echoed = call(&s.client, "echo", json!({"text": "old"}))
        .await
        .expect("echo");
    assert_eq!(text(&echoed), "old");
    s.stop().await;

    // A client that names an older version in its fallback gets it.
    let pinned = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_06_18),
    };
    let s = over_pipes(legacy, pinned).await;
    assert_eq!(protocol(&s.client), Some(ProtocolVersion::V_2025_06_18));
    s.stop().await;
}

#[tokio::test]
async fn a_discover_only_client_cannot_talk_to_a_legacy_server() {
    let legacy = DevMcpOptions {
        legacy: true,
        ..DevMcpOptions::default()
    };
    let server = DevMcp::new(legacy);
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_end);
    let shutdown = CancellationToken::new();
    let _task = tokio::spawn(server.serve_io(read, write, shutdown.clone()));
    let (handler, _) = client();
    let discover_only = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let started = within(
        "discover",
        handler.serve_with_lifecycle(client_end, discover_only),
    )
    .await;
    assert!(
        started.is_err(),
        "discover must fail against a 2025-11-25 server"
    );
    shutdown.cancel();
}

#[tokio::test]
async fn pages_return_every_tool_once_and_count_as_list_calls() {
    let opts = DevMcpOptions {
        page_size: NonZeroUsize::new(4),
        long_name: true,
        bad_schema: true,
        ..DevMcpOptions::default()
    };
    let s = over_pipes(opts, auto()).await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = within("a page", s.client.list_tools(Some(params)))
            .await
            .expect("a page");
        assert!(page.tools.len() <= 4, "page of {}", page.tools.len());
        names.extend(page.tools.iter().map(|t| t.name.to_string()));
        pages += 1;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut expected: Vec<&str> = TOOLS.to_vec();
    expected.extend([LONG_TOOL_NAME, BAD_SCHEMA_TOOL]);
    assert_eq!(names, expected);
    assert_eq!(pages, 4, "13 tools in pages of 4");
    assert_eq!(s.server.stats().borrow().list_calls, 4);

    // rmcp's list_all_tools follows the cursors too.
    assert_eq!(tool_names(&s.client).await, expected);

    let bad = PaginatedRequestParams::default().with_cursor(Some("not-a-cursor".to_owned()));
    match within("a bad cursor", s.client.list_tools(Some(bad))).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
        other => panic!("a bad cursor must be invalid params: {other:?}"),
    }
    s.stop().await;
}

async fn toggle_round_trip(s: &mut OverPipes) {
    assert!(!tool_names(&s.client).await.contains(&EXTRA_TOOL.to_owned()));
    let added = call(&s.client, "toggle", json!({})).await.expect("toggle");
    assert_eq!(text(&added), "extra added");
    wait_list_changed(&mut s.list_changed, 1).await;
    assert!(tool_names(&s.client).await.contains(&EXTRA_TOOL.to_owned()));
    let extra = call(&s.client, EXTRA_TOOL, json!({"text": "more"}))
        .await
        .expect("extra");
    assert_eq!(text(&extra), "more");

    let removed = call(&s.client, "toggle", json!({})).await.expect("toggle");
    assert_eq!(text(&removed), "extra removed");
    wait_list_changed(&mut s.list_changed, 2).await;
    assert!(!tool_names(&s.client).await.contains(&EXTRA_TOOL.to_owned()));
    match call(&s.client, EXTRA_TOOL, json!({"text": "gone"})).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
        other => panic!("a removed tool must be unknown: {other:?}"),
    }
}

#[tokio::test]
async fn toggle_adds_then_removes_extra_and_the_client_hears_list_changed() {
    let mut s = over_pipes(DevMcpOptions::default(), auto()).await;
    toggle_round_trip(&mut s).await;
    s.stop().await;

    let legacy = DevMcpOptions {
        legacy: true,
        ..DevMcpOptions::default()
    };
    let mut s = over_pipes(legacy, auto()).await;
    toggle_round_trip(&mut s).await;
    s.stop().await;
}

#[tokio::test]
async fn hang_counts_the_cancellation_when_the_caller_drops_the_call() {
    let s = over_pipes(DevMcpOptions::default(), auto()).await;
    hang_then_drop(&s.client, &s.server).await;
    // The connection is still good, and `stats` says the same.
    let stats = call(&s.client, "stats", json!({})).await.expect("stats");
    assert_eq!(
        stats.structured_content,
        Some(json!({"calls": 2, "cancelled": 1, "list_calls": 0}))
    );
    s.stop().await;
}

#[tokio::test]
async fn the_other_tools_answer_as_documented() {
    let s = over_pipes(DevMcpOptions::default(), auto()).await;
    let c = &s.client;

    let sum = call(c, "add", json!({"a": 2, "b": 3})).await.expect("add");
    assert_eq!(sum.structured_content, Some(json!({"sum": 5})));
    assert_eq!(text(&sum), "2 + 3 = 5");

    let image = call(c, "image", json!({})).await.expect("image");
    assert_eq!(image.content.len(), 2);
    assert_eq!(
        image.content[0].as_image().map(|i| i.mime_type.as_str()),
        Some("image/png")
    );
    assert_eq!(text(&image), "a 16x16 square");

    let images = call(c, "images", json!({"count": 3}))
        .await
        .expect("images");
    assert_eq!(images.content.len(), 3);
    assert!(images.content.iter().all(|c| c.as_image().is_some()));

    let mixed = call(c, "mixed", json!({})).await.expect("mixed");
    assert_eq!(mixed.content.len(), 4);

    let failed = call(c, "fail", json!({"message": "it broke"}))
        .await
        .expect("fail");
    assert_eq!(
        (failed.is_error, text(&failed)),
        (Some(true), "it broke".to_owned())
    );

    match call(c, "rpc_error", json!({})).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert_eq!(e.message, RPC_ERROR_MESSAGE);
        }
        other => panic!("rpc_error must be a JSON-RPC error: {other:?}"),
    }

    let pid = call(c, "pid", json!({})).await.expect("pid");
    assert_eq!(
        pid.structured_content,
        Some(json!({"pid": std::process::id()}))
    );
    s.stop().await;
}

/// A client on its own connection to the same server.
async fn another_client(
    server: &DevMcp,
    lifecycle: ClientLifecycleMode,
) -> (Connected, watch::Receiver<u32>) {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server_end);
    // Ends when the client drops its end.
    let _served = tokio::spawn(
        server
            .clone()
            .serve_io(read, write, CancellationToken::new()),
    );
    let (handler, list_changed) = client();
    let client = within(
        "another client",
        handler.serve_with_lifecycle(client_end, lifecycle),
    )
    .await
    .expect("another client starts");
    (client, list_changed)
}

#[tokio::test]
async fn a_toggle_reaches_listen_streams_and_initialize_sessions_on_other_connections() {
    let s = over_pipes(DevMcpOptions::default(), auto()).await;
    // 2026-07-28: a client asks for list changes with subscriptions/listen.
    let (modern, _) = another_client(&s.server, auto()).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = within("listen", modern.listen(filter))
        .await
        .expect("listen");
    assert_eq!(subscription.acknowledged().tools_list_changed, Some(true));
    // 2025-11-25: a session begun with initialize hears them unasked.
    let (old, mut old_heard) = another_client(&s.server, ClientLifecycleMode::Initialize).await;
    assert_eq!(protocol(&old), Some(ProtocolVersion::V_2025_11_25));

    call(&s.client, "toggle", json!({})).await.expect("toggle");
    let heard = within("the subscription", subscription.next()).await;
    assert!(
        matches!(
            heard,
            Ok(Some(ServerNotification::ToolListChangedNotification(_)))
        ),
        "{heard:?}"
    );
    wait_list_changed(&mut old_heard, 1).await;
    s.stop().await;
}

/// Regression: with a `subscriptions/listen` stream open (what a 2026-07-28
/// client such as the sidecar keeps), the end of the input did not end the
/// server: rmcp waits up to 5 s for in-flight handlers after it, and the
/// listen handler lasts until cancelled. A stdio server must leave when its
/// client closes stdin (the sidecar otherwise had to SIGTERM it).
#[tokio::test]
async fn the_server_leaves_at_the_end_of_its_input_with_a_subscription_open() {
    let s = over_pipes(DevMcpOptions::default(), auto()).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let subscription = within("listen", s.client.listen(filter))
        .await
        .expect("listen");
    // The client goes, closing its end of the pipe.
    within("the client to close", s.client.cancel())
        .await
        .expect("the client closes");
    drop(subscription);
    let served = tokio::time::timeout(Duration::from_secs(2), s.task)
        .await
        .expect(
            "the server leaves within 2 s of the end of its input, well before rmcp's 5 s drain",
        )
        .expect("no panic");
    assert!(served.is_ok(), "{served:?}");
}
