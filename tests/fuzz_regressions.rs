//! One regression test per bug that fuzzing or a property test found, each
//! named after the bug and pinning the exact input that showed it. The fuzz
//! targets are in `fuzz/` (see `fuzz/README.md`); these run in the normal
//! suite so a fixed bug stays fixed without a fuzzer.

use neko_sidecar::callback::envelope::normalise;

/// Found by the `callback` fuzz target: an envelope without `output` keeps
/// its other keys as the output, but `normalise` removed `is_error` with
/// serde_json's order-swapping `remove`, so `{"is_error": false, "temp": 3,
/// "city": "x", "unit": "C"}` reached the model as `{"unit", "temp", "city"}`.
#[test]
fn envelope_rest_keeps_the_handlers_key_order() {
    let body = br#"{"is_error": false, "temp": 3, "city": "x", "unit": "C", "images": []}"#;
    let out = normalise(body).envelope.to_json();
    assert_eq!(
        out.to_string(),
        r#"{"output":{"temp":3,"city":"x","unit":"C"},"is_error":false}"#
    );
    let body = br#"{"a": 1, "is_error": true, "b": 2, "error": "no", "c": 3}"#;
    let out = normalise(body).envelope.to_json();
    assert_eq!(
        out.to_string(),
        r#"{"output":{"a":1,"b":2,"c":3},"is_error":true,"error":"no"}"#
    );
}
