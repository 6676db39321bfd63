//! Checks shared by the fuzz targets: the invariants every diagnostic and
//! every callback answer must keep, whatever the input. Each check panics
//! with the offending value, which libFuzzer reports as a crash.
//!
//! Nothing here generates input; the targets in `fuzz_targets/` do.

use std::path::Path;

use neko_sidecar::contract::envelope::Envelope;
use neko_sidecar::contract::{model_reads, read_answer};
use neko_sidecar::diag::{Diagnostic, Position};
use serde_json::Value as Json;

/// Every diagnostic about `path` points inside `text`: a line that exists
/// and a column at most one past that line's last character (columns count
/// characters, 1-based). Diagnostics of other files (schema files named by
/// a manifest) are not about `text` and are skipped.
pub fn assert_positions_within(path: &Path, text: &str, diags: &[Diagnostic]) {
    let lines: Vec<&str> = text.split('\n').collect();
    for d in diags.iter().filter(|d| d.path == path) {
        let Some(Position { line, col }) = d.position else {
            continue;
        };
        assert!(
            (1..=lines.len()).contains(&line),
            "line {line} outside a text of {} lines: {d}",
            lines.len()
        );
        let width = lines[line - 1].chars().count();
        assert!(
            (1..=width + 1).contains(&col),
            "column {col} outside line {line} of {width} characters: {d}"
        );
    }
}

/// Diagnostics of one file come in reading order (those without a place
/// first, as a stable sort on `Option<Position>` puts them).
pub fn assert_reading_order(path: &Path, diags: &[Diagnostic]) {
    let places: Vec<Option<Position>> = diags
        .iter()
        .filter(|d| d.path == path)
        .map(|d| d.position)
        .collect();
    assert!(
        places.windows(2).all(|w| w[0] <= w[1]),
        "diagnostics out of reading order: {diags:#?}"
    );
}

/// The shape main_server relies on: an object with a real boolean
/// `is_error`, an `error` string exactly when it is true, and, on failure,
/// that reason in the text main_server shows the model. Checked on the
/// serialised body, as sent.
pub fn assert_envelope_shape(env: &Envelope) {
    let json = env.to_json();
    let text = serde_json::to_string(&json).expect("an envelope always serialises");
    let back: Json = serde_json::from_str(&text).expect("the serialised envelope is JSON");
    let Json::Object(obj) = back else {
        panic!("the answer is not an object: {text}");
    };
    let Some(Json::Bool(is_error)) = obj.get("is_error") else {
        panic!("`is_error` is not a boolean: {text}");
    };
    assert_eq!(*is_error, env.is_error, "{text}");
    assert!(obj.contains_key("output"), "no `output`: {text}");
    match obj.get("error") {
        None => assert!(!is_error, "a failure without `error`: {text}"),
        Some(Json::String(e)) => {
            assert!(is_error, "`error` on a success: {text}");
            assert!(!e.trim().is_empty(), "an empty `error`: {text}");
        }
        Some(other) => panic!("`error` is not a string but {other}: {text}"),
    }
    assert_eq!(obj.get("images"), env.images.as_ref(), "{text}");
    let read = read_answer(200, text.as_bytes(), true);
    assert_eq!(read.is_error, env.is_error, "{text}");
    if let Some(e) = env
        .error
        .as_deref()
        .filter(|e| !e.contains("see the output"))
    {
        assert!(
            model_reads(&read.output, e),
            "the model does not read {e:?}: {text}"
        );
    }
}
