//! The `neko-sidecar call` command: calls one tool through the running
//! sidecar exactly as main_server would, and shows what the model would see.
//!
//! The tool's callback URL and timeout come from the sidecar's `/status`.
//! The request is the stand-in's own (`devserver::invoke`): the same body
//! (`name`, `arguments` wrapped as main_server wraps them, a fresh
//! `call_id`, `raw_arguments`), the same timeouts, no redirects; the answer
//! is read with main_server's rules (`contract::answer`). So a plugin
//! author sees exactly the text the model reads, validation failures
//! included.
//! It never registers anything and never talks to main_server.
//!
//! Before sending anything it checks that the process on the admin port is
//! the sidecar of its config (the identity token of `[admin] token_file`,
//! see `identity`); without a token file it says that it did not check.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{AdminClient, ClientError, admin_url, token_file};
use crate::contract::{MAX_CALLBACK_CONNECTIONS, read_answer};
use crate::devserver::invoke::{callback_body, send_callback, turn_call_id};

/// The HTTP status and body text of a callback's answer, as it came.
pub(super) type RawAnswer = (u16, String);

/// main_server's default when a tool's timeout is unknown.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What to call, and with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallOptions {
    pub tool: String,
    /// JSON text of the arguments (checked to be JSON); `{}` when absent.
    pub args: Option<String>,
    /// The model's argument text verbatim, JSON or not; wins over `args`.
    pub raw_args: Option<String>,
}

/// What the model would see, and whether it is an error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallReport {
    /// `model_text` (exactly what the model reads), `tool`, `call_id`,
    /// `output`, `is_error`, `error`, `images` (those main_server took:
    /// type, size, whether it re-encoded them), `image_repairs` (what the
    /// sidecar repaired so that main_server takes them), `warnings`,
    /// `took_ms`.
    pub answer: Value,
    pub is_error: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error(transparent)]
    Admin(#[from] ClientError),
    #[error("the sidecar serves no tool named `{tool}`; it serves: {known}")]
    UnknownTool { tool: String, known: String },
    #[error("the sidecar shows no callback URL for `{0}`")]
    NoCallbackUrl(String),
    #[error("--args is not JSON ({0}); pass --raw-args to send text that is not JSON")]
    BadArgs(String),
}

/// The argument text the model would send.
fn raw_arguments(opts: &CallOptions) -> Result<String, CallError> {
    if let Some(raw) = &opts.raw_args {
        return Ok(raw.clone());
    }
    match &opts.args {
        None => Ok("{}".to_owned()),
        Some(text) => serde_json::from_str::<Value>(text)
            .map(|_| text.clone())
            .map_err(|e| CallError::BadArgs(e.to_string())),
    }
}

/// Calls `opts.tool` through the sidecar of `config` (or at `admin`).
pub(crate) async fn call(
    config: &Path,
    admin: Option<&str>,
    opts: &CallOptions,
) -> Result<CallReport, CallError> {
    let raw = raw_arguments(opts)?;
    let base = admin_url(config, admin)?;
    let client = AdminClient::new(base.clone())?;
    // The arguments go to the callback URL the admin port reports: first
    // make sure it is this config's sidecar answering there.
    match token_file(config) {
        Some(path) => client.verify(config, &path).await?,
        None => eprintln!(
            "neko-sidecar: note: not checked that {base} is the sidecar of {}: its [admin] token_file is not set, so this trusts whatever process answers on that port",
            config.display()
        ),
    }
    let (_, status) = client.status().await?;
    let Some(tool) = status.tools.iter().find(|t| t.name == opts.tool) else {
        let known: Vec<&str> = status.tools.iter().map(|t| t.name.as_str()).collect();
        return Err(CallError::UnknownTool {
            tool: opts.tool.clone(),
            known: if known.is_empty() {
                "(none)".to_owned()
            } else {
                known.join(", ")
            },
        });
    };
    let url = tool
        .callback_url
        .clone()
        .ok_or_else(|| CallError::NoCallbackUrl(opts.tool.clone()))?;
    let (report, _) = call_url(&tool.name, &url, tool.timeout_seconds, &raw, "cli").await;
    Ok(report)
}

/// Calls tool `name` at its callback `url` as main_server would, with the
/// model's argument text `raw`, within the tool's timeout (main_server's
/// default when unknown), and reads the answer by main_server's rules.
/// Also returns the HTTP status and body as they came, when one came. The
/// `call` command and the inspector page both call through here; `by`
/// (one of `history::CALLERS`) says which, in the call history.
pub(super) async fn call_url(
    name: &str,
    url: &str,
    timeout_seconds: Option<f64>,
    raw: &str,
    by: &str,
) -> (CallReport, Option<RawAnswer>) {
    let timeout = timeout_seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64);
    let call_id = turn_call_id(0);
    let started = Instant::now();
    let mut body = callback_body(name, raw, &call_id);
    // Who calls, for the call history (main_server's calls have no such key).
    body[crate::admin::history::BY_KEY] = json!(by);
    let connections = tokio::sync::Semaphore::new(MAX_CALLBACK_CONNECTIONS);
    let (view, image_repairs, answer) = match send_callback(&connections, url, timeout, &body).await
    {
        Ok((status, bytes)) => {
            // Beside `output`, where main_server never looks.
            let repairs = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("image_repairs").cloned())
                .unwrap_or_else(|| json!([]));
            let raw_answer = (status, String::from_utf8_lossy(&bytes).into_owned());
            (read_answer(status, &bytes, true), repairs, Some(raw_answer))
        }
        Err((view, _)) => (view, json!([]), None),
    };
    let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let report = CallReport {
        is_error: view.is_error,
        answer: json!({
            "model_text": view.model_text(),
            "tool": name,
            "call_id": call_id,
            "output": view.output,
            "is_error": view.is_error,
            "error": view.error,
            "images": view.images,
            "image_repairs": image_repairs,
            "warnings": view.warnings,
            "took_ms": took_ms,
        }),
    };
    (report, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: Option<&str>, raw: Option<&str>) -> CallOptions {
        CallOptions {
            tool: "t".into(),
            args: args.map(Into::into),
            raw_args: raw.map(Into::into),
        }
    }

    #[test]
    fn arguments_are_json_text_kept_verbatim_unless_raw() {
        assert_eq!(raw_arguments(&opts(None, None)).unwrap(), "{}");
        assert_eq!(
            raw_arguments(&opts(Some("{\"city\": \"東京\"}"), None)).unwrap(),
            "{\"city\": \"東京\"}"
        );
        assert!(matches!(
            raw_arguments(&opts(Some("{city"), None)),
            Err(CallError::BadArgs(_))
        ));
        assert_eq!(
            raw_arguments(&opts(Some("{}"), Some("not json"))).unwrap(),
            "not json"
        );
    }
}
