//! FastAPI/pydantic-v2-style request validation: the error items of a 422
//! body and a reader that pulls typed fields out of a JSON object the way a
//! pydantic model with lax defaults would.
//!
//! Only the handful of field kinds the tool API uses are modelled (strings
//! with length bounds, nullable strings, dicts, bounded floats). Every error
//! is collected, in field order, as pydantic does. This module never decides
//! what a request means; `requests.rs` declares the models.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// One entry of a 422 `detail` list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ErrorItem {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub loc: Vec<Value>,
    pub msg: String,
    pub input: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx: Option<Value>,
}

impl ErrorItem {
    /// An error located at `["body", field]`.
    pub(crate) fn at_field(
        kind: &'static str,
        field: &str,
        msg: impl Into<String>,
        input: Value,
    ) -> Self {
        ErrorItem {
            kind,
            loc: vec![json!("body"), json!(field)],
            msg: msg.into(),
            input,
            ctx: None,
        }
    }

    /// An error about the body as a whole (`loc: ["body"]`).
    pub(crate) fn at_body(kind: &'static str, msg: impl Into<String>, input: Value) -> Self {
        ErrorItem {
            kind,
            loc: vec![json!("body")],
            msg: msg.into(),
            input,
            ctx: None,
        }
    }

    pub(crate) fn with_ctx(mut self, ctx: Value) -> Self {
        self.ctx = Some(ctx);
        self
    }
}

/// A failed validation: the list FastAPI puts under `detail`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ValidationErrors(pub Vec<ErrorItem>);

impl ValidationErrors {
    /// The JSON body of the 422 answer.
    pub(crate) fn to_body(&self) -> Value {
        json!({ "detail": self.0 })
    }
}

/// Reads fields out of one JSON object, collecting every error.
pub(crate) struct FieldReader<'a> {
    obj: &'a Map<String, Value>,
    errors: Vec<ErrorItem>,
}

impl<'a> FieldReader<'a> {
    pub(crate) fn new(obj: &'a Map<String, Value>) -> Self {
        FieldReader {
            obj,
            errors: Vec::new(),
        }
    }

    fn missing(&mut self, field: &str) {
        // pydantic reports the whole object as the input of a missing field.
        let whole = Value::Object(self.obj.clone());
        self.errors.push(ErrorItem::at_field(
            "missing",
            field,
            "Field required",
            whole,
        ));
    }

    /// A `str` field with optional length bounds; `default` of `None` means
    /// required.
    pub(crate) fn string(
        &mut self,
        field: &str,
        default: Option<&str>,
        min: usize,
        max: Option<usize>,
    ) -> Option<String> {
        let value = match self.obj.get(field) {
            None => match default {
                Some(d) => return Some(d.to_owned()),
                None => {
                    self.missing(field);
                    return None;
                }
            },
            Some(v) => v,
        };
        let Some(s) = value.as_str() else {
            self.errors.push(ErrorItem::at_field(
                "string_type",
                field,
                "Input should be a valid string",
                value.clone(),
            ));
            return None;
        };
        // pydantic counts characters (code points), not bytes.
        let len = s.chars().count();
        let broken = if len < min {
            Some(("string_too_short", "at least", "min_length", min))
        } else {
            max.filter(|&max| len > max)
                .map(|max| ("string_too_long", "at most", "max_length", max))
        };
        let Some((kind, bound, key, n)) = broken else {
            return Some(s.to_owned());
        };
        let unit = if n == 1 { "character" } else { "characters" };
        self.errors.push(
            ErrorItem::at_field(
                kind,
                field,
                format!("String should have {bound} {n} {unit}"),
                value.clone(),
            )
            .with_ctx(json!({ key: n })),
        );
        None
    }

    /// An `Optional[str] = None` field. The outer `None` means "invalid".
    pub(crate) fn nullable_string(&mut self, field: &str) -> Option<Option<String>> {
        match self.obj.get(field) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s.clone())),
            Some(other) => {
                self.errors.push(ErrorItem::at_field(
                    "string_type",
                    field,
                    "Input should be a valid string",
                    other.clone(),
                ));
                None
            }
        }
    }

    /// A `dict` field with a default.
    pub(crate) fn dict(&mut self, field: &str, default: impl FnOnce() -> Value) -> Option<Value> {
        match self.obj.get(field) {
            None => Some(default()),
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(other) => {
                self.errors.push(ErrorItem::at_field(
                    "dict_type",
                    field,
                    "Input should be a valid dictionary",
                    other.clone(),
                ));
                None
            }
        }
    }

    /// A `float` field with `gt` and `le` bounds, in lax mode: numeric
    /// strings and booleans are coerced as pydantic does.
    pub(crate) fn bounded_float(
        &mut self,
        field: &str,
        default: f64,
        gt: i64,
        le: i64,
    ) -> Option<f64> {
        let Some(value) = self.obj.get(field) else {
            return Some(default);
        };
        let number = match value {
            Value::Number(n) => n.as_f64(),
            Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            Value::String(s) => match s.trim().parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    self.errors.push(ErrorItem::at_field(
                        "float_parsing",
                        field,
                        "Input should be a valid number, unable to parse string as a number",
                        value.clone(),
                    ));
                    return None;
                }
            },
            _ => None,
        };
        let Some(number) = number else {
            self.errors.push(ErrorItem::at_field(
                "float_type",
                field,
                "Input should be a valid number",
                value.clone(),
            ));
            return None;
        };
        // NaN fails the lower bound, as in pydantic.
        if number.is_nan() || number <= gt as f64 {
            self.errors.push(
                ErrorItem::at_field(
                    "greater_than",
                    field,
                    format!("Input should be greater than {gt}"),
                    value.clone(),
                )
                .with_ctx(json!({ "gt": gt })),
            );
            return None;
        }
        if number > le as f64 {
            self.errors.push(
                ErrorItem::at_field(
                    "less_than_equal",
                    field,
                    format!("Input should be less than or equal to {le}"),
                    value.clone(),
                )
                .with_ctx(json!({ "le": le })),
            );
            return None;
        }
        Some(number)
    }

    /// Records a failed `field_validator` (a Python `ValueError`).
    pub(crate) fn value_error(&mut self, field: &str, message: &str) {
        let input = self.obj.get(field).cloned().unwrap_or(Value::Null);
        // FastAPI serialises the ValueError instance in ctx as `{}`.
        self.errors.push(
            ErrorItem::at_field(
                "value_error",
                field,
                format!("Value error, {message}"),
                input,
            )
            .with_ctx(json!({ "error": {} })),
        );
    }

    /// Ends reading: the errors, if there were any, else what `fields`
    /// builds from the fields read (then every one of them is `Some`).
    pub(crate) fn finish<T>(
        self,
        fields: impl FnOnce() -> Option<T>,
    ) -> Result<T, ValidationErrors> {
        if !self.errors.is_empty() {
            return Err(ValidationErrors(self.errors));
        }
        fields().ok_or(ValidationErrors(Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn string_bounds_and_types() {
        let o = obj(json!({"a": "", "b": "x".repeat(65), "c": 5, "d": "ok"}));
        let mut r = FieldReader::new(&o);
        assert_eq!(r.string("a", None, 1, Some(64)), None);
        assert_eq!(r.string("b", None, 1, Some(64)), None);
        assert_eq!(r.string("c", None, 1, Some(64)), None);
        assert_eq!(r.string("d", None, 1, Some(64)), Some("ok".to_owned()));
        assert_eq!(
            r.string("e", Some("external"), 0, None),
            Some("external".to_owned())
        );
        let errs = r.finish(|| Some(())).unwrap_err().0;
        assert_eq!(errs[0].kind, "string_too_short");
        assert_eq!(errs[0].msg, "String should have at least 1 character");
        assert_eq!(errs[0].ctx, Some(json!({"min_length": 1})));
        assert_eq!(errs[1].kind, "string_too_long");
        assert_eq!(errs[1].msg, "String should have at most 64 characters");
        assert_eq!(errs[2].kind, "string_type");
        assert_eq!(errs[2].input, json!(5));
        assert_eq!(errs.len(), 3);
    }

    #[test]
    fn floats_are_lax_and_bounded() {
        let o = obj(
            json!({"a": "12.5", "b": true, "c": 0, "d": 300.5, "e": "soon", "f": null, "g": 300}),
        );
        let mut r = FieldReader::new(&o);
        assert_eq!(r.bounded_float("a", 30.0, 0, 300), Some(12.5));
        assert_eq!(r.bounded_float("b", 30.0, 0, 300), Some(1.0));
        assert_eq!(r.bounded_float("c", 30.0, 0, 300), None);
        assert_eq!(r.bounded_float("d", 30.0, 0, 300), None);
        assert_eq!(r.bounded_float("e", 30.0, 0, 300), None);
        assert_eq!(r.bounded_float("f", 30.0, 0, 300), None);
        assert_eq!(r.bounded_float("g", 30.0, 0, 300), Some(300.0));
        assert_eq!(r.bounded_float("absent", 30.0, 0, 300), Some(30.0));
        let errs = r.finish(|| Some(())).unwrap_err().0;
        let kinds: Vec<_> = errs.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                "greater_than",
                "less_than_equal",
                "float_parsing",
                "float_type"
            ]
        );
        assert_eq!(errs[0].msg, "Input should be greater than 0");
        assert_eq!(errs[0].ctx, Some(json!({"gt": 0})));
        assert_eq!(errs[1].msg, "Input should be less than or equal to 300");
    }

    #[test]
    fn value_error_shape() {
        let o = obj(json!({"callback_url": "http://example.com"}));
        let mut r = FieldReader::new(&o);
        r.value_error("callback_url", "nope");
        let body = r.finish(|| Some(())).unwrap_err().to_body();
        assert_eq!(
            body,
            json!({"detail":[{"type":"value_error","loc":["body","callback_url"],"msg":"Value error, nope","input":"http://example.com","ctx":{"error":{}}}]})
        );
    }
}
