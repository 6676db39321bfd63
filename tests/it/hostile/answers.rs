//! What an MCP server answers is held to the bounds of any handler's
//! answer: `max_output_bytes`, and a JSON-RPC error's message quoted cut.

use serde_json::json;

use crate::support::mcp::*;

/// An MCP answer over `max_output_bytes` (8 MiB by default) is refused as
/// an http or exec handler's is; before issue 49 a 15.5 MB text went on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_answer_over_max_output_bytes_is_refused_as_any_handlers() {
    let rig = Rig::start(&stdio_server("dev", &[], "")).await;
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    let a = rig
        .call(
            "dev_echo",
            json!({"text": "0123456789abcdef", "repeat": 600_000}),
        )
        .await;
    assert!(
        a.is_error,
        "{}",
        &a.model_text[..200.min(a.model_text.len())]
    );
    assert!(
        a.model_text.contains("the handler's answer is larger than the sidecar accepts (8388608 bytes, handlers.max_output_bytes)"),
        "{}",
        &a.model_text[..500.min(a.model_text.len())]
    );
    let a = rig
        .call("dev_echo", json!({"text": "small", "repeat": 2}))
        .await;
    assert_eq!(a.model_text, "smallsmall");
}
