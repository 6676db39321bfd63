//! What the model reads of each kind of MCP result, called through the
//! stand-in main_server (`invoke`) on a tool of the stand-in MCP server:
//! text, structured content, images (two attached at most, the rest
//! described), audio and resources described, tool errors and JSON-RPC
//! errors as error envelopes, and a call that never answers cut at its
//! deadline and cancelled on the server.

use neko_sidecar::devmcp::RPC_ERROR_MESSAGE;
use neko_sidecar::devserver::InvokeAnswer;
use serde_json::json;

use crate::support::mcp::*;

/// The stand-in MCP server as `dev`, with `extra` lines, its tools registered.
async fn dev(extra: &str) -> Rig {
    let rig = Rig::start(&stdio_server("dev", &[], extra)).await;
    wait_ours(&rig.h, &prefixed("dev_", &DEV_TOOLS)).await;
    rig
}

fn assert_answered(a: &InvokeAnswer) {
    assert!(!a.is_error, "{}", a.model_text);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_content_is_what_the_model_reads() {
    let rig = dev("").await;
    let a = rig.call("dev_echo", json!({"text": "plain words"})).await;
    assert_answered(&a);
    assert_eq!(a.output, json!("plain words"));
    assert_eq!(a.model_text, "plain words");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_is_the_output_object() {
    let rig = dev("").await;
    let a = rig.call("dev_add", json!({"a": 2, "b": 40})).await;
    assert_answered(&a);
    assert_eq!(a.output, json!({"sum": 42}), "{}", a.model_text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_reaches_main_server_attached() {
    let rig = dev("").await;
    let a = rig.call("dev_image", json!({})).await;
    assert_answered(&a);
    assert_eq!(a.images.len(), 1, "{a:#?}");
    let img = &a.images[0];
    assert_eq!((img.mime, img.width, img.height), ("image/png", 16, 16));
    assert!(a.model_text.contains("a 16x16 square"), "{}", a.model_text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_picture_repeated_in_structured_content_is_read_as_a_short_reference() {
    // Shaped as the filesystem server's `read_media_file` answers: the image
    // content, and the same image again inside `structuredContent`.
    let rig = dev("").await;
    let a = rig
        .call("dev_image", json!({"repeat_in_structured_content": true}))
        .await;
    assert_answered(&a);
    assert_eq!(a.images.len(), 1, "{a:#?}");
    assert_eq!((a.images[0].mime, a.images[0].width), ("image/png", 160));
    assert!(a.images[0].data_b64_len > 20_000, "{:?}", a.images[0]);
    let reference = &a.output["content"][0]["data"];
    assert!(
        reference
            .as_str()
            .is_some_and(|r| r.starts_with("[image #0 (image/png, ")
                && r.ends_with("): attached as a picture]")),
        "{}",
        a.model_text
    );
    assert!(a.model_text.len() < 1024, "{}", a.model_text);
    assert!(!a.model_text.contains("iVBORw0KGgo"), "{}", a.model_text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_png_main_server_would_refuse_for_its_crc_arrives_repaired() {
    let rig = dev("").await;
    let a = rig.call("dev_image", json!({"bad_crc": true})).await;
    // Sent as the server gave it, main_server would drop it (rule 15).
    assert_answered(&a);
    assert_eq!(a.images.len(), 1, "{a:#?}");
    assert_eq!((a.images[0].mime, a.images[0].width), ("image/png", 16));
    assert_eq!(a.model_text, "a 16x16 square");
    let stats = &rig.daemon.daemon().callback.stats().tools["dev_image"];
    assert_eq!((stats.images_repaired, stats.images_refused), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_three_images_two_are_attached_and_the_third_described() {
    let rig = dev("").await;
    let a = rig.call("dev_images", json!({"count": 3})).await;
    assert_answered(&a);
    assert_eq!(a.images.len(), 2, "{a:#?}");
    let text = &a.model_text;
    assert_eq!(text.matches("[image image/png").count(), 1, "{text}");
    assert!(text.contains("at most 2 images"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_resource_links_and_embedded_resources_are_described_to_the_model() {
    let rig = dev("").await;
    let a = rig.call("dev_mixed", json!({})).await;
    assert_answered(&a);
    assert!(a.images.is_empty());
    let text = &a.model_text;
    for part in [
        "one content of each kind follows",
        "[audio audio/wav, ",
        "not attached, main_server takes no audio]",
        "[resource link: report.pdf <file:///srv/report.pdf> (application/pdf)]",
        "[embedded resource <mem://note>",
        "text, 6 characters]",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_is_an_error_whose_message_the_model_reads() {
    let rig = dev("").await;
    let a = rig
        .call("dev_fail", json!({"message": "the disk is full"}))
        .await;
    assert!(a.is_error, "{a:#?}");
    assert!(
        a.model_text.contains("the disk is full"),
        "{}",
        a.model_text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_error_is_an_error_envelope_that_names_it() {
    let rig = dev("").await;
    let a = rig.call("dev_rpc_error", json!({})).await;
    assert!(a.is_error, "{a:#?}");
    let text = &a.model_text;
    assert!(text.contains(RPC_ERROR_MESSAGE), "{text}");
    assert!(text.contains("JSON-RPC error -32602"), "{text}");
    assert!(text.contains("MCP server `dev`"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_call_times_out_at_its_deadline_and_is_cancelled_on_the_server() {
    let rig = dev("timeout_seconds = 1").await;
    let pid = pid_by_tool(&rig.h, "dev_").await;

    let started = std::time::Instant::now();
    let a = rig.call("dev_hang", json!({})).await;
    let took = started.elapsed();
    assert!(a.is_error, "{a:#?}");
    assert_eq!(a.output["code"], "TOOL_TIMEOUT", "{}", a.model_text);
    assert!(a.model_text.contains("TOOL_TIMEOUT"), "{}", a.model_text);
    // Our deadline (0.9 s of 1 s) passed, main_server's did not.
    assert!(took.as_secs_f64() >= 0.85, "answered after {took:?}");

    // `notifications/cancelled` reached the same server process: the
    // session was not lost on the way, and the server counted it.
    let cancelled = eventually("the server to count the cancellation", || async {
        let s = rig.call("dev_stats", json!({})).await;
        match s.output["cancelled"].as_u64() {
            Some(n) if n >= 1 => Ok(n),
            _ => Err(s.model_text),
        }
    })
    .await;
    assert_eq!(cancelled, 1);
    assert_eq!(pid_by_tool(&rig.h, "dev_").await, pid);
    assert_eq!(rig.status("dev").restarts, 0);
}

/// Issue 48: a call that waited for one of the server's `max_concurrency`
/// slots most of its time and then ran out of it read "the handler did not
/// answer within 0.9 s" (`TOOL_TIMEOUT`), though its handler had had a
/// few milliseconds: it now says it waited for a slot (`TOO_MANY_CALLS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_for_a_server_slot_says_so() {
    let rig = dev("timeout_seconds = 1\nmax_concurrency = 1").await;
    pid_by_tool(&rig.h, "dev_").await;
    // The first call holds the one slot until its deadline; the second is
    // sent once the first holds it, and gets it a moment before its own.
    let first = rig.call("dev_hang", json!({}));
    let second = async {
        eventually("the hanging call to arrive", || async {
            // It takes the free slot in the same step as it is counted.
            let stats = rig.daemon.daemon().callback.stats();
            match stats.tools.get("dev_hang").map(|t| t.in_flight) {
                Some(n) if n >= 1 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        rig.call("dev_hang", json!({})).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.output["code"], "TOOL_TIMEOUT", "{}", first.model_text);
    assert_eq!(
        second.output["code"], "TOO_MANY_CALLS",
        "{}",
        second.model_text
    );
    let text = &second.model_text;
    assert!(
        text.contains("too many concurrent calls of the MCP server `dev` (at most 1 at a time): this call waited"),
        "{text}"
    );
}
