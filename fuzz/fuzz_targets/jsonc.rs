//! Fuzz target `jsonc`: arbitrary bytes as an imported MCP server list
//! (Claude Desktop, Cursor, VS Code), read by our JSON-with-comments reader.
//!
//! `parse_jsonc` must never panic; whatever it reads, every value's span is
//! inside the text, on character boundaries, nested in its parent's, and is
//! exactly that value's text (a string's span decodes to the string); an
//! error's place is a character boundary inside the text, so its line and
//! column are right (a bad escape's, its backslash). And it reads JSON as JSON does: a text serde_json
//! accepts is read to the same value (or refused only for a key given twice,
//! which serde_json lets the last one win, or for nesting past our bound),
//! and serde_json's own writing of a value we read reads back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use neko_sidecar::manifest::{JsonNode, JsonValue, parse_jsonc};
use serde_json::Value as Json;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_jsonc(&text) {
        Ok(node) => {
            assert_spans(&text, &node, 0..text.len());
            if let Ok(json) = serde_json::from_str::<Json>(&text) {
                assert_same(&node, &json);
            }
            // What we read, written by serde_json, reads back the same.
            let json = to_json(&node);
            let written = serde_json::to_string_pretty(&json).expect("a read value serialises");
            let again = parse_jsonc(&written)
                .unwrap_or_else(|e| panic!("{written:?} refused at {}: {}", e.at, e.message));
            assert_same(&again, &json);
        }
        Err(e) => {
            assert!(
                e.at <= text.len() && text.is_char_boundary(e.at),
                "error place {} is not a character boundary of the text: {}",
                e.at,
                e.message
            );
            assert!(!e.message.is_empty());
            // A bad escape is placed at its backslash (or a raw control
            // character), never where serde_json's byte column fell.
            if e.message.starts_with("a bad escape") {
                let c = text.as_bytes()[e.at];
                assert!(
                    c == b'\\' || c == b'"' || c < 0x20,
                    "bad escape placed at {:?}: {}",
                    c as char,
                    e.message
                );
            }
            if serde_json::from_str::<Json>(&text).is_ok() {
                assert!(
                    e.message.contains("appears twice") || e.message.contains("too deep"),
                    "strict JSON refused at {}: {}",
                    e.at,
                    e.message
                );
            }
        }
    }
});

/// Every span inside `within` and on character boundaries; children in
/// order inside their parent; each value's text is the value.
fn assert_spans(text: &str, n: &JsonNode, within: std::ops::Range<usize>) {
    let sp = n.span.clone();
    assert!(
        within.start <= sp.start && sp.start <= sp.end && sp.end <= within.end,
        "span {sp:?} outside {within:?}"
    );
    assert!(text.is_char_boundary(sp.start) && text.is_char_boundary(sp.end));
    let lexeme = &text[sp.clone()];
    match &n.value {
        JsonValue::Null => assert_eq!(lexeme, "null"),
        JsonValue::Bool(b) => assert_eq!(lexeme, if *b { "true" } else { "false" }),
        JsonValue::Number(x) => {
            let parsed: serde_json::Number = serde_json::from_str(lexeme)
                .unwrap_or_else(|e| panic!("number span {lexeme:?}: {e}"));
            assert_eq!(parsed.as_f64().map(f64::to_bits), Some(x.to_bits()), "{lexeme}");
        }
        JsonValue::String(s) => assert_string(lexeme, s),
        JsonValue::Array(items) => {
            assert!(lexeme.starts_with('[') && lexeme.ends_with(']'), "{lexeme:?}");
            let mut at = sp.start + 1;
            for item in items {
                assert_spans(text, item, at..sp.end - 1);
                at = item.span.end;
            }
        }
        JsonValue::Object(entries) => {
            assert!(lexeme.starts_with('{') && lexeme.ends_with('}'), "{lexeme:?}");
            let mut at = sp.start + 1;
            for (key, ksp, value) in entries {
                assert!(at <= ksp.start && ksp.end <= value.span.start, "{ksp:?}");
                assert!(text.is_char_boundary(ksp.start) && text.is_char_boundary(ksp.end));
                assert_string(&text[ksp.clone()], key);
                assert_spans(text, value, ksp.end..sp.end - 1);
                at = value.span.end;
            }
        }
    }
}

fn assert_string(lexeme: &str, s: &str) {
    let decoded: String = serde_json::from_str(lexeme)
        .unwrap_or_else(|e| panic!("string span {lexeme:?}: {e}"));
    assert_eq!(decoded, s, "{lexeme}");
}

/// Our value equals serde_json's, object keys in file order.
fn assert_same(n: &JsonNode, j: &Json) {
    match (&n.value, j) {
        (JsonValue::Null, Json::Null) => {}
        (JsonValue::Bool(a), Json::Bool(b)) => assert_eq!(a, b),
        (JsonValue::Number(a), Json::Number(b)) => {
            assert_eq!(Some(a.to_bits()), b.as_f64().map(f64::to_bits), "{a} against {b}")
        }
        (JsonValue::String(a), Json::String(b)) => assert_eq!(a, b),
        (JsonValue::Array(a), Json::Array(b)) => {
            assert_eq!(a.len(), b.len());
            a.iter().zip(b).for_each(|(x, y)| assert_same(x, y));
        }
        (JsonValue::Object(a), Json::Object(b)) => {
            assert_eq!(a.len(), b.len(), "{a:?} against {b:?}");
            for ((k, _, v), (bk, bv)) in a.iter().zip(b) {
                assert_eq!(k, bk);
                assert_same(v, bv);
            }
        }
        (a, b) => panic!("{a:?} read where serde_json reads {b}"),
    }
}

/// Our value as serde_json's (a number that is not finite cannot be).
fn to_json(n: &JsonNode) -> Json {
    match &n.value {
        JsonValue::Null => Json::Null,
        JsonValue::Bool(b) => Json::Bool(*b),
        JsonValue::Number(x) => serde_json::Number::from_f64(*x).map_or(Json::Null, Json::Number),
        JsonValue::String(s) => Json::String(s.clone()),
        JsonValue::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        JsonValue::Object(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, _, v)| (k.clone(), to_json(v)))
                .collect(),
        ),
    }
}
