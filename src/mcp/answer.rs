//! How an MCP `tools/call` result becomes the envelope main_server reads.
//!
//! Pure, over the result as the MCP specification writes it on the wire
//! (`content`, `structuredContent`, `isError`), so the rules do not move
//! with the SDK's types. What the model reads is `output` alone
//! (CONTRACT.md), so everything worth reading ends up there:
//!
//! | MCP result | envelope |
//! |---|---|
//! | `isError: true` | `is_error: true`, the text content as `output.error` |
//! | `structuredContent` | `output` as it is |
//! | text content only | `output`: the texts, one per line |
//! | PNG or JPEG image | main_server `images` (the first 2), the rest described |
//! | audio, other images, resource links, embedded resources | a short description in `output` |
//!
//! Never I/O, never logs.

use serde_json::{Map, Value as Json, json};

use crate::callback::envelope::Envelope;
use crate::contract::answer::insert_into_output;
// main_server looks at the first 2 `images` entries only, each at most
// 2 MiB of base64 (CONTRACT.md, "Images"): past either cap an image would
// be dropped with a warning, so it is described instead.
use crate::contract::images::{MAX_B64_BYTES, MAX_IMAGES};

/// The envelope for a `tools/call` result (`result` as JSON on the wire).
pub(crate) fn envelope_for(result: &Json) -> Envelope {
    let empty = Vec::new();
    let content = result
        .get("content")
        .and_then(Json::as_array)
        .unwrap_or(&empty);
    let is_error = result.get("isError").and_then(Json::as_bool) == Some(true);
    let mut texts: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut images: Vec<Json> = Vec::new();
    for block in content {
        match block.get("type").and_then(Json::as_str) {
            Some("text") => {
                if let Some(t) = block.get("text").and_then(Json::as_str) {
                    texts.push(t.to_string());
                }
            }
            Some("image") => {
                let mime = block.get("mimeType").and_then(Json::as_str).unwrap_or("");
                let data = block.get("data").and_then(Json::as_str).unwrap_or("");
                let why = if !matches!(mime, "image/png" | "image/jpeg") {
                    Some("main_server takes PNG and JPEG images only")
                } else if data.len() > MAX_B64_BYTES {
                    Some("larger than main_server takes (2 MiB of base64)")
                } else if images.len() >= MAX_IMAGES {
                    Some("main_server takes at most 2 images per answer")
                } else if is_error {
                    Some("a failed call's images are not shown")
                } else {
                    None
                };
                match why {
                    None => images.push(json!({"data_b64": data, "mime": mime})),
                    Some(why) => notes.push(format!(
                        "[image {}, {}, not attached: {why}]",
                        mime_or(mime),
                        size(data)
                    )),
                }
            }
            Some("audio") => {
                let mime = block.get("mimeType").and_then(Json::as_str).unwrap_or("");
                let data = block.get("data").and_then(Json::as_str).unwrap_or("");
                notes.push(format!(
                    "[audio {}, {}: not attached, main_server takes no audio]",
                    mime_or(mime),
                    size(data)
                ));
            }
            Some("resource_link") => {
                let uri = block.get("uri").and_then(Json::as_str).unwrap_or("?");
                let name = block.get("name").and_then(Json::as_str).unwrap_or(uri);
                let mime = block.get("mimeType").and_then(Json::as_str);
                notes.push(match mime {
                    Some(m) => format!("[resource link: {name} <{uri}> ({m})]"),
                    None => format!("[resource link: {name} <{uri}>]"),
                });
            }
            Some("resource") => {
                let r = block.get("resource").unwrap_or(&Json::Null);
                let uri = r.get("uri").and_then(Json::as_str).unwrap_or("?");
                let mime = r.get("mimeType").and_then(Json::as_str);
                let what = match (r.get("text").and_then(Json::as_str), r.get("blob")) {
                    (Some(t), _) => format!("text, {} characters", t.chars().count()),
                    (None, Some(Json::String(b))) => format!("binary, {}", size(b)),
                    _ => "no contents".to_string(),
                };
                notes.push(match mime {
                    Some(m) => format!("[embedded resource <{uri}> ({m}): {what}]"),
                    None => format!("[embedded resource <{uri}>: {what}]"),
                });
            }
            other => notes.push(format!(
                "[content of type {} the sidecar does not know]",
                other.unwrap_or("(none)")
            )),
        }
    }

    if is_error {
        let mut said: Vec<String> = texts.into_iter().filter(|t| !t.trim().is_empty()).collect();
        said.extend(notes);
        let message = if said.is_empty() {
            "the tool reported an error without saying why".to_string()
        } else {
            said.join("\n")
        };
        let mut output = Map::new();
        output.insert("error".into(), Json::String(message.clone()));
        if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
            output.insert("details".into(), s.clone());
        }
        return Envelope {
            output: Json::Object(output),
            is_error: true,
            error: Some(message),
            images: None,
        };
    }

    let output = match result.get("structuredContent") {
        // Structured content is what the tool means to be read; the texts
        // are, by the specification, its serialisation for older clients.
        Some(s) if !s.is_null() => {
            let mut out = s.clone();
            if !notes.is_empty() {
                insert_into_output(&mut out, "_attachments", json!(notes));
            }
            out
        }
        _ => {
            let mut lines = texts;
            lines.extend(notes);
            if lines.is_empty() {
                Json::String(match images.len() {
                    0 => "(the tool answered with no content)".to_string(),
                    1 => "(the tool answered with an image)".to_string(),
                    n => format!("(the tool answered with {n} images)"),
                })
            } else {
                Json::String(lines.join("\n"))
            }
        }
    };
    Envelope {
        images: (!images.is_empty()).then(|| Json::Array(images)),
        ..Envelope::ok(output)
    }
}

fn mime_or(mime: &str) -> &str {
    if mime.is_empty() {
        "of unknown type"
    } else {
        mime
    }
}

/// The decoded size of base64 `data`, for a description.
fn size(data: &str) -> String {
    let bytes = data.trim_end_matches('=').len() * 3 / 4;
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::model_text;

    const PNG: &str = "iVBORw0KGgo=";

    #[test]
    fn text_content_is_the_output() {
        let e = envelope_for(&json!({"content": [{"type": "text", "text": "sunny"}]}));
        assert_eq!(e, Envelope::ok(json!("sunny")));
        let two = envelope_for(&json!({"content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}));
        assert_eq!(two.output, json!("a\nb"));
    }

    #[test]
    fn structured_content_wins_over_its_text_serialisation() {
        let e = envelope_for(&json!({
            "content": [{"type": "text", "text": "{\"sum\":3}"}],
            "structuredContent": {"sum": 3}
        }));
        assert_eq!(e.output, json!({"sum": 3}));
        assert!(!e.is_error);
    }

    #[test]
    fn is_error_puts_the_text_where_the_model_reads_it() {
        let e = envelope_for(&json!({
            "content": [{"type": "text", "text": "city not found"}], "isError": true}));
        assert!(e.is_error);
        assert_eq!(e.error.as_deref(), Some("city not found"));
        assert!(model_text(&e.output).contains("city not found"));
        let silent = envelope_for(&json!({"content": [], "isError": true}));
        assert!(model_text(&silent.output).contains("without saying why"));
    }

    #[test]
    fn two_png_or_jpeg_images_are_attached_and_the_rest_described() {
        let img = |mime: &str| json!({"type": "image", "data": PNG, "mimeType": mime});
        let e = envelope_for(&json!({"content": [
            img("image/png"), img("image/jpeg"), img("image/png"), img("image/gif")]}));
        let images = e.images.as_ref().and_then(Json::as_array).unwrap();
        assert_eq!(images.len(), 2);
        assert_eq!(images[0], json!({"data_b64": PNG, "mime": "image/png"}));
        assert_eq!(images[1]["mime"], "image/jpeg");
        let text = model_text(&e.output);
        assert!(text.contains("at most 2 images"), "{text}");
        assert!(text.contains("PNG and JPEG images only"), "{text}");
    }

    #[test]
    fn an_image_past_main_servers_size_cap_is_described_not_attached() {
        let big = "A".repeat(MAX_B64_BYTES + 4);
        let e = envelope_for(&json!({"content": [
            {"type": "image", "data": big, "mimeType": "image/png"},
            {"type": "image", "data": PNG, "mimeType": "image/png"}]}));
        assert_eq!(
            e.images.as_ref().and_then(Json::as_array).map(Vec::len),
            Some(1)
        );
        assert!(
            model_text(&e.output).contains("2 MiB of base64"),
            "{:?}",
            e.output
        );
    }

    #[test]
    fn an_image_alone_still_says_something() {
        let e = envelope_for(&json!({"content": [
            {"type": "image", "data": PNG, "mimeType": "image/png"}]}));
        assert_eq!(e.output, json!("(the tool answered with an image)"));
        assert!(e.images.is_some());
    }

    #[test]
    fn audio_links_and_embedded_resources_are_described() {
        let e = envelope_for(&json!({"content": [
            {"type": "text", "text": "here"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///r.pdf", "name": "r.pdf", "mimeType": "application/pdf"},
            {"type": "resource", "resource": {"uri": "mem://note", "text": "a note"}}
        ]}));
        assert_eq!(
            e.output,
            json!(
                "here\n[audio audio/wav, 3 bytes: not attached, main_server takes no audio]\n[resource link: r.pdf <file:///r.pdf> (application/pdf)]\n[embedded resource <mem://note>: text, 6 characters]"
            )
        );
    }

    #[test]
    fn descriptions_next_to_structured_content_go_into_it() {
        let e = envelope_for(&json!({
            "content": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}],
            "structuredContent": [1, 2]
        }));
        assert_eq!(e.output["result"], json!([1, 2]));
        assert_eq!(e.output["_attachments"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn no_content_at_all_is_said() {
        let e = envelope_for(&json!({"content": []}));
        assert_eq!(e.output, json!("(the tool answered with no content)"));
    }
}
