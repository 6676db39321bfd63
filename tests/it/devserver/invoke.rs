//! The callback half of the contract, through the stand-in's
//! `/__dev/invoke`: the body main_server POSTs, how it builds `output` and
//! the text the model reads (`model_text`), images, and dead-plugin
//! eviction, against tiny callback servers playing a plugin.
//!
//! Every test needs `/__dev/` control, so against a real server they all
//! say they were skipped.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use neko_sidecar::contract::images::{sample_png, sample_png_b64, with_chunk};
use serde_json::{Value, json};

use crate::support::refused_port;
use crate::support::target::{CallbackServer, Target, dev_target, silent_server};

async fn invoke(t: &Target, body: Value) -> (u16, Value) {
    t.post("/__dev/invoke", &body).await
}

/// Registers a tool answering `status`/`body` and calls it once.
async fn call_answering(
    test: &str,
    status: u16,
    content_type: &'static str,
    body: &'static str,
) -> Option<Value> {
    let (t, _h) = dev_target(test).await?;
    let cb = CallbackServer::start(status, content_type, body).await;
    t.register_at("t", &cb.url, "external", None, 30.0).await;
    let (code, answer) = invoke(&t, json!({"name": "t", "arguments": {}})).await;
    assert_eq!(code, 200, "{answer}");
    Some(answer)
}

#[tokio::test]
async fn callback_body_carries_name_arguments_call_id_and_raw_text() {
    let Some((t, _h)) =
        dev_target("callback_body_carries_name_arguments_call_id_and_raw_text").await
    else {
        return;
    };
    let cb =
        CallbackServer::start(200, "application/json", r#"{"output":1,"is_error":false}"#).await;
    t.register_at("get_weather", &cb.url, "external", None, 30.0)
        .await;
    let raw = "{\"city\": \"東京\"}";
    let (_, answer) = invoke(
        &t,
        json!({"name": "get_weather", "raw_arguments": raw, "role": "Lanlan"}),
    )
    .await;
    let got = cb.received();
    assert_eq!(got.len(), 1);
    let call_id = got[0]["call_id"].as_str().unwrap();
    assert!(
        call_id.starts_with("call_") && call_id.len() > 5,
        "{call_id}"
    );
    assert_eq!(answer["call_id"], call_id);
    assert_eq!(answer["role"], "Lanlan");
    assert_eq!(
        got[0],
        json!({"name":"get_weather","arguments":{"city":"東京"},"call_id":call_id,"raw_arguments":raw})
    );
}

#[tokio::test]
async fn arguments_are_wrapped_when_not_a_json_object() {
    let Some((t, _h)) = dev_target("arguments_are_wrapped_when_not_a_json_object").await else {
        return;
    };
    let cb = CallbackServer::start(200, "application/json", "{}").await;
    t.register_at("t", &cb.url, "external", None, 30.0).await;
    invoke(&t, json!({"name": "t", "raw_arguments": "  city=Tokyo\n"})).await;
    invoke(&t, json!({"name": "t", "raw_arguments": "[1,2]"})).await;
    invoke(&t, json!({"name": "t", "arguments": {"a": 1}})).await;
    invoke(&t, json!({"name": "t", "raw_arguments": ""})).await;
    invoke(&t, json!({"name": "t", "raw_arguments": " \n"})).await;
    let args: Vec<_> = cb
        .received()
        .iter()
        .map(|b| (b["arguments"].clone(), b["raw_arguments"].clone()))
        .collect();
    assert_eq!(
        args,
        [
            // Text that is not JSON arrives stripped; empty or blank text as {}.
            (json!({"_raw": "city=Tokyo"}), json!("  city=Tokyo\n")),
            (json!({"value": [1, 2]}), json!("[1,2]")),
            (json!({"a": 1}), json!("{\"a\":1}")),
            (json!({}), json!("")),
            (json!({}), json!(" \n")),
        ]
    );
}

#[tokio::test]
async fn call_ids_are_not_unique() {
    let Some((t, _h)) = dev_target("call_ids_are_not_unique").await else {
        return;
    };
    let cb = CallbackServer::start(200, "application/json", "{}").await;
    t.register_at("t", &cb.url, "external", None, 30.0).await;
    invoke(&t, json!({"name": "t"})).await;
    invoke(&t, json!({"name": "t"})).await;
    let ids: Vec<_> = cb.received().iter().map(|b| b["call_id"].clone()).collect();
    // As from a provider that gives none: `call_0` in every turn.
    assert_eq!(ids, [json!("call_0"), json!("call_0")]);
}

#[tokio::test]
async fn rule1_error_status_is_a_failed_call_with_200_chars() {
    let long: &'static str = Box::leak("x".repeat(300).into_boxed_str());
    let Some(answer) = call_answering(
        "rule1_error_status_is_a_failed_call_with_200_chars",
        500,
        "text/plain",
        long,
    )
    .await
    else {
        return;
    };
    let msg = format!(
        "remote tool callback returned HTTP 500: {}",
        "x".repeat(200)
    );
    assert_eq!(answer["output"], json!({ "error": msg }));
    assert_eq!(
        (answer["is_error"].clone(), answer["error"].clone()),
        (json!(true), json!(msg))
    );
}

#[tokio::test]
async fn rule2_non_json_body_is_the_output_text() {
    let Some(answer) = call_answering(
        "rule2_non_json_body_is_the_output_text",
        200,
        "text/plain",
        "sunny, 22°C",
    )
    .await
    else {
        return;
    };
    assert_eq!(
        (answer["output"].clone(), answer["is_error"].clone()),
        (json!("sunny, 22°C"), json!(false))
    );
    let Some(answer) = call_answering(
        "rule2_non_json_body_is_the_output_text",
        200,
        "application/json",
        "",
    )
    .await
    else {
        return;
    };
    assert_eq!(answer["output"], json!(""));
}

#[tokio::test]
async fn rule3_non_object_json_is_that_value() {
    let Some(answer) = call_answering(
        "rule3_non_object_json_is_that_value",
        200,
        "application/json",
        "[1, \"two\"]",
    )
    .await
    else {
        return;
    };
    assert_eq!(answer["output"], json!([1, "two"]));
}

#[tokio::test]
async fn rule4_object_without_envelope_keys_is_the_whole_output() {
    let Some(answer) = call_answering(
        "rule4_object_without_envelope_keys_is_the_whole_output",
        200,
        "application/json",
        r#"{"temp_c":22,"error":"x"}"#,
    )
    .await
    else {
        return;
    };
    assert_eq!(answer["output"], json!({"temp_c":22,"error":"x"}));
    assert_eq!(
        (answer["is_error"].clone(), answer["error"].clone()),
        (json!(false), json!(null))
    );
}

#[tokio::test]
async fn rule5_envelope_is_error_is_truthy_tested() {
    let body = r#"{"output":null,"is_error":"false","error":"city not found"}"#;
    let Some(answer) = call_answering(
        "rule5_envelope_is_error_is_truthy_tested",
        200,
        "application/json",
        body,
    )
    .await
    else {
        return;
    };
    // The model reads `output` alone: this reason never reaches it.
    assert_eq!(
        answer,
        json!({"model_text": "null", "output": null, "is_error": true, "error": "city not found", "error_reaches_model": false, "images": [], "warnings": [], "call_id": "call_0", "role": "小八"})
    );
    let Some(answer) = call_answering(
        "rule5_envelope_is_error_is_truthy_tested",
        200,
        "application/json",
        r#"{"output":{"a":1},"is_error":false,"error":"hidden"}"#,
    )
    .await
    else {
        return;
    };
    assert_eq!(
        (answer["output"].clone(), answer["error"].clone()),
        (json!({"a":1}), json!(null))
    );
    let Some(answer) = call_answering(
        "rule5_envelope_is_error_is_truthy_tested",
        200,
        "application/json",
        r#"{"is_error":0,"x":1,"images":[]}"#,
    )
    .await
    else {
        return;
    };
    assert_eq!(answer["output"], json!({"is_error":0,"x":1}));
}

/// A body answering `output` and these `images`, as JSON text.
fn with_images(images: Value) -> &'static str {
    let body = json!({"output": "ok", "is_error": false, "images": images}).to_string();
    Box::leak(body.into_boxed_str())
}

#[tokio::test]
async fn rule7_only_the_first_two_images_are_looked_at_and_must_be_real() {
    let png = sample_png_b64(3, 2);
    let body = with_images(json!([
        {"data_b64": png, "mime": "image/png", "vision_prompt": "one"},
        {"data_b64": "aGk=", "mime": "image/png", "vision_prompt": "not a PNG"},
        {"data_b64": png, "mime": "image/png", "vision_prompt": "three"},
    ]));
    let Some(answer) = call_answering(
        "rule7_only_the_first_two_images_are_looked_at_and_must_be_real",
        200,
        "application/json",
        body,
    )
    .await
    else {
        return;
    };
    let prompts: Vec<_> = answer["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["vision_prompt"].clone(),
                i["width"].clone(),
                i["mime"].clone(),
            )
        })
        .collect();
    assert_eq!(prompts, [(json!("one"), json!(3), json!("image/png"))]);
    // main_server's own warnings, word for word.
    assert_eq!(
        answer["warnings"],
        json!([
            "a tool may return at most 2 image(s); 1 dropped",
            "image #1 has invalid base64 or non-image bytes; dropped"
        ]),
        "{answer}"
    );
    // Rule 8: the warnings reach the model inside `output`, a string
    // output wrapped as `{"result": ...}` first.
    assert_eq!(answer["output"]["result"], "ok");
    assert_eq!(answer["output"]["_image_warnings"], answer["warnings"]);
    let text = answer["model_text"].as_str().unwrap();
    assert!(
        text.contains("_image_warnings") && text.contains("non-image bytes; dropped"),
        "{text}"
    );
}

#[tokio::test]
async fn rule15_a_png_with_a_bad_ancillary_crc_never_reaches_the_model() {
    // What an editor that rewrites metadata leaves: browsers show it, the
    // `png` crate skips the chunk, Pillow refuses the whole picture.
    let png = sample_png(6, 6);
    for kind in [b"iCCP", b"tEXt"] {
        let bad = with_chunk(&png, kind, b"Comment\0edited", true);
        let body = with_images(json!([{"data_b64": STANDARD.encode(&bad), "mime": "image/png"}]));
        let Some(answer) = call_answering(
            "rule15_a_png_with_a_bad_ancillary_crc_never_reaches_the_model",
            200,
            "application/json",
            body,
        )
        .await
        else {
            return;
        };
        assert_eq!(answer["images"], json!([]), "{answer}");
        assert_eq!(
            answer["warnings"],
            json!(["image #0 has invalid base64 or non-image bytes; dropped"])
        );
        assert_eq!(
            answer["model_text"],
            r#"{"result": "ok", "_image_warnings": ["image #0 has invalid base64 or non-image bytes; dropped"]}"#
        );
    }
}

#[tokio::test]
async fn rule7_a_model_that_cannot_see_images_reads_their_descriptions() {
    let Some((t, _h)) =
        dev_target("rule7_a_model_that_cannot_see_images_reads_their_descriptions").await
    else {
        return;
    };
    let body =
        with_images(json!([{"data_b64": sample_png_b64(4, 4), "vision_prompt": "a red square"}]));
    let cb = CallbackServer::start(200, "application/json", body).await;
    t.register_at("t", &cb.url, "external", None, 30.0).await;
    let (code, answer) = invoke(&t, json!({"name": "t", "sees_images": false})).await;
    assert_eq!(code, 200, "{answer}");
    let text = answer["model_text"].as_str().unwrap();
    assert!(
        text.contains("_image_descriptions") && text.contains("a red square"),
        "{text}"
    );
    // A model that sees images gets the image, not a description.
    let (_, answer) = invoke(&t, json!({"name": "t"})).await;
    assert_eq!(answer["model_text"], json!("ok"));
    assert_eq!(answer["images"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn redirects_are_not_followed_and_read_like_any_answer() {
    let Some(answer) = call_answering(
        "redirects_are_not_followed_and_read_like_any_answer",
        307,
        "application/json",
        r#"{"output":"moved"}"#,
    )
    .await
    else {
        return;
    };
    assert_eq!(
        (answer["output"].clone(), answer["is_error"].clone()),
        (json!("moved"), json!(false))
    );
}

#[tokio::test]
async fn rule6_refused_connection_is_a_connect_error() {
    let Some((t, _h)) = dev_target("rule6_refused_connection_is_a_connect_error").await else {
        return;
    };
    let url = format!("http://127.0.0.1:{}/tool", refused_port());
    t.register_at("t", &url, "external", None, 30.0).await;
    let (_, answer) = invoke(&t, json!({"name": "t"})).await;
    let msg = "remote tool callback HTTP failure: ConnectError: All connection attempts failed";
    assert_eq!(
        (answer["output"].clone(), answer["is_error"].clone()),
        (json!({"error": msg}), json!(true))
    );
}

#[tokio::test]
async fn rule6_silence_past_timeout_seconds_is_a_read_timeout() {
    let Some((t, _h)) = dev_target("rule6_silence_past_timeout_seconds_is_a_read_timeout").await
    else {
        return;
    };
    let (url, _silent) = silent_server().await;
    t.register_at("t", &url, "plugin:slow", None, 0.2).await;
    let (_, answer) = invoke(&t, json!({"name": "t"})).await;
    assert_eq!(
        answer["output"],
        json!({"error": "remote tool callback HTTP failure: ReadTimeout: "})
    );
}

#[tokio::test]
async fn unknown_tool_or_role_is_404_and_builtins_answer() {
    let Some((t, _h)) = dev_target("unknown_tool_or_role_is_404_and_builtins_answer").await else {
        return;
    };
    assert_eq!(
        invoke(&t, json!({"name": "nope"})).await,
        (
            404,
            json!({"detail": "role 小八 has no tool named \"nope\""})
        )
    );
    assert_eq!(
        invoke(&t, json!({"name": "recall_memory", "role": "X"})).await,
        (404, json!({"detail": "unknown role: X"}))
    );
    let (status, answer) = invoke(
        &t,
        json!({"name": "recall_memory", "arguments": {"query": "neko"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["output"],
        neko_sidecar::devserver::default_builtins()[0].answer
    );
}

// ---- dead-plugin eviction ----

#[tokio::test]
async fn third_connection_failure_evicts_the_plugins_tools_on_that_port_everywhere() {
    let Some((t, h)) =
        dev_target("third_connection_failure_evicts_the_plugins_tools_on_that_port_everywhere")
            .await
    else {
        return;
    };
    let dead = refused_port();
    let alive = CallbackServer::start(200, "application/json", "{}").await;
    let dead_url = format!("http://127.0.0.1:{dead}/a");
    t.register_at("a", &dead_url, "plugin:p", None, 30.0).await;
    t.register_at(
        "b",
        &format!("http://127.0.0.1:{dead}/b"),
        "plugin:p",
        None,
        30.0,
    )
    .await;
    t.register_at("c", &alive.url, "plugin:p", None, 30.0).await;
    t.register_at(
        "d",
        &format!("http://127.0.0.1:{dead}/d"),
        "plugin:other",
        None,
        30.0,
    )
    .await;
    for _ in 0..2 {
        invoke(&t, json!({"name": "a"})).await;
    }
    assert_eq!(
        h.registry_snapshot().names("Lanlan"),
        ["recall_memory", "a", "b", "c", "d"]
    );
    let (status, answer) = invoke(&t, json!({"name": "b", "role": "Lanlan"})).await;
    assert_eq!((status, answer["is_error"].clone()), (200, json!(true)));
    for role in ["小八", "Lanlan"] {
        assert_eq!(
            h.registry_snapshot().names(role),
            ["recall_memory", "c", "d"],
            "{role}"
        );
    }
}

#[tokio::test]
async fn a_completed_exchange_resets_the_failure_count() {
    let Some((t, h)) = dev_target("a_completed_exchange_resets_the_failure_count").await else {
        return;
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], refused_port()));
    let url = format!("http://{addr}/tool");
    t.register_at("a", &url, "plugin:p", None, 30.0).await;
    invoke(&t, json!({"name": "a"})).await;
    invoke(&t, json!({"name": "a"})).await;
    let cb = CallbackServer::start_on(
        tokio::net::TcpListener::bind(addr).await.unwrap(),
        500,
        "text/plain",
        "boom",
    );
    let (_, answer) = invoke(&t, json!({"name": "a"})).await;
    assert_eq!(
        answer["output"],
        json!({"error": "remote tool callback returned HTTP 500: boom"})
    );
    cb.stop().await;
    invoke(&t, json!({"name": "a"})).await;
    invoke(&t, json!({"name": "a"})).await;
    assert!(
        h.registry_snapshot().tool("小八", "a").is_some(),
        "2 failures after a reset must not evict"
    );
    invoke(&t, json!({"name": "a"})).await;
    assert!(h.registry_snapshot().tool("小八", "a").is_none());
}

#[tokio::test]
async fn read_timeouts_and_non_plugin_sources_never_evict() {
    let Some((t, h)) = dev_target("read_timeouts_and_non_plugin_sources_never_evict").await else {
        return;
    };
    let (silent, _task) = silent_server().await;
    t.register_at("slow", &silent, "plugin:p", None, 0.1).await;
    let refused = format!("http://127.0.0.1:{}/x", refused_port());
    t.register_at("ext", &refused, "external", None, 30.0).await;
    for _ in 0..3 {
        invoke(&t, json!({"name": "slow"})).await;
        invoke(&t, json!({"name": "ext"})).await;
    }
    assert_eq!(
        h.registry_snapshot().names("小八"),
        ["recall_memory", "slow", "ext"]
    );
}
