//! A decompression bomb (a JPEG of a few hundred bytes whose header claims
//! 65500x65500 pixels, 12.9 GB decoded) in the answer of an http handler,
//! an exec handler and an MCP server: refused from its header, the model
//! reading why, the sidecar still serving. Before issue 49 it aborted the
//! sidecar (`memory allocation of 12870750000 bytes failed`).

use axum::Router;
use axum::routing::post;
use neko_sidecar::contract::images::decompression_bomb;
use neko_sidecar::picture::Format;
use serde_json::{Value as Json, json};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::support::callback::*;
use crate::support::mcp::*;
use crate::support::serve_http;

/// The reason the model reads, after main_server's own flaw.
const REFUSED: &str = "it is 65500x65500 pixels, more than the 3840x2160 main_server takes, and it is too large to scale down: the sidecar decodes pictures of at most 16588800 pixels (2 times main_server's 3840x2160), and its header says 65500x65500";

/// A handler's envelope with the bomb as its one image.
fn bomb_answer() -> String {
    let bomb = decompression_bomb(Format::Jpeg, 65500, 65500);
    assert!(bomb.len() < 1024, "{} bytes", bomb.len());
    json!({"output": "a picture", "images": [{"data_b64": STANDARD.encode(bomb), "mime": "image/jpeg"}]})
        .to_string()
}

/// The answer went without the image, the model reading why.
fn assert_refused(body: &Json) {
    assert_eq!(body["is_error"], false, "{body}");
    assert_eq!(body["images"], json!([]), "{body}");
    let warning = body["output"]["_image_warnings"][0].as_str().unwrap_or("");
    assert!(
        warning.starts_with("image #0 was not attached: ") && warning.ends_with(REFUSED),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jpeg_bomb_from_an_http_handler_is_refused_from_its_header() {
    let answer: &'static str = Box::leak(bomb_answer().into_boxed_str());
    let addr = serve_http(
        Router::new()
            .route("/bomb", post(move || async move { answer }))
            .route("/ok", post(|| async { "fine" })),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let manifest: String = ["bomb", "ok"]
        .iter()
        .map(|n| format!("[[tool]]\nname = \"{n}\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://{addr}/{n}\" }}\n"))
        .collect();
    let sc = Sidecar::start(&state(dir.path(), &manifest)).await;
    // Twice, and side by side: each refused, none decoded.
    let (a, b) = tokio::join!(sc.call("bomb", json!({})), sc.call("bomb", json!({})));
    for (status, body) in [a, b] {
        assert_eq!(status, 200, "{body}");
        assert_refused(&body);
    }
    assert_eq!(success(&sc.call("ok", json!({})).await), "fine");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jpeg_bomb_from_an_exec_handler_is_refused_from_its_header() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("answer.json"), bomb_answer()).unwrap();
    let s = crate::support::script(
        dir.path(),
        "h.sh",
        "cat >/dev/null; cat \"$(dirname \"$0\")/answer.json\"",
    );
    let toml = crate::support::exec_tool("bomb", "d", &[s.to_str().unwrap()], "");
    let sc = Sidecar::start(&state(dir.path(), &toml)).await;
    let (status, body) = sc.call("bomb", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_refused(&body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jpeg_bomb_from_an_mcp_server_is_refused_and_its_other_tools_still_answer() {
    let rig = Rig::start(&stdio_server("dev", &[], "")).await;
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    let a = rig.call("dev_image", json!({"bomb": true})).await;
    assert!(!a.is_error, "{}", a.model_text);
    assert!(a.images.is_empty(), "{a:#?}");
    assert!(
        a.model_text.contains("a very large picture"),
        "{}",
        a.model_text
    );
    assert!(a.model_text.contains(REFUSED), "{}", a.model_text);
    let stats = &rig.daemon.daemon().callback.stats().tools["dev_image"];
    assert_eq!((stats.images_repaired, stats.images_refused), (0, 1));
    let a = rig.call("dev_echo", json!({"text": "still here"})).await;
    assert_eq!(a.model_text, "still here");
    assert_eq!(rig.status("dev").phase, neko_sidecar::mcp::Phase::Ready);
}
