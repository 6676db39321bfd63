//! Property tests of the tool fingerprint (`desired::Fingerprint`): it is
//! what tells the engine "changed" from "unchanged" without asking
//! main_server, so key order must never move it and any change of what
//! main_server receives must.

use std::path::PathBuf;
use std::sync::Arc;

use neko_sidecar::desired::{Fingerprint, canonical_json};
use neko_sidecar::manifest::{Handler, HttpHandler, Origin, ToolSpec, schema};
use proptest::prelude::*;
use serde_json::{Map, Value as Json};

use crate::support::proptest_config;

const SOURCE: &str = "plugin:prop";

/// A tool with these registered fields; the validator and handler are fixed
/// (neither is part of the fingerprint).
fn spec(description: &str, parameters: Json, timeout_seconds: f64, role: Option<&str>) -> ToolSpec {
    let validator =
        schema::compile(&serde_json::json!({"type": "object"})).expect("a fixed valid schema");
    ToolSpec {
        name: "tool".into(),
        description: description.into(),
        parameters,
        validator: Arc::new(validator),
        timeout_seconds,
        role: role.map(str::to_string),
        handler: Handler::Http(HttpHandler {
            url: "http://127.0.0.1:9/t".into(),
            unix_socket: None,
        }),
        validate_arguments: true,
        max_concurrency: None,
        origin: Origin {
            file: PathBuf::from("t.toml"),
            line: 1,
            col: 1,
        },
    }
}

/// A JSON Schema-like value: nested objects with arbitrary keys, leaves of
/// every JSON type (floats included: they are sent as they are).
fn arb_schema() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i32>().prop_map(Json::from),
        (-1e6f64..1e6).prop_map(Json::from),
        "[a-z]{0,6}".prop_map(Json::String),
    ];
    let tree = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Json::Array),
            prop::collection::btree_map("[a-z]{1,5}", inner, 0..4)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z]{1,5}", tree, 1..5).prop_map(|m| {
        let mut root: Map<String, Json> = m.into_iter().collect();
        root.insert("type".into(), Json::from("object"));
        Json::Object(root)
    })
}

/// The same value with the keys of every object in another order, chosen
/// by `seed`.
fn reorder(v: &Json, seed: u64) -> Json {
    match v {
        Json::Object(m) => {
            let mut entries: Vec<(&String, &Json)> = m.iter().collect();
            entries.sort_by_key(|(k, _)| {
                k.bytes().fold(seed, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                })
            });
            Json::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), reorder(v, seed.rotate_left(7))))
                    .collect(),
            )
        }
        Json::Array(a) => Json::Array(a.iter().map(|x| reorder(x, seed)).collect()),
        other => other.clone(),
    }
}

/// `v` with one leaf or key changed, or one key added: a different schema.
fn mutate(v: &Json, pick: usize) -> Json {
    let mut out = v.clone();
    let Json::Object(m) = &mut out else {
        unreachable!("schemas here are objects")
    };
    let keys: Vec<String> = m.keys().cloned().collect();
    let key = &keys[pick % keys.len()];
    match pick % 3 {
        0 => {
            m.insert(format!("{key}_changed"), Json::Null);
        }
        1 => {
            let old = m[key].clone();
            m.insert(key.clone(), serde_json::json!([old]));
        }
        _ => {
            let value = m.remove(key).unwrap_or(Json::Null);
            m.insert(format!("{key}x"), value);
        }
    }
    out
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn key_order_never_changes_the_fingerprint(params in arb_schema(), seed in any::<u64>()) {
        let shuffled = reorder(&params, seed);
        prop_assert_eq!(canonical_json(&params), canonical_json(&shuffled));
        let a = Fingerprint::of(&spec("d", params, 30.0, None), SOURCE);
        let b = Fingerprint::of(&spec("d", shuffled, 30.0, None), SOURCE);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn a_change_of_the_description_changes_it(a in ".{1,30}", b in ".{1,30}") {
        prop_assume!(a != b);
        let p = serde_json::json!({"type": "object"});
        prop_assert_ne!(
            Fingerprint::of(&spec(&a, p.clone(), 30.0, None), SOURCE),
            Fingerprint::of(&spec(&b, p, 30.0, None), SOURCE)
        );
    }

    #[test]
    fn a_change_of_the_parameters_changes_it(params in arb_schema(), pick in any::<usize>()) {
        let changed = mutate(&params, pick);
        prop_assert_ne!(
            Fingerprint::of(&spec("d", params, 30.0, None), SOURCE),
            Fingerprint::of(&spec("d", changed, 30.0, None), SOURCE)
        );
    }

    #[test]
    fn a_change_of_the_timeout_changes_it(a in 0.001f64..=300.0, b in 0.001f64..=300.0) {
        prop_assume!(a != b);
        let p = serde_json::json!({"type": "object"});
        prop_assert_ne!(
            Fingerprint::of(&spec("d", p.clone(), a, None), SOURCE),
            Fingerprint::of(&spec("d", p, b, None), SOURCE)
        );
    }

    #[test]
    fn a_change_of_the_role_changes_it(a in prop::option::of("[A-Za-z]{1,8}"), b in prop::option::of("[A-Za-z]{1,8}")) {
        prop_assume!(a != b);
        let p = serde_json::json!({"type": "object"});
        prop_assert_ne!(
            Fingerprint::of(&spec("d", p.clone(), 30.0, a.as_deref()), SOURCE),
            Fingerprint::of(&spec("d", p, 30.0, b.as_deref()), SOURCE)
        );
    }
}
