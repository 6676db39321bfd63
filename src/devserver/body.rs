//! How FastAPI turns request bytes into the value a body model validates:
//! the content-type decision, the `json_invalid` error with its character
//! position, and the body-level errors (`missing`, `model_attributes_type`).
//!
//! Pure: bytes and a header in, a JSON object or a validation error out. It
//! never knows which model is being read.

use serde_json::{Map, Value, json};

use super::pydantic::{ErrorItem, ValidationErrors};

/// Decodes a request body for a JSON body model, returning the object whose
/// fields the model reads.
pub(crate) fn decode_object(
    content_type: Option<&str>,
    bytes: &[u8],
) -> Result<Map<String, Value>, ValidationErrors> {
    let value = decode(content_type, bytes)?;
    match value {
        // An empty body, or a JSON `null`, is "no body" to FastAPI.
        None | Some(Value::Null) => Err(ValidationErrors(vec![ErrorItem::at_body(
            "missing",
            "Field required",
            Value::Null,
        )])),
        Some(Value::Object(map)) => Ok(map),
        // FastAPI validates with from_attributes=True, hence this error type.
        Some(other) => Err(ValidationErrors(vec![ErrorItem::at_body(
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
            other,
        )])),
    }
}

/// FastAPI's body decoding: bytes are parsed as JSON when there is no
/// content-type or it is `application/json` / `application/*+json`;
/// otherwise the raw bytes (shown as text) are what the model sees.
fn decode(content_type: Option<&str>, bytes: &[u8]) -> Result<Option<Value>, ValidationErrors> {
    if bytes.is_empty() {
        return Ok(None);
    }
    if !content_type.is_none_or(is_json_content_type) {
        return Ok(Some(Value::String(
            String::from_utf8_lossy(bytes).into_owned(),
        )));
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| ValidationErrors(vec![json_invalid(bytes, &e)]))
}

/// Mirrors Python's `email.message` reading of a content-type header.
pub(crate) fn is_json_content_type(header: &str) -> bool {
    let media = header
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match media.split_once('/') {
        Some(("application", sub)) => sub == "json" || sub.ends_with("+json"),
        _ => false,
    }
}

fn json_invalid(bytes: &[u8], err: &serde_json::Error) -> ErrorItem {
    let pos = char_position(bytes, err.line(), err.column());
    ErrorItem {
        kind: "json_invalid",
        loc: vec![json!("body"), json!(pos)],
        msg: "JSON decode error".to_owned(),
        input: json!({}),
        ctx: Some(json!({ "error": python_json_message(err) })),
    }
}

/// Python's `JSONDecodeError.pos`: a 0-based character offset. serde_json
/// reports a 1-based line and a 1-based byte column within it.
fn char_position(bytes: &[u8], line: usize, column: usize) -> usize {
    let text = String::from_utf8_lossy(bytes);
    let mut line_start_byte = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            break;
        }
        line_start_byte += l.len();
    }
    let target = (line_start_byte + column.saturating_sub(1)).min(text.len());
    // Round down to a character boundary, then count characters.
    let boundary = (0..=target)
        .rev()
        .find(|&b| text.is_char_boundary(b))
        .unwrap_or(0);
    text[..boundary].chars().count()
}

/// The closest Python `json` message for a serde_json error.
fn python_json_message(err: &serde_json::Error) -> &'static str {
    let text = err.to_string();
    if text.starts_with("trailing characters") {
        "Extra data"
    } else if text.starts_with("key must be a string") {
        "Expecting property name enclosed in double quotes"
    } else if text.starts_with("expected `:`") {
        "Expecting ':' delimiter"
    } else if text.starts_with("expected `,`") {
        "Expecting ',' delimiter"
    } else if text.starts_with("EOF while parsing a string") {
        "Unterminated string starting at"
    } else if text.starts_with("control character") {
        "Invalid control character at"
    } else {
        "Expecting value"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_objects_decode_with_or_without_content_type() {
        let m = decode_object(Some("application/json; charset=utf-8"), br#"{"a":1}"#).unwrap();
        assert_eq!(m.get("a"), Some(&json!(1)));
        assert!(decode_object(None, br#"{"a":1}"#).is_ok());
        assert!(decode_object(Some("application/vnd.neko+json"), br#"{}"#).is_ok());
    }

    #[test]
    fn non_json_content_type_is_not_a_dictionary() {
        let errs = decode_object(Some("text/plain"), br#"{"a":1}"#).unwrap_err();
        assert_eq!(
            errs.to_body(),
            json!({"detail":[{"type":"model_attributes_type","loc":["body"],
                "msg":"Input should be a valid dictionary or object to extract fields from","input":"{\"a\":1}"}]})
        );
    }

    #[test]
    fn empty_or_null_body_is_missing() {
        for (ct, b) in [
            (Some("application/json"), &b""[..]),
            (Some("application/json"), b"null"),
            (Some("text/plain"), b""),
        ] {
            let errs = decode_object(ct, b).unwrap_err();
            assert_eq!(
                errs.to_body(),
                json!({"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]})
            );
        }
    }

    #[test]
    fn arrays_are_not_a_dictionary() {
        let errs = decode_object(None, b"[1,2]").unwrap_err();
        assert_eq!(errs.0[0].kind, "model_attributes_type");
        assert_eq!(errs.0[0].input, json!([1, 2]));
    }

    #[test]
    fn broken_json_reports_python_position() {
        let errs = decode_object(Some("application/json"), br#"{"name": }"#).unwrap_err();
        assert_eq!(
            errs.to_body(),
            json!({"detail":[{"type":"json_invalid","loc":["body",9],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting value"}}]})
        );
        let errs = decode_object(Some("application/json"), "{\"名\":1}x".as_bytes()).unwrap_err();
        assert_eq!(errs.0[0].loc, vec![json!("body"), json!(7)]);
        assert_eq!(errs.0[0].ctx, Some(json!({"error": "Extra data"})));
    }
}
