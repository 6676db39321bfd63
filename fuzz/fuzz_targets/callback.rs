//! Fuzz target `callback`: both ends of a call through the sidecar.
//!
//! The first input byte picks a mode:
//! - 0: the rest is a callback body as main_server POSTs it: `parse_request`,
//!   then `check_arguments` against a fixed schema;
//! - 1: the rest is a handler's answer: `envelope::normalise`;
//! - 2: the rest drives a structured generator (`arbitrary::Unstructured`)
//!   that builds envelope-like answers and callback bodies from the keys
//!   these rules care about, which raw byte mutation rarely assembles.
//!
//! Whatever the input: nothing panics; every answer serialises to an object
//! with a boolean `is_error`, an `error` exactly when it is true, and at most
//! two images; and the answer means what main_server's rules give the input.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use neko_sidecar::contract::envelope::normalise;
use neko_sidecar::callback::validate::{check_arguments, parse_request};
use neko_sidecar::contract::truthy;
use neko_sidecar::manifest::{LoadContext, ToolSpec, parse_manifest};
use neko_sidecar_fuzz::assert_envelope_shape;
use serde_json::{Map, Value as Json};

const TOOL: &str = "weather";

const MANIFEST: &str = r#"
[[tool]]
name = "weather"
description = "Weather of a city"
handler = { type = "http", url = "http://127.0.0.1:9/weather" }
[tool.parameters]
type = "object"
required = ["city"]
additionalProperties = false
[tool.parameters.properties.city]
type = "string"
minLength = 1
pattern = "^[^0-9]+$"
[tool.parameters.properties.days]
type = "integer"
minimum = 1
maximum = 7
[tool.parameters.properties.units]
enum = ["metric", "imperial"]
[tool.parameters.properties.hours]
type = "array"
items = { type = "number" }
maxItems = 3
"#;

static SPEC: LazyLock<ToolSpec> = LazyLock::new(|| {
    let f = parse_manifest(
        Path::new("/nonexistent/fuzz/weather.toml"),
        MANIFEST,
        &LoadContext::default(),
    );
    assert!(!f.has_errors(), "{:?}", f.diagnostics);
    f.tools.into_iter().next().expect("one tool")
});

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => request(rest),
        1 => answer(rest),
        _ => {
            let mut u = Unstructured::new(rest);
            if let Ok(body) = structured_answer(&mut u) {
                answer(&body);
            }
            if let Ok(body) = structured_request(&mut u) {
                request(&body);
            }
        }
    }
});

/// A callback body: read, then (when readable) its arguments checked.
fn request(body: &[u8]) {
    match parse_request(body, TOOL) {
        Ok(req) => {
            let Ok(Json::Object(obj)) = serde_json::from_slice::<Json>(body) else {
                panic!("a body that is not a JSON object was accepted");
            };
            assert_eq!(obj.get("name"), Some(&Json::String(TOOL.into())));
            assert_eq!(obj.get("arguments"), Some(&req.arguments));
            arguments(&req.arguments);
        }
        Err(e) => {
            assert_eq!(e.code(), Some("BAD_CALLBACK_BODY"));
            assert!(e.is_error);
            assert_envelope_shape(&e);
        }
    }
}

fn arguments(args: &Json) {
    let spec = &*SPEC;
    let valid = spec.validator.is_valid(args);
    match check_arguments(spec, args) {
        Ok(()) => assert!(valid, "invalid arguments passed: {args}"),
        Err(e) => {
            assert_eq!(e.code(), Some("INVALID_ARGUMENTS"), "{:?}", e);
            assert_envelope_shape(&e);
            match e.output.get("problems") {
                Some(p) => {
                    assert!(!valid, "valid arguments refused: {args}");
                    let n = p.as_array().map_or(0, Vec::len);
                    assert!((1..=10).contains(&n), "{p}");
                }
                None => {
                    // No problem list: refused as unparsed `{"_raw": TEXT}`.
                    let raw = args.as_object().and_then(|m| m.get("_raw"));
                    assert!(raw.is_some_and(Json::is_string), "{args}");
                }
            }
        }
    }
}

/// A handler's answer: normalised, and compared with main_server's rules
/// applied to the same parse of the same bytes.
fn answer(body: &[u8]) {
    let env = &normalise(body);
    assert_envelope_shape(env);
    if body.iter().all(u8::is_ascii_whitespace) {
        assert_eq!(env.output, Json::String(String::new()));
        assert!(!env.is_error);
        return;
    }
    let value = match serde_json::from_slice::<Json>(body) {
        Err(_) => {
            assert!(env.output.is_string(), "non-JSON became {}", env.output);
            assert!(!env.is_error && env.images.is_none());
            return;
        }
        Ok(v) => v,
    };
    let obj = match value {
        Json::Object(o) if o.contains_key("output") || o.contains_key("is_error") => o,
        other => {
            assert_eq!(env.output, other);
            assert!(!env.is_error && env.images.is_none());
            return;
        }
    };
    let want_error = obj.get("is_error").is_some_and(truthy);
    assert_eq!(env.is_error, want_error, "is_error of {obj:?}");
    if let (true, Some(Json::String(e))) = (want_error, obj.get("error"))
        && !e.trim().is_empty()
    {
        assert_eq!(env.error.as_deref(), Some(e.as_str()));
    }
    match obj.get("output") {
        Some(o) if !want_error => assert_eq!(&env.output, o),
        // A failure's output may carry the reason as well (checked by
        // `assert_envelope_shape`).
        Some(_) => {}
        None => {
            let rest: Vec<&String> = obj
                .keys()
                .filter(|k| !matches!(k.as_str(), "is_error" | "error" | "images"))
                .collect();
            if want_error {
                // As above: the reason may have been added.
            } else if rest.is_empty() {
                assert_eq!(env.output, Json::Null);
            } else {
                let Json::Object(out) = &env.output else {
                    panic!("the rest of an envelope became {}", env.output);
                };
                let got: Vec<&String> = out.keys().collect();
                assert_eq!(got, rest, "the rest of the envelope, in its order");
                for k in rest {
                    assert_eq!(out.get(k), obj.get(k));
                }
            }
        }
    }
    // `images` is forwarded as the handler gave it: main_server judges.
    assert_eq!(env.images.as_ref(), obj.get("images"));
}

const KEYS: &[&str] = &[
    "output",
    "is_error",
    "error",
    "images",
    "data_b64",
    "mime",
    "vision_prompt",
    "name",
    "arguments",
    "call_id",
    "raw_arguments",
    "_raw",
    "value",
    "city",
    "days",
    "units",
    "hours",
];

const STRINGS: &[&str] = &[
    "",
    " ",
    "false",
    "true",
    "0",
    "weather",
    "Tokyo",
    "東京",
    "metric",
    "image/png",
    "image/",
    "text/plain",
    "iVBORw0K",
    "not base64!",
    "{\"city\":\"x\"}",
    "{city: x",
];

fn key(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(7, 8)? {
        Ok(u.choose(KEYS)?.to_string())
    } else {
        u.arbitrary()
    }
}

fn string(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(3, 4)? {
        Ok(u.choose(STRINGS)?.to_string())
    } else {
        u.arbitrary()
    }
}

/// Any JSON value, at most `depth` levels deep, biased to the values whose
/// truthiness and shape the rules test.
fn value(u: &mut Unstructured<'_>, depth: u32) -> Result<Json> {
    let top = if depth == 0 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Json::Null,
        1 => Json::Bool(u.arbitrary()?),
        2 => Json::from(u.int_in_range(-2i64..=8)?),
        3 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Json::Null, Json::Number),
        4 | 5 => Json::String(string(u)?),
        6 => {
            let n = u.int_in_range(0..=3)?;
            Json::Array((0..n).map(|_| value(u, depth - 1)).collect::<Result<_>>()?)
        }
        _ => Json::Object(object(u, depth - 1)?),
    })
}

fn object(u: &mut Unstructured<'_>, depth: u32) -> Result<Map<String, Json>> {
    let n = u.int_in_range(0..=4)?;
    let mut m = Map::new();
    for _ in 0..n {
        let k = key(u)?;
        let v = if k == "images" {
            images(u)?
        } else {
            value(u, depth)?
        };
        m.insert(k, v);
    }
    Ok(m)
}

fn images(u: &mut Unstructured<'_>) -> Result<Json> {
    if u.ratio(1, 8)? {
        return value(u, 1);
    }
    let n = u.int_in_range(0..=4)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let mut img = Map::new();
        for k in ["data_b64", "mime", "vision_prompt", "extra"] {
            if u.ratio(3, 4)? {
                img.insert(k.to_string(), value(u, 0)?);
            }
        }
        out.push(Json::Object(img));
    }
    Ok(Json::Array(out))
}

fn structured_answer(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut m = object(u, 2)?;
    // Usually an envelope: make sure one of its two marks is there.
    if u.ratio(3, 4)? && !m.contains_key("output") && !m.contains_key("is_error") {
        let k = if u.arbitrary()? { "output" } else { "is_error" };
        m.insert(k.to_string(), value(u, 1)?);
    }
    Ok(serde_json::to_vec(&Json::Object(m)).unwrap_or_default())
}

fn structured_request(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut m = Map::new();
    if u.ratio(7, 8)? {
        let name = if u.ratio(7, 8)? {
            TOOL.to_string()
        } else {
            string(u)?
        };
        m.insert("name".into(), Json::String(name));
    }
    if u.ratio(7, 8)? {
        m.insert("arguments".into(), Json::Object(object(u, 2)?));
    }
    for k in ["call_id", "raw_arguments"] {
        if u.arbitrary()? {
            m.insert(k.into(), value(u, 0)?);
        }
    }
    Ok(serde_json::to_vec(&Json::Object(m)).unwrap_or_default())
}
