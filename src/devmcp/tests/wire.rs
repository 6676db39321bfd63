//! Raw lines on the wire, as a client of either generation sends them:
//! the error codes `--legacy` answers with, which rmcp's client would only
//! report as a fallback.

use serde_json::json;

use super::*;

/// One request written as a line, as a client of either generation would
/// send it, and the answer read back: what `--legacy` puts on the wire.
async fn raw_exchange(server: DevMcp, request: Value) -> Value {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_end);
    let shutdown = CancellationToken::new();
    let _task = tokio::spawn(server.serve_io(read, write, shutdown.clone()));
    let (client_read, mut client_write) = tokio::io::split(client_end);
    let line = format!("{request}\n");
    within("the write", client_write.write_all(line.as_bytes()))
        .await
        .expect("written");
    let mut answer = String::new();
    within(
        "the answer",
        BufReader::new(client_read).read_line(&mut answer),
    )
    .await
    .expect("read");
    shutdown.cancel();
    serde_json::from_str(&answer).expect("a JSON-RPC message")
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

#[tokio::test]
async fn on_the_wire_legacy_answers_discover_and_inline_requests_as_a_2025_11_25_server() {
    let legacy = DevMcpOptions {
        legacy: true,
        ..DevMcpOptions::default()
    };
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}});
    let answer = raw_exchange(DevMcp::new(legacy), discover.clone()).await;
    assert_eq!(answer["error"]["code"], json!(-32601), "{answer}");

    // Without --legacy the same request is answered, with 2026-07-28 offered.
    let answer = raw_exchange(DevMcp::new(DevMcpOptions::default()), discover).await;
    let offered = answer["result"]["supportedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(offered.contains(&json!("2026-07-28")), "{answer}");

    // A 2026-07-28 request without discover or initialize is refused.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": modern_meta()}});
    let answer = raw_exchange(DevMcp::new(legacy), list).await;
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("begin with initialize"), "{answer}");
}
