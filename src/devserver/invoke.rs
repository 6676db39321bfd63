//! Calling a tool as the model would: builds the callback body, POSTs it to
//! the tool's `callback_url` with main_server's timeouts and no redirects,
//! reads the answer with `reading.rs`, and feeds the outcome to dead-plugin
//! eviction.
//!
//! This is the only module of the stand-in that makes outgoing requests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::eviction::{CallOutcome, EVICTABLE_PREFIX, origin_of};
use super::reading::{ModelView, read_http_answer, transport_failure};
use super::registry::Tool;
use super::requests::fold_role;
use super::state::Shared;

/// main_server's connect timeout for callbacks.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `POST /__dev/invoke`: which tool to call and with what.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct InvokeRequest {
    pub name: String,
    /// Arguments as an object; serialised to become `raw_arguments` when
    /// that is not given.
    #[serde(default)]
    pub arguments: Option<Value>,
    /// The model's argument text, verbatim; wins over `arguments`.
    #[serde(default)]
    pub raw_arguments: Option<String>,
    /// The role whose model calls; `null`/`""` means the first role.
    #[serde(default)]
    pub role: Option<String>,
}

/// What `/__dev/invoke` answers: the call id sent, the role used, and what
/// the model sees (`output`, `is_error`, `error`, `images`, `warnings`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvokeAnswer {
    pub call_id: String,
    pub role: String,
    #[serde(flatten)]
    pub view: ModelView,
}

/// Why a call could not even be attempted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    #[error("unknown role: {0}")]
    UnknownRole(String),
    #[error("no role exists to call a tool from")]
    NoRoles,
    #[error("role {role} has no tool named {name:?}")]
    UnknownTool { role: String, name: String },
}

/// The `arguments` main_server sends for the model's text: the parsed
/// object, `{"_raw": TEXT}` when it is not JSON, `{"value": X}` when it is
/// JSON but not an object.
pub fn parse_arguments(raw: &str) -> Value {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(obj)) => Value::Object(obj),
        Ok(other) => json!({ "value": other }),
        Err(_) => json!({ "_raw": raw }),
    }
}

/// The body POSTed to a callback.
pub fn callback_body(name: &str, raw_arguments: &str, call_id: &str) -> Value {
    json!({
        "name": name,
        "arguments": parse_arguments(raw_arguments),
        "call_id": call_id,
        "raw_arguments": raw_arguments,
    })
}

/// A fresh `call_...` id: 24 hex digits, unique within the process and
/// unpredictable enough for a stand-in.
pub fn new_call_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    format!("call_{:016x}{:08x}", h.finish(), n & 0xffff_ffff)
}

/// Calls a tool the way main_server does and returns what the model sees.
pub async fn invoke(shared: &Shared, req: InvokeRequest) -> Result<InvokeAnswer, InvokeError> {
    let (role, tool) =
        shared.read_world(|w| {
            let role = match fold_role(req.role.clone()) {
                Some(r) => r,
                None => w
                    .registry
                    .role_names()
                    .into_iter()
                    .next()
                    .ok_or(InvokeError::NoRoles)?,
            };
            if w.registry.target_roles(Some(&role)).is_err() {
                return Err(InvokeError::UnknownRole(role));
            }
            let tool = w.registry.find(&role, &req.name).cloned().ok_or_else(|| {
                InvokeError::UnknownTool {
                    role: role.clone(),
                    name: req.name.clone(),
                }
            })?;
            Ok((role, tool))
        })?;
    let raw = match (&req.raw_arguments, &req.arguments) {
        (Some(raw), _) => raw.clone(),
        (None, Some(args)) => args.to_string(),
        (None, None) => "{}".to_owned(),
    };
    let call_id = new_call_id();
    let view = match &tool.callback_url {
        None => builtin_answer(shared, &tool),
        Some(url) => {
            let (view, outcome) =
                call_remote(url, &tool, &callback_body(&tool.name, &raw, &call_id)).await;
            record_outcome(shared, &tool, url, outcome);
            view
        }
    };
    Ok(InvokeAnswer {
        call_id,
        role,
        view,
    })
}

fn builtin_answer(shared: &Shared, tool: &Tool) -> ModelView {
    match shared.builtins.iter().find(|b| b.name == tool.name) {
        Some(b) => ModelView::success(b.answer.clone()),
        None => ModelView::failure(format!(
            "built-in tool {:?} has no stand-in implementation",
            tool.name
        )),
    }
}

async fn call_remote(url: &str, tool: &Tool, body: &Value) -> (ModelView, CallOutcome) {
    post_callback(url, Duration::from_secs_f64(tool.timeout_seconds), body).await
}

/// POSTs a callback body to `url` exactly as main_server does (connect
/// timeout 5 s, `timeout` to read, no redirects, no proxy) and reads the
/// answer with the six reading rules. Also used by `neko-sidecar call`.
pub async fn post_callback(url: &str, timeout: Duration, body: &Value) -> (ModelView, CallOutcome) {
    // One client per call: each tool has its own read timeout, and a dev
    // server does not need connection reuse.
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build();
    let client = match client {
        Ok(c) => c,
        Err(e) => return failure_of(&e),
    };
    let response = match client.post(url).json(body).send().await {
        Ok(r) => r,
        Err(e) => return failure_of(&e),
    };
    let status = response.status().as_u16();
    match response.bytes().await {
        Ok(bytes) => (read_http_answer(status, &bytes), CallOutcome::Completed),
        Err(e) => failure_of(&e),
    }
}

/// Names a reqwest failure the way httpx would name the same failure.
fn failure_of(e: &reqwest::Error) -> (ModelView, CallOutcome) {
    let (kind, message, outcome) = if e.is_connect() && e.is_timeout() {
        (
            "ConnectTimeout",
            String::new(),
            CallOutcome::ConnectionFailure,
        )
    } else if e.is_connect() {
        (
            "ConnectError",
            "All connection attempts failed".to_owned(),
            CallOutcome::ConnectionFailure,
        )
    } else if e.is_timeout() {
        ("ReadTimeout", String::new(), CallOutcome::Inconclusive)
    } else if e.is_builder() {
        (
            "UnsupportedProtocol",
            e.to_string(),
            CallOutcome::Inconclusive,
        )
    } else {
        (
            "RemoteProtocolError",
            e.to_string(),
            CallOutcome::Inconclusive,
        )
    };
    (transport_failure(kind, &message), outcome)
}

fn record_outcome(shared: &Shared, tool: &Tool, url: &str, outcome: CallOutcome) {
    if !tool.source.starts_with(EVICTABLE_PREFIX) {
        return;
    }
    let Some(origin) = origin_of(url) else {
        return;
    };
    let evicted = shared.with_world(|w| {
        if w.eviction.record(&tool.source, &origin, outcome) {
            w.registry.evict(&tool.source, &origin)
        } else {
            0
        }
    });
    if evicted > 0 {
        // Upstream is silent towards the plugin; the log line is for humans.
        tracing::info!(source = %tool.source, %origin, evicted, "dead plugin evicted after repeated connection failures");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_follow_main_servers_wrapping() {
        assert_eq!(
            parse_arguments(r#"{"city":"東京"}"#),
            json!({"city":"東京"})
        );
        assert_eq!(parse_arguments("not json"), json!({"_raw":"not json"}));
        assert_eq!(parse_arguments(""), json!({"_raw":""}));
        assert_eq!(parse_arguments("[1,2]"), json!({"value":[1,2]}));
        assert_eq!(parse_arguments("7"), json!({"value":7}));
    }

    #[test]
    fn callback_body_keeps_raw_text() {
        let b = callback_body("get_weather", "{\"city\": \"東京\"}", "call_1");
        assert_eq!(
            b,
            json!({"name":"get_weather","arguments":{"city":"東京"},"call_id":"call_1","raw_arguments":"{\"city\": \"東京\"}"})
        );
    }

    #[test]
    fn call_ids_look_like_openais_and_differ() {
        let a = new_call_id();
        let b = new_call_id();
        assert_ne!(a, b);
        assert!(a.starts_with("call_") && a.len() == 29, "{a}");
        assert!(a[5..].bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
