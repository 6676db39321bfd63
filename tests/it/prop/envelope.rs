//! Property tests of the answer rules (`contract::envelope`): what the
//! sidecar sends main_server for whatever a handler answered.
//!
//! The rules under test are the contract's (CONTRACT.md, "How main_server
//! reads the answer"): `normalise` is total, an envelope's `is_error` is read
//! by Python truthiness, bytes that are not JSON are text output, and a valid
//! envelope comes back as it went in, down to its bytes.

use neko_sidecar::contract::envelope::normalise;
use neko_sidecar::contract::{model_reads, model_text, read_answer, truthy};
use proptest::prelude::*;
use serde_json::{Map, Value as Json, json};

use crate::support::proptest_config;

/// JSON without floats (whose text form is not this test's subject), keys
/// drawn mostly from the ones the rules look at.
fn arb_json() -> impl Strategy<Value = Json> {
    let key = prop_oneof![
        3 => prop::sample::select(vec!["output", "is_error", "error", "images", "a", "b", "z"])
            .prop_map(str::to_string),
        1 => "[a-z_]{0,6}",
    ];
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        prop::sample::select(vec!["", " ", "false", "0", "x", "東京"]).prop_map(Json::from),
        ".{0,8}".prop_map(Json::String),
    ];
    leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec((key.clone(), inner), 0..4)
                .prop_map(|kv| Json::Object(kv.into_iter().collect())),
        ]
    })
}

/// Python's `bool(x)` for a JSON value, written from Python's rules, not
/// from the code under test.
fn python_bool(v: &Json) -> bool {
    match v {
        Json::Null => false,
        Json::Bool(b) => *b,
        Json::Number(n) => n.as_f64() != Some(0.0),
        Json::String(s) => !s.is_empty(),
        Json::Array(a) => !a.is_empty(),
        Json::Object(o) => !o.is_empty(),
    }
}

/// What main_server makes of the sidecar's answer holds the reason of a
/// failure in the text the model reads.
fn m_check(n: &neko_sidecar::contract::envelope::Envelope) -> Result<(), TestCaseError> {
    let read = read_answer(200, &n.to_vec(), true);
    prop_assert_eq!(read.is_error, n.is_error);
    if n.is_error {
        let reason = n.error.clone().unwrap_or_default();
        let text = read.model_text();
        prop_assert!(
            model_reads(&read.output, &reason)
                // No reason given, and the handler's own output explains
                // the failure: it reaches the model as it is.
                || (reason.contains("see the output") && truthy(&n.output) && match &n.output {
                    // A string is read with JSON's escapes once main_server
                    // wraps it (beside image warnings, say).
                    Json::String(s) => model_reads(&read.output, s),
                    other => text.contains(model_text(other).trim_end_matches('}')),
                }),
            "{} does not hold {}",
            text,
            reason
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn normalise_is_total_and_always_answers_an_envelope(body in prop::collection::vec(any::<u8>(), 0..200)) {
        let n = normalise(&body);
        let v = n.to_json();
        let obj = v.as_object().expect("an object");
        prop_assert_eq!(obj.get("is_error"), Some(&Json::Bool(n.is_error)));
        prop_assert_eq!(obj.contains_key("error"), n.is_error);
    }

    #[test]
    fn any_json_answer_is_total(value in arb_json()) {
        let n = normalise(value.to_string().as_bytes());
        let v = n.to_json();
        prop_assert_eq!(v["is_error"].as_bool(), Some(n.is_error));
        prop_assert_eq!(v.get("error").is_some(), n.is_error);
    }

    #[test]
    fn is_error_passes_through_by_python_truthiness(output in arb_json(), flag in arb_json()) {
        prop_assert_eq!(truthy(&flag), python_bool(&flag));
        let body = json!({"output": output.clone(), "is_error": flag.clone()});
        let n = normalise(body.to_string().as_bytes());
        prop_assert_eq!(n.is_error, python_bool(&flag));
        if !n.is_error {
            prop_assert_eq!(n.output, output);
        }
    }

    #[test]
    fn bytes_that_are_not_json_become_the_text_output(body in prop::collection::vec(any::<u8>(), 1..120)) {
        prop_assume!(serde_json::from_slice::<Json>(&body).is_err());
        prop_assume!(!body.iter().all(u8::is_ascii_whitespace));
        let n = normalise(&body);
        let text = String::from_utf8_lossy(&body);
        prop_assert_eq!(
            n.output,
            Json::String(text.trim_end_matches(['\r', '\n']).to_string())
        );
        prop_assert!(!n.is_error);
    }

    #[test]
    fn a_valid_envelope_round_trips_to_the_byte(
        output in arb_json(),
        failure in prop::option::of("[A-Za-z][A-Za-z ]{0,20}"),
        images in prop::option::of(arb_json()),
    ) {
        // Built in the order the sidecar writes its own answers, a failure
        // with its reason in `output` as the recommended envelope has it.
        let mut m = Map::new();
        match &failure {
            Some(e) => m.insert("output".into(), json!({"error": e, "detail": output})),
            None => m.insert("output".into(), output),
        };
        m.insert("is_error".into(), Json::Bool(failure.is_some()));
        if let Some(e) = failure {
            m.insert("error".into(), Json::String(e));
        }
        if let Some(images) = images {
            m.insert("images".into(), images);
        }
        let sent = Json::Object(m).to_string();
        let n = normalise(sent.as_bytes());
        prop_assert_eq!(n.to_json().to_string(), sent);
    }

    #[test]
    fn the_reason_of_a_failure_always_reaches_the_model(body in arb_json(), flag in arb_json(), error in prop::option::of(arb_json())) {
        // Whatever the handler answered, main_server's reading of what the
        // sidecar sends on has the failure's reason in the model's text.
        let mut m = Map::new();
        if let Json::Object(o) = body { m.extend(o); } else { m.insert("output".into(), body); }
        m.insert("is_error".into(), flag);
        if let Some(e) = error { m.insert("error".into(), e); }
        let n = normalise(Json::Object(m).to_string().as_bytes());
        m_check(&n)?;
    }

    #[test]
    fn a_success_output_reaches_the_model_as_the_handler_wrote_it(output in arb_json(), error in prop::option::of(arb_json())) {
        let mut m = Map::new();
        m.insert("output".into(), output.clone());
        m.insert("is_error".into(), Json::Bool(false));
        if let Some(e) = error { m.insert("error".into(), e); }
        let n = normalise(Json::Object(m).to_string().as_bytes());
        let read = read_answer(200, &n.to_vec(), true);
        prop_assert_eq!(read.output, output);
        prop_assert!(!read.is_error);
    }

    #[test]
    fn an_envelope_without_output_keeps_the_rest_in_its_order(
        rest in prop::collection::vec(("[a-z]{1,4}", arb_json()), 1..6),
        flag in any::<bool>(),
        lead in any::<bool>(),
    ) {
        // `is_error` first or last: the rest keeps the handler's order either way.
        let rest: Map<String, Json> = rest
            .into_iter()
            .filter(|(k, _)| !matches!(k.as_str(), "output" | "error"))
            .collect();
        prop_assume!(!rest.is_empty());
        let mut m = Map::new();
        if lead {
            m.insert("is_error".into(), Json::Bool(flag));
        }
        m.extend(rest.clone());
        if !lead {
            m.insert("is_error".into(), Json::Bool(flag));
        }
        let n = normalise(Json::Object(m).to_string().as_bytes());
        prop_assert_eq!(n.output.to_string(), Json::Object(rest).to_string());
    }
}
