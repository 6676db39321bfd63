//! The inspector page's routes: the page (`GET /`), its script and style,
//! its status part, the tools with their schemas, and the one route that
//! acts, `POST /ui/call`, which calls a tool as main_server would.
//!
//! A page on localhost can be reached by any web site the user visits
//! (the MCP Inspector's CVE-2025-49596), so beside the admin server's own
//! gates (loopback peers, a loopback `Host` against DNS rebinding) the call
//! route takes a request only when its `Origin` is the page's own and it
//! carries the per-process token that only the served page holds; every
//! answer carries a Content-Security-Policy that allows no inline script.
//! The call itself goes to the tool's callback URL, exactly as `call` does
//! (`call_cmd::call_url`), after the arguments passed the same check a
//! model's call gets (`callback::validate::check_arguments`). Nothing here
//! changes the daemon's state or talks to main_server.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::call_cmd::call_url;
use super::page;
use super::sample::AdminState;
use crate::callback::validate::check_arguments;
use crate::devserver::invoke::parse_arguments;

/// The page's script and style, embedded: no build step, nothing fetched
/// from the internet.
pub(crate) const SCRIPT: &str = include_str!("assets/inspector.js");
pub(crate) const STYLE: &str = include_str!("assets/inspector.css");

/// The header the page sends its token in. A custom header also makes any
/// cross-origin `fetch` a preflighted one, which this server never allows.
pub(crate) const TOKEN_HEADER: &str = "x-neko-token";

/// Scripts and styles from this origin only (no inline ones, no `eval`),
/// fetches to this origin only, no frames, no forms sent anywhere; images
/// from this origin or `data:` (the pictures the model was sent, shown in
/// the call history; an image runs no script).
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Adds the browser-facing security headers to every admin answer.
pub(crate) async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    res
}

pub(crate) async fn page(State(state): State<Arc<AdminState>>) -> Response {
    let html = page::render_page(&state.sample(), state.page_token.as_deref());
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page holds the token: no cache keeps a copy.
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

pub(crate) async fn status_part(State(state): State<Arc<AdminState>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        page::render_status(&state.sample()),
    )
        .into_response()
}

pub(crate) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

pub(crate) async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// `GET /i18n/{locale}`: the page's catalogue in one locale (`i18n`), the
/// plugin's own JSON as it is.
pub(crate) async fn catalogue(
    axum::extract::Path(locale): axum::extract::Path<String>,
) -> Response {
    match super::i18n::catalogue(&locale) {
        Some(json) => (
            [
                (header::CONTENT_TYPE, "application/json; charset=utf-8"),
                (header::CACHE_CONTROL, "max-age=3600"),
            ],
            json,
        )
            .into_response(),
        None => refuse(
            StatusCode::NOT_FOUND,
            format!(
                "no catalogue for that locale; there are {}",
                super::i18n::LOCALES.join(", ")
            ),
        ),
    }
}

/// Every desired tool with what the form needs: description, schema,
/// handler target, timeout.
pub(crate) async fn tools(State(state): State<Arc<AdminState>>) -> Response {
    let sample = state.sample();
    let tools: Vec<Value> = sample
        .desired
        .tools
        .values()
        .map(|t| {
            let s = &t.spec;
            json!({
                "name": s.name,
                "description": s.description,
                "parameters": s.parameters,
                "target": s.handler.to_string(),
                "timeout_seconds": s.timeout_seconds,
            })
        })
        .collect();
    (
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(Value::Array(tools)),
    )
        .into_response()
}

/// Why a call request was refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error(
        "this request comes from another web page (Origin {0}); only the inspector page itself may call tools"
    )]
    ForeignOrigin(String),
    #[error("this request has no Origin header; only the inspector page itself may call tools")]
    NoOrigin,
    #[error("this request lacks the inspector page's token; reload the page")]
    BadToken,
    #[error(
        "this sidecar has no token for the inspector page, so it cannot call tools from it; use `neko-sidecar call`"
    )]
    NoToken,
}

/// The call route's gate: the request's `Origin` is the page's own
/// (`http://` and the `Host` it was sent to, which the admin server's
/// guard already found to be loopback), and it carries the token.
pub(crate) fn check_caller(headers: &HeaderMap, token: Option<&str>) -> Result<(), Refused> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let origin = text("origin").ok_or(Refused::NoOrigin)?;
    let host = text("host").unwrap_or("");
    if host.is_empty() || origin != format!("http://{host}") {
        return Err(Refused::ForeignOrigin(origin.to_owned()));
    }
    let expected = token.ok_or(Refused::NoToken)?;
    let given = text(TOKEN_HEADER).unwrap_or("");
    if !same_secret(given.as_bytes(), expected.as_bytes()) {
        return Err(Refused::BadToken);
    }
    Ok(())
}

/// Equal, in a time that does not depend on where they first differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the form sends.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallRequest {
    tool: String,
    /// The arguments as JSON (the form's values).
    #[serde(default)]
    arguments: Option<Value>,
    /// The model's argument text verbatim, JSON or not; wins over
    /// `arguments`.
    #[serde(default)]
    raw_arguments: Option<String>,
    /// Call even when the arguments fail the schema, to see what the model
    /// would read then.
    #[serde(default)]
    skip_check: bool,
    /// Who asks: `inspector` (the page, the default) or `panel` (the
    /// N.E.K.O plugin's panel), as the call history shows it.
    #[serde(default)]
    by: Option<String>,
}

fn refuse(code: StatusCode, message: String) -> Response {
    (code, axum::Json(json!({"error": message}))).into_response()
}

pub(crate) async fn call(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(why) = check_caller(&headers, state.page_token.as_deref()) {
        tracing::warn!("refused an inspector call: {why}");
        return refuse(StatusCode::FORBIDDEN, why.to_string());
    }
    let req: CallRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "the call request is not {{\"tool\", \"arguments\" or \"raw_arguments\", \"skip_check\"}}: {e}"
                ),
            );
        }
    };
    let by = match req.by.as_deref() {
        None | Some("inspector") => "inspector",
        Some("panel") => "panel",
        Some(other) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "`by` is {:?}; it is \"inspector\" or \"panel\"",
                    other.chars().take(64).collect::<String>()
                ),
            );
        }
    };
    let sample = state.sample();
    let Some(tool) = sample.desired.tools.get(&req.tool) else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("the sidecar serves no tool named `{}`", req.tool),
        );
    };
    let Some(url) = sample.callback_urls.get(&req.tool) else {
        return refuse(
            StatusCode::CONFLICT,
            format!("`{}` has no callback URL yet", req.tool),
        );
    };
    let raw = match (req.raw_arguments, req.arguments) {
        (Some(raw), _) => raw,
        (None, Some(v)) => v.to_string(),
        (None, None) => "{}".to_owned(),
    };
    if !req.skip_check {
        // The arguments as main_server hands them on, checked by the
        // validator a model's call meets, with its messages.
        if let Err(envelope) = check_arguments(&tool.spec, &parse_arguments(&raw)) {
            return axum::Json(json!({
                "called": false,
                "message": envelope.error,
                "output": envelope.output,
            }))
            .into_response();
        }
    }
    let spec = Arc::clone(&tool.spec);
    let url = url.clone();
    drop(sample);
    let (report, answer) = call_url(&spec.name, &url, Some(spec.timeout_seconds), &raw, by).await;
    axum::Json(json!({
        "called": true,
        "answer": report.answer,
        "raw": answer.map(|(status, body)| json!({"status": status, "body": body})),
    }))
    .into_response()
}

/// What the history route takes: the newest `seq` the reader has, to get
/// only newer calls (0 or nothing: every call held).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallsRequest {
    #[serde(default)]
    since: u64,
}

/// `POST /ui/calls`: the call history, newest first, behind the same gate
/// as the call route (it shows what the model sent and read). A POST, as
/// browsers send `Origin` on every POST but not on a same-origin GET.
pub(crate) async fn calls(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(why) = check_caller(&headers, state.page_token.as_deref()) {
        tracing::warn!("refused a call history request: {why}");
        return refuse(StatusCode::FORBIDDEN, why.to_string());
    }
    let req: CallsRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CallsRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    format!("the history request is not {{\"since\": N}}: {e}"),
                );
            }
        }
    };
    let view = match state.callbacks.history() {
        Some(h) => h.view(req.since),
        None => super::history::CallHistory::new(0).view(0),
    };
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(view)).into_response()
}

/// What the restart route takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartRequest {
    server: String,
}

/// `POST /ui/mcp/restart`: stops one MCP server and starts it again at
/// once (`McpServers::restart`), behind the call route's gate. The one
/// route besides a call that acts: it changes no configuration, and the
/// server's tools stay registered while it starts.
pub(crate) async fn restart_mcp(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(why) = check_caller(&headers, state.page_token.as_deref()) {
        tracing::warn!("refused an MCP server restart: {why}");
        return refuse(StatusCode::FORBIDDEN, why.to_string());
    }
    let req: RestartRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("the restart request is not {{\"server\": NAME}}: {e}"),
            );
        }
    };
    if !state.mcp.restart(&req.server) {
        let shown: String = req.server.chars().take(64).collect();
        return refuse(
            StatusCode::NOT_FOUND,
            format!("the sidecar runs no MCP server named `{shown}`"),
        );
    }
    axum::Json(json!({"restarted": req.server})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_the_page_itself_with_its_token_may_call() {
        let host = ("host", "127.0.0.1:8080");
        let own = ("origin", "http://127.0.0.1:8080");
        let tok = (TOKEN_HEADER, "s3cret");
        assert_eq!(
            check_caller(&headers(&[host, own, tok]), Some("s3cret")),
            Ok(())
        );
        assert_eq!(
            check_caller(
                &headers(&[host, ("origin", "https://evil.example"), tok]),
                Some("s3cret")
            ),
            Err(Refused::ForeignOrigin("https://evil.example".into()))
        );
        // Another port on the same host is another origin.
        assert!(matches!(
            check_caller(
                &headers(&[host, ("origin", "http://127.0.0.1:8081"), tok]),
                Some("s3cret")
            ),
            Err(Refused::ForeignOrigin(_))
        ));
        assert_eq!(
            check_caller(&headers(&[host, tok]), Some("s3cret")),
            Err(Refused::NoOrigin)
        );
        assert_eq!(
            check_caller(&headers(&[host, own]), Some("s3cret")),
            Err(Refused::BadToken)
        );
        assert_eq!(
            check_caller(
                &headers(&[host, own, (TOKEN_HEADER, "s3cres")]),
                Some("s3cret")
            ),
            Err(Refused::BadToken)
        );
        assert_eq!(
            check_caller(&headers(&[host, own, tok]), None),
            Err(Refused::NoToken)
        );
    }

    #[test]
    fn the_policy_allows_no_inline_script_and_nothing_from_elsewhere() {
        assert!(CSP.contains("script-src 'self';"));
        assert!(!CSP.contains("unsafe-inline"));
        assert!(!CSP.contains("unsafe-eval"));
        assert!(!CSP.contains("http"));
        assert!(CSP.starts_with("default-src 'none'"));
    }

    #[test]
    fn the_assets_load_nothing_from_the_network() {
        for text in [SCRIPT, STYLE] {
            assert!(!text.contains("http://"), "an absolute URL in an asset");
            assert!(!text.contains("https://"), "an absolute URL in an asset");
            assert!(!text.contains("@import"));
        }
        // Untrusted text reaches the page's DOM as text only; the one
        // innerHTML is the server-rendered, escaped status part.
        assert_eq!(SCRIPT.matches("innerHTML").count(), 1);
        assert!(!SCRIPT.contains("eval("));
        assert!(!SCRIPT.contains("new Function"));
        assert!(!SCRIPT.contains("insertAdjacentHTML"));
        assert!(!SCRIPT.contains("document.write"));
    }
}
