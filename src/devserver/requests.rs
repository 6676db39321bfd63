//! The three request models of the tool API (register, unregister, clear),
//! validated the way main_server's pydantic models are: field order, lax
//! coercions, defaults, and the `callback_url` validator.
//!
//! Unknown fields are ignored. This module never looks at roles or the
//! registry: a valid request for an unknown role is still valid here.

use serde_json::{Map, Value, json};

use super::callback_url::check_callback_url;
use super::pydantic::{FieldReader, ValidationErrors};

/// Longest tool name main_server accepts.
pub(crate) const NAME_MAX_CHARS: usize = 64;
/// Default per-call timeout, in seconds.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: f64 = 30.0;
/// Upper bound of `timeout_seconds`.
pub(crate) const MAX_TIMEOUT_SECONDS: i64 = 300;

/// The schema a tool gets when it declares none.
pub(crate) fn default_parameters() -> Value {
    json!({"type": "object", "properties": {}})
}

/// `POST /api/tools/register`, validated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RegisterRequest {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub callback_url: String,
    /// `None` for a global registration; the empty string already folded in.
    pub role: Option<String>,
    pub source: String,
    pub timeout_seconds: f64,
}

/// `POST /api/tools/unregister`, validated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UnregisterRequest {
    pub name: String,
    pub role: Option<String>,
}

/// `POST /api/tools/clear`, validated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClearRequest {
    pub source: String,
    pub role: Option<String>,
}

/// main_server treats `role: ""` exactly like `role: null`.
pub(crate) fn fold_role(role: Option<String>) -> Option<String> {
    role.filter(|r| !r.is_empty())
}

impl RegisterRequest {
    pub(crate) fn from_object(obj: &Map<String, Value>) -> Result<Self, ValidationErrors> {
        let mut r = FieldReader::new(obj);
        let name = r.string("name", None, 1, Some(NAME_MAX_CHARS));
        let description = r.string("description", Some(""), 0, None);
        let parameters = r.dict("parameters", default_parameters);
        let callback_url = r.string("callback_url", None, 0, None);
        if let Some(url) = &callback_url
            && let Err(e) = check_callback_url(url)
        {
            r.value_error("callback_url", &e.to_string());
        }
        let role = r.nullable_string("role");
        let source = r.string("source", Some("external"), 0, None);
        let timeout = r.bounded_float(
            "timeout_seconds",
            DEFAULT_TIMEOUT_SECONDS,
            0,
            MAX_TIMEOUT_SECONDS,
        );
        r.finish(|| {
            Some(RegisterRequest {
                name: name?,
                description: description?,
                parameters: parameters?,
                callback_url: callback_url?,
                role: fold_role(role?),
                source: source?,
                timeout_seconds: timeout?,
            })
        })
    }
}

impl UnregisterRequest {
    pub(crate) fn from_object(obj: &Map<String, Value>) -> Result<Self, ValidationErrors> {
        let mut r = FieldReader::new(obj);
        let name = r.string("name", None, 0, None);
        let role = r.nullable_string("role");
        r.finish(|| {
            Some(UnregisterRequest {
                name: name?,
                role: fold_role(role?),
            })
        })
    }
}

impl ClearRequest {
    pub(crate) fn from_object(obj: &Map<String, Value>) -> Result<Self, ValidationErrors> {
        let mut r = FieldReader::new(obj);
        let source = r.string("source", None, 1, None);
        let role = r.nullable_string("role");
        r.finish(|| {
            Some(ClearRequest {
                source: source?,
                role: fold_role(role?),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn register_reports_every_error_in_field_order() {
        let errs = RegisterRequest::from_object(&obj(json!({
            "name": "", "parameters": [], "callback_url": "http://example.com/x", "role": 3, "timeout_seconds": 301
        })))
        .unwrap_err();
        let fields: Vec<_> = errs.0.iter().map(|e| (e.kind, e.loc[1].clone())).collect();
        assert_eq!(
            fields,
            [
                ("string_too_short", json!("name")),
                ("dict_type", json!("parameters")),
                ("value_error", json!("callback_url")),
                ("string_type", json!("role")),
                ("less_than_equal", json!("timeout_seconds")),
            ]
        );
    }

    #[test]
    fn unregister_name_is_required() {
        assert_eq!(
            UnregisterRequest::from_object(&obj(json!({"role": "x"})))
                .unwrap_err()
                .0[0]
                .kind,
            "missing"
        );
        let u = UnregisterRequest::from_object(&obj(json!({"name": "t", "role": "小八"}))).unwrap();
        assert_eq!(u.role.as_deref(), Some("小八"));
    }
}
