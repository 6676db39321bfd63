//! The answer rules: what the sidecar sends back to main_server for a call.
//!
//! Every answer is an envelope with a real JSON boolean `is_error`, because
//! main_server truth-tests that field (the string "false" would read as a
//! failure). This file owns the shape of the envelopes the sidecar makes
//! itself and the normalisation of whatever a handler answered. It is pure:
//! it never does I/O and never logs.
//!
//! Error envelopes the sidecar makes look like
//! `{"output": {"error": MESSAGE, "code": CODE, ..}, "is_error": true, "error": MESSAGE}`:
//! main_server shows the model `output` alone, so the human-readable MESSAGE
//! is in `output.error`, and again in `error` for main_server's logs; CODE
//! is a stable upper-case tag in the style of the Python SDK
//! (`TOOL_NOT_REGISTERED`, `TOOL_TIMEOUT`, ...) for logs and for models that
//! branch on it. A handler's failure whose reason is only in `error` gets
//! it copied into `output` (`reason_in_output`).

use serde_json::{Map, Value as Json, json};

use crate::contract::answer::insert_into_output;
use crate::contract::{is_envelope, model_reads, truthy};

/// A normalised answer, ready to be serialised as the response body.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub output: Json,
    pub is_error: bool,
    /// Present exactly when `is_error`: what the model should read.
    pub error: Option<String>,
    /// The handler's `images`. `callback::images` checks them with
    /// main_server's own rule (`contract::images`) before they are sent,
    /// repairing or refusing those main_server would refuse.
    pub images: Option<Json>,
    /// What the sidecar repaired in `images`, one sentence per image: sent
    /// as `image_repairs` beside `output`, where main_server (and so the
    /// model) never looks, for `neko-sidecar call` and the curious.
    pub image_repairs: Vec<String>,
}

impl Envelope {
    /// A successful answer carrying `output`.
    pub(crate) fn ok(output: Json) -> Self {
        Self {
            output,
            is_error: false,
            error: None,
            images: None,
            image_repairs: Vec::new(),
        }
    }

    /// A failure made by the sidecar: `code` is a stable tag, `message` the
    /// sentence the model reads.
    pub(crate) fn failure(code: &str, message: impl Into<String>) -> Self {
        Self::failure_with(code, message, Map::new())
    }

    /// A failure with extra structured fields in `output` (e.g. the list of
    /// argument problems), next to `error` and `code`.
    pub(crate) fn failure_with(
        code: &str,
        message: impl Into<String>,
        details: Map<String, Json>,
    ) -> Self {
        let message = message.into();
        let mut output = Map::new();
        output.insert("error".into(), Json::String(message.clone()));
        output.insert("code".into(), Json::String(code.to_string()));
        output.extend(details);
        Self {
            output: Json::Object(output),
            is_error: true,
            error: Some(message),
            images: None,
            image_repairs: Vec::new(),
        }
    }

    /// The `code` in the output, where the sidecar's own failures put it.
    pub fn code(&self) -> Option<&str> {
        self.output.get("code").and_then(Json::as_str)
    }

    /// The response body.
    pub fn to_vec(&self) -> Vec<u8> {
        // Serialising a `Value` into memory cannot fail.
        serde_json::to_vec(&self.to_json()).unwrap_or_default()
    }

    pub fn to_json(&self) -> Json {
        let mut m = Map::new();
        m.insert("output".into(), self.output.clone());
        m.insert("is_error".into(), Json::Bool(self.is_error));
        if let (true, Some(e)) = (self.is_error, &self.error) {
            m.insert("error".into(), Json::String(e.clone()));
        }
        if let Some(images) = &self.images {
            m.insert("images".into(), images.clone());
        }
        if !self.image_repairs.is_empty() {
            m.insert("image_repairs".into(), json!(self.image_repairs));
        }
        Json::Object(m)
    }
}

/// Normalises the body a handler answered with success (HTTP 2xx, or exit
/// status 0), keeping the meaning main_server would give it
/// (`contract::answer`), and making sure a failure's reason is read:
///
/// - empty (or only whitespace): the output is the empty string, as
///   main_server would show it (a tool that acts without a result is valid);
/// - not JSON: the text is the output, lossily decoded as UTF-8, trailing
///   line breaks removed (a script's `echo` adds one);
/// - JSON that is not an envelope: the whole value is the output;
/// - an envelope: `is_error` is coerced to a boolean by Python truthiness;
///   the output is `output` when present, else the object without `images`,
///   `is_error` and `error` (null when nothing is left); `images` is
///   kept as the handler gave it, for `callback::images` to check; a
///   success's `output` is kept exactly.
///
/// On failure, `error` is the handler's (stringified when not a string, a
/// generic sentence when missing), and `reason_in_output` puts it where the
/// model reads it, since main_server shows the model `output` alone.
pub fn normalise(body: &[u8]) -> Envelope {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Envelope::ok(Json::String(String::new()));
    }
    let value: Json = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            return Envelope::ok(Json::String(
                text.trim_end_matches(['\r', '\n']).to_string(),
            ));
        }
    };
    let Json::Object(mut obj) = value else {
        return Envelope::ok(value);
    };
    if !is_envelope(&obj) {
        return Envelope::ok(Json::Object(obj));
    }
    // `shift_remove`, not `remove`: with serde_json's `preserve_order`,
    // `remove` swaps the last key into the hole, and the rest of an envelope
    // without `output` would reach the model in another order than the
    // handler wrote it (main_server, in Python, keeps the order).
    let is_error = obj.shift_remove("is_error").is_some_and(|v| truthy(&v));
    let error = obj.shift_remove("error");
    let images = obj.shift_remove("images");
    let output = match obj.shift_remove("output") {
        Some(o) => o,
        None if obj.is_empty() => Json::Null,
        None => Json::Object(obj),
    };
    if !is_error {
        return Envelope {
            images,
            ..Envelope::ok(output)
        };
    }
    let said = match error {
        Some(Json::String(s)) if !s.trim().is_empty() => Some(s),
        Some(v) if truthy(&v) => Some(v.to_string()),
        _ => None,
    };
    let (output, error) = match said {
        Some(reason) => (reason_in_output(output, &reason), reason),
        None if says_nothing(&output) => {
            let reason = "the tool reported a failure without saying why".to_string();
            (reason_in_output(output, &reason), reason)
        }
        // The output is the explanation; it reaches the model as it is.
        None => (
            output,
            "the tool reported a failure (see the output)".to_string(),
        ),
    };
    Envelope {
        output,
        is_error,
        error: Some(error),
        images,
        image_repairs: Vec::new(),
    }
}

/// An output that tells the model nothing about a failure: false by
/// Python truthiness (null, "", 0, [], {}), or blank text.
fn says_nothing(output: &Json) -> bool {
    match output {
        Json::String(s) => s.trim().is_empty(),
        other => !truthy(other),
    }
}

/// `output` with `reason` added where the model reads it, unless the text
/// the model reads already holds it: `{"error": reason}` for an output that
/// says nothing, an `error` key in an object that has none (else `reason`),
/// and any other value wrapped as main_server wraps one,
/// `{"result": value, "error": reason}`.
pub(crate) fn reason_in_output(mut output: Json, reason: &str) -> Json {
    if !says_nothing(&output) && model_reads(&output, reason) {
        return output;
    }
    if output.is_null() || output.as_str().is_some_and(|s| s.trim().is_empty()) {
        return json!({ "error": reason });
    }
    let key = match &output {
        Json::Object(o) => ["error", "reason", "error_message"]
            .into_iter()
            .find(|k| !o.contains_key(*k))
            .unwrap_or("_error"),
        _ => "error",
    };
    insert_into_output(&mut output, key, Json::String(reason.to_owned()));
    output
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(body: &str) -> Json {
        normalise(body.as_bytes()).to_json()
    }

    #[test]
    fn an_envelope_passes_through() {
        assert_eq!(
            norm(r#"{"output": {"temp_c": 22}, "is_error": false}"#),
            json!({"output": {"temp_c": 22}, "is_error": false})
        );
        assert_eq!(
            norm(
                r#"{"output": {"error": "city not found"}, "is_error": true, "error": "city not found"}"#
            ),
            json!({"output": {"error": "city not found"}, "is_error": true, "error": "city not found"})
        );
    }

    #[test]
    fn is_error_is_coerced_by_python_truthiness() {
        for (raw, want) in [
            (r#""false""#, true),
            (r#""""#, false),
            ("0", false),
            ("0.0", false),
            ("1", true),
            ("null", false),
            ("[]", false),
            ("[0]", true),
            ("{}", false),
            ("true", true),
        ] {
            let got = norm(&format!(r#"{{"output": 1, "is_error": {raw}}}"#));
            assert_eq!(got["is_error"], Json::Bool(want), "is_error = {raw}");
        }
    }

    #[test]
    fn error_is_kept_only_when_is_error() {
        assert_eq!(
            norm(r#"{"output": 5, "is_error": false, "error": "ignored"}"#),
            json!({"output": 5, "is_error": false})
        );
        assert_eq!(
            norm(r#"{"output": {"reason": "x"}, "is_error": true, "error": "CITY_NOT_FOUND"}"#),
            json!({"output": {"reason": "x", "error": "CITY_NOT_FOUND"}, "is_error": true, "error": "CITY_NOT_FOUND"})
        );
    }

    #[test]
    fn a_failure_without_a_message_gets_one() {
        let v = norm(r#"{"is_error": true}"#);
        assert_eq!(
            v["output"],
            json!({"error": "the tool reported a failure without saying why"})
        );
        assert_eq!(v["error"], "the tool reported a failure without saying why");
        // An output that explains itself reaches the model as it is.
        let v = norm(r#"{"output": {"why": "x"}, "is_error": "yes"}"#);
        assert_eq!(v["output"], json!({"why": "x"}));
        assert_eq!(v["error"], "the tool reported a failure (see the output)");
        let v = norm(r#"{"output": null, "is_error": true, "error": {"code": 7}}"#);
        assert_eq!(v["error"], r#"{"code":7}"#);
        assert_eq!(v["output"], json!({"error": r#"{"code":7}"#}));
    }

    #[test]
    fn an_envelope_without_output_keeps_the_rest_as_output() {
        assert_eq!(
            norm(r#"{"is_error": false, "temp": 3, "images": []}"#),
            json!({"output": {"temp": 3}, "is_error": false, "images": []})
        );
        assert_eq!(
            norm(r#"{"is_error": true, "error": "no such city"}"#),
            json!({"output": {"error": "no such city"}, "is_error": true, "error": "no such city"})
        );
    }

    #[test]
    fn other_json_is_wrapped() {
        assert_eq!(
            norm(r#"{"temp": 3}"#),
            json!({"output": {"temp": 3}, "is_error": false})
        );
        // Rule 4: an object with neither field is output, images and all.
        assert_eq!(
            norm(r#"{"error": "x", "images": 1}"#),
            json!({"output": {"error": "x", "images": 1}, "is_error": false})
        );
        assert_eq!(norm("[1, 2]"), json!({"output": [1, 2], "is_error": false}));
        assert_eq!(norm("42\n"), json!({"output": 42, "is_error": false}));
        assert_eq!(norm(r#""hi""#), json!({"output": "hi", "is_error": false}));
        assert_eq!(norm("null"), json!({"output": null, "is_error": false}));
    }

    #[test]
    fn text_and_empty_bodies_become_strings() {
        assert_eq!(
            norm("sunny, 22 C\n"),
            json!({"output": "sunny, 22 C", "is_error": false})
        );
        assert_eq!(
            norm("a\nb\r\n"),
            json!({"output": "a\nb", "is_error": false})
        );
        assert_eq!(norm(""), json!({"output": "", "is_error": false}));
        assert_eq!(norm(" \n"), json!({"output": "", "is_error": false}));
        assert_eq!(
            normalise(b"caf\xe9").output,
            Json::String("caf\u{fffd}".into())
        );
    }

    #[test]
    fn images_are_kept_as_the_handler_gave_them_for_the_image_check() {
        let images = json!([{"data_b64": "not base64!", "mime": "image/gif", "x": 1}, 2, 3]);
        let body = json!({"output": "see", "is_error": false, "images": images});
        let e = normalise(body.to_string().as_bytes());
        assert_eq!(e.images, Some(images.clone()));
        assert_eq!(e.to_json()["images"], images);
        let e = normalise(br#"{"output": 1, "images": {"data_b64": "AAAA"}}"#);
        assert_eq!(e.to_json()["images"], json!({"data_b64": "AAAA"}));
    }

    #[test]
    fn a_reason_only_in_error_is_copied_where_the_model_reads_it() {
        let cases = [
            (json!(null), json!({"error": "R"})),
            (json!(""), json!({"error": "R"})),
            (json!({"city": "x"}), json!({"city": "x", "error": "R"})),
            (
                json!({"error": "CODE"}),
                json!({"error": "CODE", "reason": "R"}),
            ),
            (json!([1, 2]), json!({"result": [1, 2], "error": "R"})),
            (json!(42), json!({"result": 42, "error": "R"})),
            (json!("failed"), json!({"result": "failed", "error": "R"})),
            // Already read by the model: left exactly as it is.
            (json!("R: no such city"), json!("R: no such city")),
            (json!({"error": "R"}), json!({"error": "R"})),
            (
                json!({"detail": {"why": "R"}}),
                json!({"detail": {"why": "R"}}),
            ),
        ];
        for (output, want) in cases {
            let body = json!({"output": output, "is_error": true, "error": "R"});
            let e = normalise(body.to_string().as_bytes());
            assert_eq!(e.output, want, "{output}");
            assert_eq!(e.error.as_deref(), Some("R"));
            assert!(crate::contract::model_text(&e.output).contains('R'));
        }
    }

    #[test]
    fn a_success_output_is_never_touched() {
        for output in [json!(null), json!(""), json!({"error": "not a failure"})] {
            let body = json!({"output": output, "is_error": false, "error": "ignored"});
            let e = normalise(body.to_string().as_bytes());
            assert_eq!(e.output, output);
            assert_eq!(e.error, None);
        }
    }

    #[test]
    fn sidecar_failures_carry_the_message_twice_and_a_code() {
        let e = Envelope::failure("TOOL_TIMEOUT", "too slow");
        assert_eq!(
            e.to_json(),
            json!({"output": {"error": "too slow", "code": "TOOL_TIMEOUT"}, "is_error": true, "error": "too slow"})
        );
        assert_eq!(e.code(), Some("TOOL_TIMEOUT"));
        assert_eq!(Envelope::ok(json!(1)).code(), None);
    }
}
