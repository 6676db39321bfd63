//! How main_server turns a callback's answer into what the model reads
//! (CONTRACT.md, "How main_server builds `output`"), and the text itself.
//!
//! The model reads `output` alone, rendered as text: `is_error` and `error`
//! go to main_server's logs and bookkeeping, never to the model. So this
//! module answers two questions for everyone who needs them: what `output`
//! main_server builds from an answer (`read_answer`), and what text the
//! model then reads (`model_text`). Pure: bytes in, a `Reading` out.
//! Also what the model reads in place of an attached picture's data
//! (`refer_to_attachments`, `decoded_size`), which the sidecar's image
//! check and its reading of an MCP answer share.

use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use super::images::{self, Image};
use super::{is_envelope, truthy};

/// How much of an error body main_server quotes, in characters.
pub(crate) const ERROR_BODY_CHARS: usize = 200;

/// What main_server made of one answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reading {
    /// `output` as main_server builds it, image warnings and descriptions
    /// included: the only part the model reads.
    pub output: Json,
    /// main_server's own bookkeeping; never shown to the model.
    pub is_error: bool,
    /// The envelope's `error`, when `is_error`; never shown to the model.
    pub error: Option<Json>,
    /// The images main_server accepted and passes on to a session that can
    /// see them.
    pub images: Vec<Image>,
    /// Why images were refused or left out; also in `output` as
    /// `_image_warnings`, where the model reads them.
    pub warnings: Vec<String>,
}

impl Reading {
    /// A plain value, shown as it is.
    pub(crate) fn success(output: Json) -> Self {
        Reading {
            output,
            is_error: false,
            error: None,
            images: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// One of main_server's own failures: the message inside `output`.
    pub(crate) fn failure(message: String) -> Self {
        Reading {
            output: json!({ "error": message }),
            is_error: true,
            error: Some(Json::String(message)),
            images: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Exactly the text the model reads for this answer.
    pub fn model_text(&self) -> String {
        model_text(&self.output)
    }
}

/// Rule 1: a transport failure, named as httpx names it (`ConnectError`,
/// `ConnectTimeout`, `ReadTimeout`, `PoolTimeout`, ...).
pub fn transport_failure(kind: &str, message: &str) -> Reading {
    Reading::failure(format!(
        "remote tool callback HTTP failure: {kind}: {message}"
    ))
}

/// Rules 2 to 8: reads an HTTP answer. `sees_images` is whether the
/// session's model can look at images; one that cannot gets
/// `_image_descriptions` in `output` instead.
pub fn read_answer(status: u16, body: &[u8], sees_images: bool) -> Reading {
    let text = String::from_utf8_lossy(body);
    if status >= 400 {
        let head: String = text.chars().take(ERROR_BODY_CHARS).collect();
        return Reading::failure(format!(
            "remote tool callback returned HTTP {status}: {head}"
        ));
    }
    let Ok(value) = serde_json::from_slice::<Json>(body) else {
        return Reading::success(Json::String(text.into_owned()));
    };
    match value {
        Json::Object(obj) if is_envelope(&obj) => read_envelope(obj, sees_images),
        other => Reading::success(other),
    }
}

/// Rules 6 to 8: an envelope.
fn read_envelope(mut obj: Map<String, Json>, sees_images: bool) -> Reading {
    let is_error = obj.get("is_error").is_some_and(truthy);
    let error = is_error.then(|| obj.get("error").cloned().unwrap_or(Json::Null));
    let raw_images = obj.shift_remove("images");
    let mut output = match obj.get("output") {
        Some(out) => out.clone(),
        // Everything but `images`, `is_error` and `error` included.
        None => Json::Object(obj),
    };
    let read = match raw_images {
        Some(v) => images::read_images(&v),
        None => images::ImageReading::default(),
    };
    if !read.warnings.is_empty() {
        insert_into_output(&mut output, "_image_warnings", json!(read.warnings));
    }
    if !sees_images && !read.images.is_empty() {
        let descriptions: Vec<String> = read.images.iter().map(Image::describe).collect();
        insert_into_output(&mut output, "_image_descriptions", json!(descriptions));
    }
    Reading {
        output,
        is_error,
        error,
        images: read.images,
        warnings: read.warnings,
    }
}

/// Puts `key` into `output` the way main_server does: into an object as it
/// is, any other value first wrapped as `{"result": value}`.
pub(crate) fn insert_into_output(output: &mut Json, key: &str, value: Json) {
    if !output.is_object() {
        *output = json!({ "result": output.take() });
    }
    if let Json::Object(o) = output {
        o.insert(key.to_owned(), value);
    }
}

/// The text the model reads for `output`: a string as it is, anything else
/// as JSON, written the way Python's `json.dumps(value, ensure_ascii=False)`
/// writes it (", " and ": " between items).
pub fn model_text(output: &Json) -> String {
    match output {
        Json::String(s) => s.clone(),
        other => {
            let mut out = Vec::new();
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonStyle);
            // Writing a `Value` into memory cannot fail.
            let _ = other.serialize(&mut ser);
            String::from_utf8(out).unwrap_or_default()
        }
    }
}

/// Whether the model reading `output` reads `text`: as it is, or (inside
/// JSON) with JSON's escapes.
pub fn model_reads(output: &Json, text: &str) -> bool {
    let shown = model_text(output);
    if shown.contains(text) {
        return true;
    }
    let escaped = Json::String(text.to_owned()).to_string();
    !output.is_string() && shown.contains(&escaped[1..escaped.len() - 1])
}

/// serde_json's compact output with Python's default separators.
struct PythonStyle;

impl serde_json::ser::Formatter for PythonStyle {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// Replaces every string in `output` that repeats the data of an
/// attachment (as its base64, with or without whitespace, or as a `data:`
/// URL of it) by that attachment's short reference. `attachments` pairs
/// the data with the reference.
pub(crate) fn refer_to_attachments(output: &mut Json, attachments: &[(String, String)]) {
    if attachments.is_empty() {
        return;
    }
    let compact: Vec<(String, &str)> = attachments
        .iter()
        .filter(|(data, _)| !data.trim().is_empty())
        .map(|(data, r)| (data.split_whitespace().collect(), r.as_str()))
        .collect();
    replace_strings(output, &|s: &str| {
        // Cheap first: a picture is long, and almost every string is short.
        let body = match s.find(";base64,") {
            Some(at) if s.starts_with("data:") => &s[at + 8..],
            _ => s,
        };
        if body.len() < compact.iter().map(|(d, _)| d.len()).min().unwrap_or(0) {
            return None;
        }
        let body: String = body.split_whitespace().collect();
        compact
            .iter()
            .find(|(data, _)| *data == body)
            .map(|(_, r)| (*r).to_owned())
    });
}

fn replace_strings(value: &mut Json, swap: &dyn Fn(&str) -> Option<String>) {
    match value {
        Json::String(s) => {
            if let Some(r) = swap(s) {
                *s = r;
            }
        }
        Json::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, swap)),
        Json::Object(map) => map.values_mut().for_each(|v| replace_strings(v, swap)),
        _ => {}
    }
}

/// The decoded size of base64 `data`, for a reference or a description.
pub(crate) fn decoded_size(data: &str) -> String {
    let chars = data
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .count();
    let bytes = chars * 3 / 4;
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(status: u16, body: &str) -> Reading {
        read_answer(status, body.as_bytes(), true)
    }

    #[test]
    fn rule1_transport_failure_is_in_output() {
        let r = transport_failure("ReadTimeout", "");
        assert_eq!(
            r.output,
            json!({"error": "remote tool callback HTTP failure: ReadTimeout: "})
        );
        assert!(r.is_error);
        assert!(r.model_text().contains("ReadTimeout"));
    }

    #[test]
    fn rule2_error_status_quotes_200_chars_in_output() {
        let body = "é".repeat(250);
        let r = read(500, &body);
        let want = format!(
            "remote tool callback returned HTTP 500: {}",
            "é".repeat(200)
        );
        assert_eq!(r.output, json!({ "error": want }));
        assert!(r.is_error);
    }

    #[test]
    fn rule3_text_and_empty_bodies_are_output() {
        assert_eq!(read(200, "plain words").output, json!("plain words"));
        assert_eq!(read(200, "").model_text(), "");
        assert!(!read(200, "").is_error);
    }

    #[test]
    fn rule4_non_object_json_is_output() {
        assert_eq!(read(200, "[1,2]").output, json!([1, 2]));
        assert_eq!(read(200, "null").model_text(), "null");
        assert_eq!(read(307, "\"moved\"").output, json!("moved"));
    }

    #[test]
    fn rule5_a_plain_object_is_output_images_and_all() {
        let r = read(200, r#"{"temp_c":22,"error":"x","images":[1]}"#);
        assert_eq!(r.output, json!({"temp_c":22,"error":"x","images":[1]}));
        assert!(!r.is_error);
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn rule6_the_model_reads_output_not_error() {
        let r = read(
            200,
            r#"{"output":null,"is_error":true,"error":"city not found"}"#,
        );
        assert_eq!(r.model_text(), "null");
        assert_eq!(r.error, Some(json!("city not found")));
        assert!(r.is_error);

        let r = read(200, r#"{"is_error":true,"error":"X"}"#);
        assert_eq!(r.model_text(), r#"{"is_error": true, "error": "X"}"#);

        let r = read(200, r#"{"is_error":0,"x":1,"images":[]}"#);
        assert_eq!((r.output, r.is_error), (json!({"is_error":0,"x":1}), false));

        let r = read(200, r#"{"output":1,"is_error":"false","error":"hidden"}"#);
        assert!(r.is_error, "the string \"false\" is true in Python");
    }

    #[test]
    fn rule8_image_warnings_reach_the_model_inside_output() {
        let r = read(200, r#"{"output":"done","images":[{"data_b64":"@@"}]}"#);
        assert_eq!(r.output["result"], "done");
        let warnings = r.output["_image_warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(r.model_text().contains("_image_warnings"));

        let r = read(200, r#"{"output":{"a":1},"images":"nope"}"#);
        assert_eq!(r.output["a"], 1);
        assert!(r.output["_image_warnings"].is_array());
    }

    #[test]
    fn text_inside_json_is_read_with_its_escapes() {
        assert!(model_reads(
            &json!({"error": "say \"hi\"\n"}),
            "say \"hi\"\n"
        ));
        assert!(model_reads(&json!("plain"), "lai"));
        assert!(!model_reads(&json!(null), "null thing"));
    }

    #[test]
    fn model_text_is_pythons_json_dumps_without_ascii_escapes() {
        assert_eq!(model_text(&json!("as is")), "as is");
        assert_eq!(
            model_text(&json!({"city": "東京", "t": [1, 2.5, null]})),
            r#"{"city": "東京", "t": [1, 2.5, null]}"#
        );
        assert_eq!(model_text(&json!({})), "{}");
        assert_eq!(model_text(&json!(true)), "true");
    }
}
