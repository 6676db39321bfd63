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
//! | `structuredContent` | `output` as it is, but for the data of a picture or a sound (below) |
//! | text content only | `output`: the texts, one per line |
//! | PNG or JPEG image | main_server `images` (the first 2; checked, repaired or refused by `callback::images`), the rest described |
//! | audio, other images, resource links, embedded resources | a short description in `output` |
//!
//! No picture as text: where `structuredContent` repeats the data of an
//! image or audio block of the same answer (the filesystem server's
//! `read_media_file` does), the model reads the block's short description
//! instead; an attached image's data is left for `callback::images`, which
//! knows whether it was sent, to replace.
//!
//! Never I/O, never logs.

use serde_json::{Map, Value as Json, json};

use crate::contract::answer::{decoded_size as size, insert_into_output, refer_to_attachments};
use crate::contract::envelope::Envelope;
// main_server looks at the first 2 `images` entries only (CONTRACT.md,
// "Images"): past them an image would be dropped with a warning, so it is
// described instead. One past its size caps is attached all the same: the
// sidecar shrinks it (`callback::images`).
use crate::contract::images::MAX_IMAGES;

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
    // The data of each block not attached, with the note that stands for it.
    let mut stand_ins: Vec<(String, String)> = Vec::new();
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
                } else if images.len() >= MAX_IMAGES {
                    Some("main_server takes at most 2 images per answer")
                } else if is_error {
                    Some("a failed call's images are not shown")
                } else {
                    None
                };
                match why {
                    None => images.push(json!({"data_b64": data, "mime": mime})),
                    Some(why) => {
                        let note = format!(
                            "[image {}, {}, not attached: {why}]",
                            mime_or(mime),
                            size(data)
                        );
                        stand_ins.push((data.to_owned(), note.clone()));
                        notes.push(note);
                    }
                }
            }
            Some("audio") => {
                let mime = block.get("mimeType").and_then(Json::as_str).unwrap_or("");
                let data = block.get("data").and_then(Json::as_str).unwrap_or("");
                let note = format!(
                    "[audio {}, {}: not attached, main_server takes no audio]",
                    mime_or(mime),
                    size(data)
                );
                stand_ins.push((data.to_owned(), note.clone()));
                notes.push(note);
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
        let mut output = Json::Object(output);
        refer_to_attachments(&mut output, &stand_ins);
        return Envelope {
            output,
            is_error: true,
            error: Some(message),
            images: None,
            image_repairs: Vec::new(),
        };
    }

    let output = match result.get("structuredContent") {
        // Structured content is what the tool means to be read; the texts
        // are, by the specification, its serialisation for older clients.
        Some(s) if !s.is_null() => {
            let mut out = s.clone();
            refer_to_attachments(&mut out, &stand_ins);
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
    fn an_image_past_main_servers_size_cap_is_attached_for_the_sidecar_to_shrink() {
        let big = "A".repeat(2 * 1024 * 1024 + 4);
        let e = envelope_for(&json!({"content": [
            {"type": "image", "data": big, "mimeType": "image/png"},
            {"type": "image", "data": PNG, "mimeType": "image/png"}]}));
        assert_eq!(
            e.images.as_ref().and_then(Json::as_array).map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn structured_content_repeating_a_sound_or_an_unattached_picture_reads_its_note() {
        let wav = "UklGRiQAAABXQVZFZm10IBAAAAABAAEA".repeat(40);
        let gif = "R0lGODlhAQABAAAAACw=".repeat(40);
        let e = envelope_for(&json!({
            "content": [
                {"type": "audio", "data": wav, "mimeType": "audio/wav"},
                {"type": "image", "data": gif, "mimeType": "image/gif"}],
            "structuredContent": {"content": [
                {"type": "audio", "data": wav, "mimeType": "audio/wav"},
                {"type": "image", "data": gif, "mimeType": "image/gif"}]}
        }));
        let text = model_text(&e.output);
        assert!(
            !text.contains(&wav[..40]) && !text.contains(&gif[..40]),
            "{text}"
        );
        assert_eq!(
            e.output["content"][0]["data"],
            "[audio audio/wav, 960 bytes: not attached, main_server takes no audio]"
        );
        assert!(text.len() < 1024, "{text}");
        let failed = envelope_for(&json!({
            "content": [{"type": "audio", "data": wav, "mimeType": "audio/wav"}],
            "structuredContent": {"clip": wav}, "isError": true}));
        assert!(!model_text(&failed.output).contains(&wav[..40]));
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
