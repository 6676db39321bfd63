//! Calling a tool as the model would: builds the callback body, POSTs it to
//! the tool's `callback_url` with main_server's timeouts and no redirects,
//! reads the answer with main_server's rules (`contract::answer`), and
//! feeds the outcome to dead-plugin eviction.
//!
//! This is the only module of the stand-in that makes outgoing requests.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::eviction::{CallOutcome, EVICTABLE_PREFIX, origin_of};
use super::requests::fold_role;
use super::state::Shared;
use super::tool::Tool;
use crate::contract::images::Image;
use crate::contract::{Reading, read_answer, transport_failure};

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
    /// Whether the session's model can see images (default true). One that
    /// cannot (every realtime session) reads `_image_descriptions` instead.
    #[serde(default)]
    pub sees_images: Option<bool>,
}

/// What `/__dev/invoke` answers. First of all `model_text`, exactly the
/// string the model reads; then the parts main_server built it from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvokeAnswer {
    /// The tool message the model reads: `output` rendered as text.
    pub model_text: String,
    /// `output` as main_server built it (image warnings and descriptions
    /// included).
    pub output: Value,
    /// main_server's bookkeeping; the model never reads it.
    pub is_error: bool,
    /// The envelope's `error`; the model never reads it.
    pub error: Option<Value>,
    /// Always false: a reminder, next to `error`, of what the model reads.
    pub error_reaches_model: bool,
    /// The images passed on to a model that can see them (their data left
    /// out: only its length).
    pub images: Vec<Image>,
    /// Why images were refused or left out (also in `output`).
    pub warnings: Vec<String>,
    pub call_id: String,
    pub role: String,
}

impl InvokeAnswer {
    pub(crate) fn new(reading: Reading, call_id: String, role: String) -> Self {
        InvokeAnswer {
            model_text: reading.model_text(),
            output: reading.output,
            is_error: reading.is_error,
            error: reading.error,
            error_reaches_model: false,
            images: reading.images,
            warnings: reading.warnings,
            call_id,
            role,
        }
    }
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

/// The `arguments` main_server sends for the model's text: `{}` for empty
/// or blank text, the parsed object, `{"_raw": TEXT}` (stripped) when it is
/// not JSON, `{"value": X}` when it is JSON but not an object.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    let text = raw.trim();
    if text.is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(obj)) => Value::Object(obj),
        Ok(other) => json!({ "value": other }),
        Err(_) => json!({ "_raw": text }),
    }
}

/// The body POSTed to a callback.
pub(crate) fn callback_body(name: &str, raw_arguments: &str, call_id: &str) -> Value {
    json!({
        "name": name,
        "arguments": parse_arguments(raw_arguments),
        "call_id": call_id,
        "raw_arguments": raw_arguments,
    })
}

/// The `call_id` of the `index`th tool call of a turn, as the providers
/// that give none get it from main_server: `call_0`, `call_1`, ... again in
/// every turn. It is not unique, and the stand-in makes sure nothing that
/// is tested against it can key state on it.
pub(crate) fn turn_call_id(index: usize) -> String {
    format!("call_{index}")
}

/// Calls a tool the way main_server does and returns what the model sees.
pub(crate) async fn invoke(
    shared: &Shared,
    req: InvokeRequest,
) -> Result<InvokeAnswer, InvokeError> {
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
    let call_id = turn_call_id(0);
    let sees_images = req.sees_images.unwrap_or(true);
    let reading = match &tool.callback_url {
        None => builtin_answer(shared, &tool),
        Some(url) => {
            let timeout = Duration::from_secs_f64(tool.timeout_seconds);
            let body = callback_body(&tool.name, &raw, &call_id);
            let connections = &shared.callback_connections;
            let (reading, outcome) =
                post_callback(connections, url, timeout, &body, sees_images).await;
            record_outcome(shared, &tool, url, outcome);
            reading
        }
    };
    Ok(InvokeAnswer::new(reading, call_id, role))
}

fn builtin_answer(shared: &Shared, tool: &Tool) -> Reading {
    match shared.builtins.iter().find(|b| b.name == tool.name) {
        Some(b) => Reading::success(b.answer.clone()),
        None => Reading::failure(format!(
            "built-in tool {:?} has no stand-in implementation",
            tool.name
        )),
    }
}

/// POSTs a callback body to `url` exactly as main_server does and reads
/// the answer with its rules. `timeout` is the tool's `timeout_seconds`,
/// which httpx applies to every phase: the wait for one of the 20
/// connections, connect, and each read (per read, not a total). No
/// redirects, no proxy.
pub(crate) async fn post_callback(
    connections: &Semaphore,
    url: &str,
    timeout: Duration,
    body: &Value,
    sees_images: bool,
) -> (Reading, CallOutcome) {
    match send_callback(connections, url, timeout, body).await {
        Ok((status, bytes)) => (
            read_answer(status, &bytes, sees_images),
            CallOutcome::Completed,
        ),
        Err(failed) => failed,
    }
}

/// The HTTP exchange of [`post_callback`]: the status and body of the
/// answer, or the failure as main_server reads it. Also used by
/// `neko-sidecar call`, which shows what the sidecar said beside `output`.
pub(crate) async fn send_callback(
    connections: &Semaphore,
    url: &str,
    timeout: Duration,
    body: &Value,
) -> Result<(u16, axum::body::Bytes), (Reading, CallOutcome)> {
    let Ok(Ok(_connection)) = tokio::time::timeout(timeout, connections.acquire()).await else {
        return Err((
            transport_failure("PoolTimeout", ""),
            CallOutcome::Inconclusive,
        ));
    };
    // One client per call: each tool has its own timeouts, and a stand-in
    // needs no connection reuse.
    let client = crate::tls::plain_http()
        .connect_timeout(timeout)
        .read_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| failure_of(&e))?;
    let response = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| failure_of(&e))?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|e| failure_of(&e))?;
    Ok((status, bytes))
}

/// Names a reqwest failure the way httpx would name the same failure.
fn failure_of(e: &reqwest::Error) -> (Reading, CallOutcome) {
    let (kind, message) = if e.is_connect() && e.is_timeout() {
        ("ConnectTimeout", String::new())
    } else if e.is_connect() {
        ("ConnectError", "All connection attempts failed".to_owned())
    } else if e.is_timeout() {
        ("ReadTimeout", String::new())
    } else if e.is_builder() {
        ("UnsupportedProtocol", e.to_string())
    } else {
        ("RemoteProtocolError", e.to_string())
    };
    let outcome = if e.is_connect() {
        CallOutcome::ConnectionFailure
    } else {
        CallOutcome::Inconclusive
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
        assert_eq!(parse_arguments(" not json\n"), json!({"_raw":"not json"}));
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments(" \t\n"), json!({}));
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
    fn call_ids_repeat_every_turn() {
        assert_eq!(turn_call_id(0), "call_0");
        assert_eq!(turn_call_id(0), turn_call_id(0));
        assert_eq!(turn_call_id(3), "call_3");
    }
}
