//! JSON Schema checks for tool parameters: meta-validation, the object-root
//! rule, and compilation into the validator used on every call.
//!
//! Problems come back as JSON pointers into the schema so the caller can place
//! them in the file the schema came from. Remote `$ref`s are never fetched
//! (jsonschema is built without its resolvers): a schema must be self-contained.

use serde_json::Value as Json;

/// One problem with a schema, at a JSON pointer into it ("" is the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    pub pointer: String,
    pub message: String,
}

impl SchemaProblem {
    fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// The `$schema` values we can meta-validate, without and with the
/// trailing `#` that many documents carry.
const KNOWN_DRAFTS: &[&str] = &[
    "http://json-schema.org/draft-04/schema",
    "http://json-schema.org/draft-06/schema",
    "http://json-schema.org/draft-07/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
];

const JSON_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string",
];

/// A plain message for the commonest schema mistake, a misspelt `type`:
/// the meta-schema's own error there is an opaque "anyOf" failure.
fn type_keyword_message(pointer: &str, instance: &Json) -> Option<String> {
    let (parent, last) = pointer.rsplit_once('/')?;
    // `/properties/type` is a property named "type", not the keyword.
    if last != "type" || parent.ends_with("/properties") {
        return None;
    }
    let bad: Vec<&Json> = match instance {
        Json::String(_) => vec![instance],
        Json::Array(items) => items
            .iter()
            .filter(|t| !t.as_str().is_some_and(|t| JSON_TYPES.contains(&t)))
            .collect(),
        _ => return None,
    };
    let first = bad.first()?;
    Some(format!(
        "{first} is not a JSON Schema type: allowed types are {}",
        JSON_TYPES.join(", ")
    ))
}

/// Reports every `$ref` that leaves the document: the schema is sent to
/// main_server and the model as it is, and we never fetch anything.
fn remote_refs(v: &Json, pointer: &mut String, out: &mut Vec<SchemaProblem>) {
    match v {
        Json::Object(m) => {
            for (k, child) in m {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
                if k == "$ref" {
                    if let Json::String(r) = child {
                        if !r.starts_with('#') {
                            out.push(SchemaProblem::new(
                                pointer.clone(),
                                format!("`$ref` \"{r}\" points outside the schema, and nothing is fetched: inline what it refers to (under `$defs`) and use \"#/$defs/...\""),
                            ));
                        }
                    }
                } else {
                    remote_refs(child, pointer, out);
                }
                pointer.truncate(len);
            }
        }
        Json::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&i.to_string());
                remote_refs(child, pointer, out);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// The most `pattern` and `patternProperties` regular expressions one
/// schema may hold: each is compiled (a heavy one took 5.5 MB resident
/// before issue 49), so their count is bounded as well as their size.
pub const MAX_PATTERNS: usize = 32;
/// The most one compiled `pattern` may take (its program), and its lazy
/// DFA's cache, in bytes; a pattern past it is refused with the reason.
pub const PATTERN_SIZE_LIMIT: usize = 256 * 1024;

/// How many regular expressions (`pattern` values and
/// `patternProperties` keys) `schema` holds, wherever they are.
fn count_patterns(schema: &Json) -> usize {
    match schema {
        Json::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let own = match (k.as_str(), v) {
                    ("pattern", Json::String(_)) => 1,
                    ("patternProperties", Json::Object(p)) => p.len(),
                    _ => 0,
                };
                own + count_patterns(v)
            })
            .sum(),
        Json::Array(items) => items.iter().map(count_patterns).sum(),
        _ => 0,
    }
}

/// Checks a tool's `parameters` schema and compiles it.
pub fn compile(schema: &Json) -> Result<jsonschema::Validator, Vec<SchemaProblem>> {
    let Json::Object(root) = schema else {
        return Err(vec![SchemaProblem::new(
            "",
            "the parameters schema must be a JSON object",
        )]);
    };
    let patterns = count_patterns(schema);
    if patterns > MAX_PATTERNS {
        return Err(vec![SchemaProblem::new(
            "",
            format!(
                "the schema holds {patterns} regular expressions (`pattern`, `patternProperties`); at most {MAX_PATTERNS} are compiled per tool"
            ),
        )]);
    }
    if let Some(s) = root.get("$schema") {
        let known = s
            .as_str()
            .map(|s| s.trim_end_matches('#'))
            .is_some_and(|s| KNOWN_DRAFTS.contains(&s));
        if !known {
            return Err(vec![SchemaProblem::new(
                "/$schema",
                format!(
                    "unknown `$schema` {s}: use one of the drafts {} (or omit it for 2020-12)",
                    KNOWN_DRAFTS.join(", ")
                ),
            )]);
        }
    }

    let mut problems = Vec::new();
    remote_refs(schema, &mut String::new(), &mut problems);
    match jsonschema::meta::validator_for(schema) {
        Ok(meta) => {
            for e in meta.iter_errors(schema) {
                let pointer = e.instance_path().as_str().to_string();
                let message = type_keyword_message(&pointer, e.instance())
                    .unwrap_or_else(|| format!("not a valid JSON Schema: {e}"));
                problems.push(SchemaProblem::new(pointer, message));
            }
        }
        Err(e) => problems.push(SchemaProblem::new(
            "",
            format!("cannot load the meta-schema: {e}"),
        )),
    }
    match root.get("type") {
        Some(Json::String(t)) if t == "object" => {}
        Some(other) => problems.push(SchemaProblem::new(
            "/type",
            format!("the root `type` is {other}, but must be \"object\": tool arguments are an object of named parameters"),
        )),
        None => problems.push(SchemaProblem::new(
            "",
            "the schema has no root `type`: add type = \"object\" (tool arguments are an object of named parameters)",
        )),
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let patterns = jsonschema::PatternOptions::fancy_regex()
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT);
    jsonschema::options()
        .with_pattern_options(patterns)
        .build(schema)
        .map_err(|e| {
            vec![SchemaProblem::new(
                e.instance_path().as_str(),
                format!("the schema cannot be compiled: {e}"),
            )]
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_an_openai_style_schema() {
        let v = compile(&json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City"}},
            "required": ["city"],
            "additionalProperties": false
        }))
        .unwrap();
        assert!(v.is_valid(&json!({"city": "東京"})));
        assert!(!v.is_valid(&json!({})));
    }

    #[test]
    fn meta_validation_points_at_the_bad_keyword() {
        let err = compile(&json!({"type": "object", "properties": {"n": {"type": "integr"}}}))
            .unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert_eq!(err[0].pointer, "/properties/n/type");
        assert_eq!(
            err[0].message,
            "\"integr\" is not a JSON Schema type: allowed types are array, boolean, integer, null, number, object, string"
        );
        let err =
            compile(&json!({"type": "object", "properties": {"n": {"minimum": "x"}}})).unwrap_err();
        assert_eq!(err[0].pointer, "/properties/n/minimum");
        assert!(
            err[0].message.starts_with("not a valid JSON Schema"),
            "{}",
            err[0].message
        );
        // A property named "type" is not the keyword.
        assert!(
            compile(&json!({"type": "object", "properties": {"type": {"type": "string"}}})).is_ok()
        );
    }

    #[test]
    fn a_heavy_pattern_and_too_many_patterns_are_refused() {
        // Fine alone and in numbers up to the limit.
        let props: serde_json::Map<String, Json> = (0..MAX_PATTERNS)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "pattern": "^[a-z]+$"}),
                )
            })
            .collect();
        assert!(compile(&json!({"type": "object", "properties": props})).is_ok());
        let mut more = props.clone();
        more.insert("x".into(), json!({"type": "string", "pattern": "^x$"}));
        let err = compile(&json!({"type": "object", "properties": more})).unwrap_err();
        assert_eq!(
            err[0].message,
            "the schema holds 33 regular expressions (`pattern`, `patternProperties`); at most 32 are compiled per tool"
        );
        // A pattern whose program is megabytes.
        let heavy = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(\\w{50}){50}[0-9]{1000}$"}}});
        let err = compile(&heavy).unwrap_err();
        assert!(
            err[0].message.starts_with("the schema cannot be compiled"),
            "{err:?}"
        );
    }

    #[test]
    fn root_must_be_an_object_type() {
        let err = compile(&json!({"type": "string"})).unwrap_err();
        assert_eq!(err[0].pointer, "/type");
        assert!(err[0].message.contains("must be \"object\""));
        let err = compile(&json!({"properties": {}})).unwrap_err();
        assert!(err[0].message.contains("no root `type`"));
        let err = compile(&json!([1])).unwrap_err();
        assert!(err[0].message.contains("must be a JSON object"));
    }

    #[test]
    fn unknown_draft_is_an_error_not_a_panic() {
        let err =
            compile(&json!({"$schema": "http://example.com/s", "type": "object"})).unwrap_err();
        assert_eq!(err[0].pointer, "/$schema");
        assert!(
            compile(
                &json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"})
            )
            .is_ok()
        );
    }

    #[test]
    fn remote_refs_are_not_fetched() {
        let err = compile(
            &json!({"type": "object", "properties": {"a": {"$ref": "http://example.com/x.json"}}}),
        )
        .unwrap_err();
        assert_eq!(err[0].pointer, "/properties/a/$ref");
        assert!(
            err[0].message.contains("points outside the schema"),
            "{err:?}"
        );
        // A local reference is fine.
        assert!(compile(&json!({"type": "object", "$defs": {"c": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/c"}}})).is_ok());
    }
}
