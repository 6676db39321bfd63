//! What arrives: reading the callback body main_server POSTs, and checking a
//! call's arguments against the tool's schema before any handler runs.
//!
//! Pure functions over JSON; the answers they produce are meant for the
//! model, so each says what was wrong and how to fix it. Nothing here runs a
//! handler or does I/O.

use serde_json::{Map, Value as Json, json};

use super::stats::Outcome;
use crate::contract::envelope::Envelope;
use crate::manifest::ToolSpec;

/// At most this many schema problems are listed in one answer.
const MAX_PROBLEMS: usize = 10;
/// How much of unparseable argument text is quoted back.
const RAW_QUOTE_CHARS: usize = 120;

/// The fields of a callback body the sidecar reads. The body itself is
/// forwarded to handlers untouched; this is only its reading.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackRequest {
    pub name: String,
    pub arguments: Json,
    /// Empty when main_server sent none.
    pub call_id: String,
}

/// The longest `call_id` taken: model providers' ids are a few dozen
/// characters (`call_…`, `toolu_…`), main_server's own fallback shorter.
pub const MAX_CALL_ID_BYTES: usize = 256;

/// Reads a callback body: an object with a string `name` and `arguments`,
/// plus optional string `call_id` and `raw_arguments`. `tool` is the name in
/// the URL, which `name` must match. Each failure says what is wrong.
/// Failures come boxed: an envelope is large and this is the cold path.
pub fn parse_request(body: &[u8], tool: &str) -> Result<CallbackRequest, Box<Envelope>> {
    let bad = |why: String| {
        Box::new(Envelope::failure(
            Outcome::BadBody.code(),
            format!(
                "the sidecar could not read this call: {why}; expected a JSON object {{\"name\", \"arguments\", \"call_id\", \"raw_arguments\"}} as main_server sends"
            ),
        ))
    };
    let value: Json =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON ({e})")))?;
    let Json::Object(mut obj) = value else {
        return Err(bad("the body is not a JSON object".into()));
    };
    let name = match obj.remove("name") {
        Some(Json::String(s)) => s,
        Some(_) => return Err(bad("`name` is not a string".into())),
        None => return Err(bad("`name` is missing".into())),
    };
    if name != tool {
        // The name is the caller's: only its start is quoted.
        let shown: String = name.chars().take(64).collect();
        return Err(bad(format!(
            "the call names tool `{shown}` but arrived at the URL of tool `{tool}`"
        )));
    }
    let Some(arguments) = obj.remove("arguments") else {
        return Err(bad("`arguments` is missing".into()));
    };
    let call_id = match obj.remove("call_id") {
        None | Some(Json::Null) => String::new(),
        Some(Json::String(s)) if s.len() <= MAX_CALL_ID_BYTES => s,
        // It goes into every log line of the call and an exec handler's
        // environment (`NEKO_CALL_ID`), where a megabyte fails the spawn.
        Some(Json::String(s)) => {
            return Err(bad(format!(
                "`call_id` is {} bytes long; the sidecar accepts at most {MAX_CALL_ID_BYTES} (main_server's are a few dozen)",
                s.len()
            )));
        }
        Some(_) => return Err(bad("`call_id` is not a string".into())),
    };
    match obj.get("raw_arguments") {
        None | Some(Json::Null) | Some(Json::String(_)) => {}
        Some(_) => return Err(bad("`raw_arguments` is not a string".into())),
    }
    Ok(CallbackRequest {
        name,
        arguments,
        call_id,
    })
}

/// Checks `arguments` for a tool whose `validate_arguments` is on. `Ok` lets
/// the handler run; `Err` is the answer, and the handler is not called.
pub fn check_arguments(spec: &ToolSpec, arguments: &Json) -> Result<(), Box<Envelope>> {
    if let Some(text) = unparsed_text(arguments) {
        return Err(Box::new(Envelope::failure(
            Outcome::InvalidArguments.code(),
            format!(
                "the arguments were not valid JSON, so `{}` was not run; they began: {}. Call the tool again with a JSON object{}",
                spec.name,
                quote_start(text),
                expected_properties(spec)
            ),
        )));
    }
    // The common case first: `is_valid` stops early and builds no errors.
    if spec.validator.is_valid(arguments) {
        return Ok(());
    }
    let problems: Vec<(String, String)> = spec
        .validator
        .iter_errors(arguments)
        .map(|e| (e.instance_path().as_str().to_string(), e.to_string()))
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = problems
        .iter()
        .take(MAX_PROBLEMS)
        .map(|(ptr, msg)| {
            let at = if ptr.is_empty() { "(root)" } else { ptr };
            format!("- at {at}: {msg}")
        })
        .collect();
    if problems.len() > MAX_PROBLEMS {
        lines.push(format!("- and {} more", problems.len() - MAX_PROBLEMS));
    }
    let mut message = format!(
        "the arguments do not match the parameters of `{}`, so it was not run:\n{}",
        spec.name,
        lines.join("\n")
    );
    if let Some(x) = non_object_value(arguments) {
        message.push_str(&format!(
            "\nThe arguments were not a JSON object but {x}; send an object{}",
            expected_properties(spec)
        ));
    } else {
        message.push_str("\nFix these and call the tool again.");
    }
    let listed: Vec<Json> = problems
        .iter()
        .take(MAX_PROBLEMS)
        .map(|(p, m)| json!({"pointer": p, "message": m}))
        .collect();
    let mut details = Map::new();
    details.insert("problems".into(), Json::Array(listed));
    Err(Box::new(Envelope::failure_with(
        Outcome::InvalidArguments.code(),
        message,
        details,
    )))
}

/// The text of `{"_raw": TEXT}`, main_server's wrapping of arguments that
/// were not JSON. A `_raw` that holds valid JSON is taken as a real argument.
fn unparsed_text(arguments: &Json) -> Option<&str> {
    let Json::Object(m) = arguments else {
        return None;
    };
    match (m.len(), m.get("_raw")) {
        (1, Some(Json::String(t))) if serde_json::from_str::<Json>(t).is_err() => Some(t),
        _ => None,
    }
}

/// The X of `{"value": X}`, main_server's wrapping of JSON that was not an
/// object, described for a message.
fn non_object_value(arguments: &Json) -> Option<String> {
    let value = match arguments {
        Json::Object(m) => match (m.len(), m.get("value")) {
            (1, Some(v)) if !v.is_object() => v,
            _ => return None,
        },
        other => other,
    };
    Some(format!("the {} {}", kind(value), clip(&value.to_string())))
}

fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

/// ", e.g. with the properties a (required), b", or "" when the schema
/// names none.
fn expected_properties(spec: &ToolSpec) -> String {
    let required: Vec<&str> = spec
        .parameters
        .get("required")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let props: Vec<String> = spec
        .parameters
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| {
            p.keys()
                .map(|k| {
                    if required.contains(&k.as_str()) {
                        format!("`{k}` (required)")
                    } else {
                        format!("`{k}`")
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if props.is_empty() {
        ".".to_string()
    } else {
        format!(" with the properties {}.", props.join(", "))
    }
}

fn quote_start(text: &str) -> String {
    let start: String = text.chars().take(RAW_QUOTE_CHARS).collect();
    let more = if start.len() < text.len() { "…" } else { "" };
    format!("{}{more}", Json::String(start))
}

fn clip(s: &str) -> String {
    let start: String = s.chars().take(RAW_QUOTE_CHARS).collect();
    if start.len() < s.len() {
        format!("{start}…")
    } else {
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{LoadContext, parse_manifest};
    use std::path::Path;

    fn spec(params: &str) -> ToolSpec {
        let text = format!(
            "[[tool]]\nname = \"weather\"\ndescription = \"w\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/w\" }}\nparameters = {params}\n"
        );
        let f = parse_manifest(Path::new("/t/a.toml"), &text, &LoadContext::default());
        assert!(!f.has_errors(), "{:?}", f.diagnostics);
        f.tools.into_iter().next().unwrap()
    }

    fn weather() -> ToolSpec {
        spec(
            r#"{ type = "object", properties = { city = { type = "string" }, days = { type = "integer", maximum = 7 } }, required = ["city"] }"#,
        )
    }

    #[test]
    fn each_problem_is_listed_with_its_pointer() {
        let e = check_arguments(&weather(), &json!({"city": 5, "days": 9})).unwrap_err();
        let msg = e.error.clone().unwrap();
        assert!(msg.contains("so it was not run"), "{msg}");
        assert!(
            msg.contains("- at /city: 5 is not of type \"string\""),
            "{msg}"
        );
        assert!(
            msg.contains("- at /days: 9 is greater than the maximum of 7"),
            "{msg}"
        );
        let problems = e.output["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 2);
        assert!(problems.iter().any(|p| p["pointer"] == "/city"));
        assert_eq!(e.code(), Some("INVALID_ARGUMENTS"));
    }

    #[test]
    fn a_missing_required_property_points_at_the_root() {
        let e = check_arguments(&weather(), &json!({})).unwrap_err();
        let msg = e.error.unwrap();
        assert!(
            msg.contains("- at (root): \"city\" is a required property"),
            "{msg}"
        );
    }

    #[test]
    fn raw_text_is_quoted_and_named_as_not_json() {
        let e = check_arguments(&weather(), &json!({"_raw": "{city: Tokyo"})).unwrap_err();
        let msg = e.error.unwrap();
        assert!(
            msg.starts_with("the arguments were not valid JSON"),
            "{msg}"
        );
        assert!(msg.contains(r#""{city: Tokyo""#), "{msg}");
        assert!(msg.contains("`city` (required), `days`"), "{msg}");
        let long = "x".repeat(500);
        let msg = check_arguments(&weather(), &json!({ "_raw": long }))
            .unwrap_err()
            .error
            .unwrap();
        assert!(msg.contains(&format!("\"{}\"…", "x".repeat(120))), "{msg}");
    }

    #[test]
    fn a_wrapped_non_object_gets_a_hint() {
        let e = check_arguments(&weather(), &json!({"value": "Tokyo"})).unwrap_err();
        let msg = e.error.unwrap();
        assert!(
            msg.contains("were not a JSON object but the string \"Tokyo\""),
            "{msg}"
        );
        assert!(msg.contains("`city` (required)"), "{msg}");
    }

    #[test]
    fn a_schema_that_wants_value_accepts_it() {
        let s = spec(r#"{ type = "object", properties = { value = { type = "string" } } }"#);
        assert!(check_arguments(&s, &json!({"value": "x"})).is_ok());
    }

    #[test]
    fn the_callback_body_is_read() {
        let body =
            br#"{"name":"weather","arguments":{"city":"x"},"call_id":"c1","raw_arguments":"{}"}"#;
        let r = parse_request(body, "weather").unwrap();
        assert_eq!(r.call_id, "c1");
        assert_eq!(r.arguments, json!({"city": "x"}));
    }

    #[test]
    fn a_body_that_is_not_a_call_says_why() {
        for (body, why) in [
            ("nope", "the body is not JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"arguments":{}}"#, "`name` is missing"),
            (
                r#"{"name":"other","arguments":{}}"#,
                "arrived at the URL of tool `weather`",
            ),
            (r#"{"name":"weather"}"#, "`arguments` is missing"),
            (
                r#"{"name":"weather","arguments":{},"call_id":5}"#,
                "`call_id` is not a string",
            ),
        ] {
            let e = parse_request(body.as_bytes(), "weather").unwrap_err();
            let msg = e.error.clone().unwrap();
            assert!(msg.contains(why), "{body}: {msg}");
            assert_eq!(e.code(), Some("BAD_CALLBACK_BODY"));
        }
    }

    /// Issue 48: a call_id of any length went into every log line of the
    /// call and into `NEKO_CALL_ID`, where 1 MiB failed the spawn (E2BIG).
    #[test]
    fn a_call_id_longer_than_main_servers_is_refused_and_a_long_name_is_not_echoed() {
        let at_limit = "c".repeat(MAX_CALL_ID_BYTES);
        let body = json!({"name": "weather", "arguments": {}, "call_id": at_limit}).to_string();
        assert_eq!(
            parse_request(body.as_bytes(), "weather").unwrap().call_id,
            at_limit
        );
        let long = "c".repeat(MAX_CALL_ID_BYTES + 1);
        let body = json!({"name": "weather", "arguments": {}, "call_id": long}).to_string();
        let e = parse_request(body.as_bytes(), "weather").unwrap_err();
        let msg = e.error.clone().unwrap();
        assert!(
            msg.contains("`call_id` is 257 bytes long; the sidecar accepts at most 256"),
            "{msg}"
        );
        assert_eq!(e.code(), Some("BAD_CALLBACK_BODY"));
        let body = json!({"name": "x".repeat(100_000), "arguments": {}}).to_string();
        let msg = parse_request(body.as_bytes(), "weather")
            .unwrap_err()
            .error
            .clone()
            .unwrap();
        assert!(msg.len() < 500, "{}", msg.len());
    }
}
