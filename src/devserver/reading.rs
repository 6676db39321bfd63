//! How main_server reads a tool callback's answer: the six reading rules of
//! CONTRACT.md, Python truthiness, and the `images` check.
//!
//! Pure: a status and body bytes (or a transport failure) in, what the model
//! sees out. It never performs the call; `invoke.rs` does.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// At most this many images of an envelope reach the model.
pub const MAX_IMAGES: usize = 2;
/// How much of an error body the model sees, in characters.
pub const ERROR_BODY_CHARS: usize = 200;

/// What the model would see from one call: the `/__dev/invoke` answer
/// (plus its `call_id`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelView {
    /// The tool result as the model reads it. For a failed call (rules 1
    /// and 6) it is `{"error": "..."}`.
    pub output: Value,
    /// Whether the model is told the call failed.
    pub is_error: bool,
    /// The error shown to the model; only set when `is_error`.
    pub error: Option<Value>,
    /// The valid images passed on (at most two).
    pub images: Vec<Value>,
    /// Why parts of the answer were dropped (invalid or surplus images).
    pub warnings: Vec<String>,
}

impl ModelView {
    /// A successful call whose output is `output`.
    pub fn success(output: Value) -> Self {
        ModelView {
            output,
            is_error: false,
            error: None,
            images: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// A failed call: the model sees `{"error": message}`.
    pub fn failure(message: String) -> Self {
        ModelView {
            output: json!({ "error": message }),
            is_error: true,
            error: Some(Value::String(message)),
            images: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// Rule 6: a transport failure, named the way httpx names it
/// (`ConnectError`, `ConnectTimeout`, `ReadTimeout`, ...).
pub fn transport_failure(kind: &str, message: &str) -> ModelView {
    ModelView::failure(format!(
        "remote tool callback HTTP failure: {kind}: {message}"
    ))
}

/// Rules 1 to 5: reads an HTTP answer.
pub fn read_http_answer(status: u16, body: &[u8]) -> ModelView {
    let text = String::from_utf8_lossy(body);
    if status >= 400 {
        let head: String = text.chars().take(ERROR_BODY_CHARS).collect();
        return ModelView::failure(format!(
            "remote tool callback returned HTTP {status}: {head}"
        ));
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return ModelView::success(Value::String(text.into_owned()));
    };
    let Value::Object(obj) = value else {
        return ModelView::success(value);
    };
    if !obj.contains_key("output") && !obj.contains_key("is_error") {
        return ModelView::success(Value::Object(obj));
    }
    read_envelope(obj)
}

fn read_envelope(obj: Map<String, Value>) -> ModelView {
    let is_error = obj.get("is_error").is_some_and(is_truthy);
    let error = if is_error {
        Some(obj.get("error").cloned().unwrap_or(Value::Null))
    } else {
        None
    };
    let mut warnings = Vec::new();
    let images = match obj.get("images") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(entries)) => valid_images(entries, &mut warnings),
        Some(other) => {
            warnings.push(format!(
                "images must be a list, got {}; ignored",
                json_type(other)
            ));
            Vec::new()
        }
    };
    let output = match obj.get("output") {
        Some(out) => out.clone(),
        None => {
            let mut rest = obj.clone();
            rest.shift_remove("images");
            Value::Object(rest)
        }
    };
    ModelView {
        output,
        is_error,
        error,
        images,
        warnings,
    }
}

fn valid_images(entries: &[Value], warnings: &mut Vec<String>) -> Vec<Value> {
    let mut kept = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        match image_problem(entry) {
            Some(problem) => warnings.push(format!("images[{i}] dropped: {problem}")),
            None if kept.len() >= MAX_IMAGES => warnings.push(format!(
                "images[{i}] dropped: at most {MAX_IMAGES} images are passed on"
            )),
            None => kept.push(entry.clone()),
        }
    }
    kept
}

/// Why an image entry is invalid, or `None` when it is valid.
fn image_problem(entry: &Value) -> Option<String> {
    let Some(obj) = entry.as_object() else {
        return Some(format!("not an object ({})", json_type(entry)));
    };
    match obj.get("data_b64").and_then(Value::as_str) {
        None => return Some("data_b64 must be a string".into()),
        Some("") => return Some("data_b64 is empty".into()),
        Some(d)
            if !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) =>
        {
            return Some("data_b64 is not base64".into());
        }
        Some(_) => {}
    }
    match obj.get("mime").and_then(Value::as_str) {
        Some(m) if m.starts_with("image/") => {}
        _ => return Some("mime must be an image/* string".into()),
    }
    match obj.get("vision_prompt") {
        None | Some(Value::Null) | Some(Value::String(_)) => None,
        Some(_) => Some("vision_prompt must be a string".into()),
    }
}

/// Python truthiness of a JSON value: `false`, `null`, `0`, `0.0`, `""`,
/// `[]` and `{}` are false; everything else (the string `"false"` too) is true.
pub fn is_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(status: u16, body: &str) -> ModelView {
        read_http_answer(status, body.as_bytes())
    }

    #[test]
    fn truthiness_is_pythons() {
        for falsy in [
            json!(false),
            json!(null),
            json!(0),
            json!(0.0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            assert!(!is_truthy(&falsy), "{falsy}");
        }
        for truthy in [
            json!(true),
            json!("false"),
            json!("0"),
            json!(1),
            json!(-0.5),
            json!([0]),
            json!({"a":0}),
        ] {
            assert!(is_truthy(&truthy), "{truthy}");
        }
    }

    #[test]
    fn rule1_error_status_shows_first_200_chars() {
        let body = "é".repeat(250);
        let v = read(500, &body);
        let expected = format!(
            "remote tool callback returned HTTP 500: {}",
            "é".repeat(200)
        );
        assert_eq!(v.output, json!({ "error": expected }));
        assert!(v.is_error);
        assert_eq!(v.error, Some(json!(expected)));
    }

    #[test]
    fn rule2_non_json_and_empty_bodies_are_text() {
        assert_eq!(read(200, "plain words").output, json!("plain words"));
        assert_eq!(read(200, "").output, json!(""));
        assert!(!read(200, "").is_error);
    }

    #[test]
    fn rule3_non_object_json_is_the_value() {
        assert_eq!(read(200, "[1,2]").output, json!([1, 2]));
        assert_eq!(read(200, "42").output, json!(42));
        assert_eq!(read(200, "null").output, json!(null));
        assert_eq!(read(307, "\"moved\"").output, json!("moved"));
    }

    #[test]
    fn rule4_plain_object_is_whole_output() {
        let v = read(200, r#"{"temp_c":22,"error":"ignored"}"#);
        assert_eq!(v.output, json!({"temp_c":22,"error":"ignored"}));
        assert!(!v.is_error);
        assert_eq!(v.error, None);
    }

    #[test]
    fn rule5_envelopes() {
        let v = read(
            200,
            r#"{"output":{"a":1},"is_error":false,"error":"hidden"}"#,
        );
        assert_eq!(
            (v.output, v.is_error, v.error),
            (json!({"a":1}), false, None)
        );

        let v = read(
            200,
            r#"{"output":null,"is_error":"false","error":"city not found"}"#,
        );
        assert_eq!(
            (v.output, v.is_error, v.error),
            (json!(null), true, Some(json!("city not found")))
        );

        let v = read(200, r#"{"is_error":0,"x":1,"images":[]}"#);
        assert_eq!((v.output, v.is_error), (json!({"is_error":0,"x":1}), false));

        let v = read(200, r#"{"is_error":true}"#);
        assert_eq!((v.is_error, v.error), (true, Some(json!(null))));
    }

    #[test]
    fn rule5_images_are_checked_and_capped() {
        let img = json!({"data_b64":"aGk=","mime":"image/png","vision_prompt":"a cat"});
        let body = json!({"output":"ok","images":[img, {"data_b64":"","mime":"image/png"}, img, {"data_b64":"aGk=","mime":"text/plain"}, img]});
        let v = read_http_answer(200, body.to_string().as_bytes());
        assert_eq!(v.images, vec![img.clone(), img.clone()]);
        assert_eq!(v.warnings.len(), 3, "{:?}", v.warnings);
        assert!(v.warnings[0].starts_with("images[1] dropped"));
        assert!(v.warnings[2].contains("at most 2"));

        let v = read(200, r#"{"output":1,"images":"x"}"#);
        assert!(v.images.is_empty());
        assert_eq!(v.warnings.len(), 1);
    }

    #[test]
    fn rule6_transport_failure_text() {
        let v = transport_failure("ReadTimeout", "");
        assert_eq!(
            v.output,
            json!({"error":"remote tool callback HTTP failure: ReadTimeout: "})
        );
        assert!(v.is_error);
    }
}
