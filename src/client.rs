//! The HTTP client of main_server's tool API (`CONTRACT.md`): typed calls for
//! register, unregister, clear and list, and the classification of every
//! failure into the classes the engine acts on.
//!
//! It never retries, never decides and never remembers: one call is one
//! request. Whether a failure is worth retrying is `CallErrorKind::is_transient`;
//! what to do about it is the engine's business.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::config::MainServerConfig;
use crate::diag::with_causes;

pub(crate) const REGISTER: &str = "/api/tools/register";
pub(crate) const UNREGISTER: &str = "/api/tools/unregister";
pub(crate) const CLEAR: &str = "/api/tools/clear";
pub(crate) const LIST: &str = "/api/tools";

/// How much of an unexpected answer's body is kept for messages.
const BODY_SNIPPET: usize = 300;

/// One entry of `GET /api/tools` in one role.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ObservedTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Missing or null reads as empty, which is never our source (ours is
    /// validated non-empty).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub source: String,
    /// `None` for main_server's built-in tools.
    #[serde(default)]
    pub callback_url: Option<String>,
    #[serde(default)]
    pub is_remote: bool,
}

/// What main_server holds, as `GET /api/tools` shows it: every role listed
/// (a role with no tools is listed with an empty list) and its tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Observed {
    pub tools_by_role: BTreeMap<String, Vec<ObservedTool>>,
}

impl Observed {
    pub fn roles(&self) -> impl Iterator<Item = &str> {
        self.tools_by_role.keys().map(String::as_str)
    }

    pub fn has_role(&self, role: &str) -> bool {
        self.tools_by_role.contains_key(role)
    }

    /// The entry named `name` in `role`, if any.
    pub fn find(&self, role: &str, name: &str) -> Option<&ObservedTool> {
        self.tools_by_role
            .get(role)?
            .iter()
            .find(|t| t.name == name)
    }
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A role that did not accept an operation (`failed_roles`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FailedRole {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub error: String,
}

/// One problem of a 422 answer: where (`loc`, e.g. `body.callback_url`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub loc: String,
    pub msg: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.loc.is_empty() {
            f.write_str(&self.msg)
        } else {
            write!(f, "{}: {}", self.loc, self.msg)
        }
    }
}

/// The successful answer of register, unregister or clear.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Reply {
    pub affected_roles: Vec<String>,
    /// Non-empty on partial success (`ok:true` with some roles failing).
    pub failed_roles: Vec<FailedRole>,
    /// `removed` of unregister (0 or 1) and clear ((tool, role) pairs).
    pub removed: u64,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallErrorKind {
    /// Connection refused, DNS failure or connect timeout: nobody is there.
    #[error("main_server is unreachable: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// 409 `storage_startup_blocked`: main_server is still starting.
    #[error("main_server's storage is still starting (409 storage_startup_blocked)")]
    Blocked,
    #[error("main_server failed with HTTP {status}: {body}")]
    ServerError { status: u16, body: String },
    /// 200 with `ok:false`. It may still have taken effect (the registry is
    /// written before the per-role sync that failed): judge by the next GET.
    #[error("main_server answered ok:false: {error}{}", failed_roles_text(.failed_roles))]
    NotOk {
        error: String,
        failed_roles: Vec<FailedRole>,
    },
    /// 422: main_server refuses the body; sending it again cannot help.
    #[error("main_server rejected the request (422): {}", join(.0))]
    Rejected(Vec<FieldError>),
    /// 404 `unknown role: X`.
    #[error("main_server does not know the role: {0}")]
    UnknownRole(String),
    /// Anything else: an unexpected status, or a body we cannot read.
    #[error("unexpected answer{}: {body}", .status.map(|s| format!(" HTTP {s}")).unwrap_or_default())]
    Other { status: Option<u16>, body: String },
}

impl CallErrorKind {
    /// Worth retrying as is: the same request may succeed later.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unreachable(_)
                | Self::Timeout(_)
                | Self::Blocked
                | Self::ServerError { .. }
                | Self::NotOk { .. }
        )
    }
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn failed_roles_text(roles: &[FailedRole]) -> String {
    if roles.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = roles
        .iter()
        .map(|r| format!("{} ({})", r.role, r.error))
        .collect();
    format!(" (failed roles: {})", parts.join(", "))
}

/// A failed call, with the route it was for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{route}: {kind}")]
pub struct CallError {
    pub route: &'static str,
    pub kind: CallErrorKind,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client for main_server at {url}: {source}")]
pub struct ClientBuildError {
    url: String,
    source: reqwest::Error,
}

/// The main_server client. Cheap to clone (one shared connection pool).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// Base URL without a trailing slash (validated by the config).
    base: String,
    timeout: Duration,
}

impl Client {
    pub fn new(config: &MainServerConfig) -> Result<Self, ClientBuildError> {
        let http = crate::tls::plain_http()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            // main_server is on loopback: an HTTP_PROXY from the environment
            // must not capture our calls.
            .no_proxy()
            // A 307 (e.g. to a trailing slash) means our route is wrong; we
            // want to see it, not follow it with a changed method.
            .redirect(reqwest::redirect::Policy::none())
            // A burst of registrations opens up to `max_in_flight`
            // connections; keeping them all idle afterwards would hold
            // their buffers and tasks (about 30 KiB each) for nothing,
            // since an idle sidecar sends one GET per poll.
            .pool_max_idle_per_host(1)
            .build()
            .map_err(|source| ClientBuildError {
                url: config.url.clone(),
                source,
            })?;
        Ok(Self {
            http,
            base: config.url.trim_end_matches('/').to_string(),
            timeout: config.request_timeout,
        })
    }

    /// `POST /api/tools/register` with a body from `desired::register_body`.
    pub(crate) async fn register(&self, body: &Json) -> Result<Reply, CallError> {
        self.post(REGISTER, body).await
    }

    /// `POST /api/tools/unregister`; `role: None` removes the name from every role.
    pub(crate) async fn unregister(
        &self,
        name: &str,
        role: Option<&str>,
    ) -> Result<Reply, CallError> {
        self.post(UNREGISTER, &json!({"name": name, "role": role}))
            .await
    }

    /// `POST /api/tools/clear` for every role; `removed` counts (tool, role) pairs.
    pub(crate) async fn clear(&self, source: &str) -> Result<Reply, CallError> {
        self.post(CLEAR, &json!({"source": source, "role": null}))
            .await
    }

    /// `GET /api/tools`: every role and its tools.
    pub(crate) async fn list(&self) -> Result<Observed, CallError> {
        let body = self.send(LIST, None).await?;
        serde_json::from_slice::<Observed>(&body).map_err(|e| CallError {
            route: LIST,
            kind: CallErrorKind::Other {
                status: Some(200),
                body: format!("cannot read the tool list ({e}): {}", snippet(&body)),
            },
        })
    }

    async fn post(&self, route: &'static str, body: &Json) -> Result<Reply, CallError> {
        let bytes = self.send(route, Some(body)).await?;
        read_reply(&bytes).map_err(|kind| CallError { route, kind })
    }

    /// GETs `route`, or POSTs `body` to it; the body of a 200 answer.
    async fn send(&self, route: &'static str, body: Option<&Json>) -> Result<Bytes, CallError> {
        let err = |kind| CallError { route, kind };
        let url = format!("{}{route}", self.base);
        let request = match body {
            Some(body) => self.http.post(url).json(body),
            None => self.http.get(url),
        };
        let resp = request.send().await.map_err(|e| err(self.transport(e)))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| err(self.transport(e)))?;
        if status != StatusCode::OK {
            return Err(err(classify_status(status, &bytes)));
        }
        Ok(bytes)
    }

    /// A failure before a whole answer arrived.
    fn transport(&self, e: reqwest::Error) -> CallErrorKind {
        // A connect timeout is both `is_connect` and `is_timeout`: nobody
        // answered the door, which is "unreachable", not a slow server. So
        // is a connection closed mid-answer (main_server stopping).
        if e.is_timeout() && !e.is_connect() {
            CallErrorKind::Timeout(self.timeout)
        } else {
            CallErrorKind::Unreachable(with_causes(&e))
        }
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut s: String = text.chars().take(BODY_SNIPPET).collect();
    if text.chars().count() > BODY_SNIPPET {
        s.push('…');
    }
    s
}

/// Turns a non-200 answer into its class.
fn classify_status(status: StatusCode, body: &[u8]) -> CallErrorKind {
    let json: Option<Json> = serde_json::from_slice(body).ok();
    match status.as_u16() {
        409 if json
            .as_ref()
            .and_then(|j| j.get("error_code"))
            .and_then(Json::as_str)
            == Some("storage_startup_blocked") =>
        {
            CallErrorKind::Blocked
        }
        422 => CallErrorKind::Rejected(field_errors(json.as_ref(), body)),
        404 => {
            let detail = json
                .as_ref()
                .and_then(|j| j.get("detail"))
                .and_then(Json::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| snippet(body));
            let role = detail
                .strip_prefix("unknown role: ")
                .map(str::to_string)
                .unwrap_or(detail);
            CallErrorKind::UnknownRole(role)
        }
        s if status.is_server_error() => CallErrorKind::ServerError {
            status: s,
            body: snippet(body),
        },
        s => CallErrorKind::Other {
            status: Some(s),
            body: snippet(body),
        },
    }
}

/// The `detail` list of a 422 (pydantic style), or the raw body as one message.
fn field_errors(json: Option<&Json>, body: &[u8]) -> Vec<FieldError> {
    let detail = json.and_then(|j| j.get("detail"));
    match detail {
        Some(Json::Array(items)) => items
            .iter()
            .map(|item| {
                let loc = item
                    .get("loc")
                    .and_then(Json::as_array)
                    .map(|parts| {
                        parts
                            .iter()
                            .map(|p| match p {
                                Json::String(s) => s.clone(),
                                other => other.to_string(),
                            })
                            .collect::<Vec<_>>()
                            .join(".")
                    })
                    .unwrap_or_default();
                let msg = item
                    .get("msg")
                    .and_then(Json::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| item.to_string());
                FieldError { loc, msg }
            })
            .collect(),
        Some(Json::String(s)) => vec![FieldError {
            loc: String::new(),
            msg: s.clone(),
        }],
        _ => vec![FieldError {
            loc: String::new(),
            msg: snippet(body),
        }],
    }
}

/// Reads a 200 answer of register, unregister or clear.
fn read_reply(body: &[u8]) -> Result<Reply, CallErrorKind> {
    #[derive(Deserialize)]
    struct Raw {
        ok: bool,
        #[serde(default)]
        affected_roles: Vec<String>,
        #[serde(default)]
        failed_roles: Vec<FailedRole>,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        removed: Option<Json>,
    }
    let raw: Raw = serde_json::from_slice(body).map_err(|e| CallErrorKind::Other {
        status: Some(200),
        body: format!("cannot read the answer ({e}): {}", snippet(body)),
    })?;
    if !raw.ok {
        return Err(CallErrorKind::NotOk {
            error: raw.error.unwrap_or_else(|| "no error given".to_string()),
            failed_roles: raw.failed_roles,
        });
    }
    // unregister says `removed: bool`, clear says `removed: N`.
    let removed = match raw.removed {
        Some(Json::Bool(b)) => u64::from(b),
        Some(Json::Number(n)) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    Ok(Reply {
        affected_roles: raw.affected_roles,
        failed_roles: raw.failed_roles,
        removed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_blocked_is_its_own_transient_class() {
        let k = classify_status(
            StatusCode::CONFLICT,
            br#"{"ok":false,"error_code":"storage_startup_blocked","error":"starting"}"#,
        );
        assert_eq!(k, CallErrorKind::Blocked);
        assert!(k.is_transient());
        let other = classify_status(StatusCode::CONFLICT, br#"{"ok":false}"#);
        assert!(matches!(
            other,
            CallErrorKind::Other {
                status: Some(409),
                ..
            }
        ));
        assert!(!other.is_transient());
    }

    #[test]
    fn a_422_keeps_the_servers_loc_and_msg() {
        let k = classify_status(
            StatusCode::UNPROCESSABLE_ENTITY,
            br#"{"detail":[{"type":"value_error","loc":["body","callback_url"],"msg":"Value error, callback host must be loopback","input":"x"},{"loc":["body","parameters"],"msg":"Input should be a valid dictionary"}]}"#,
        );
        assert_eq!(
            k,
            CallErrorKind::Rejected(vec![
                FieldError {
                    loc: "body.callback_url".into(),
                    msg: "Value error, callback host must be loopback".into()
                },
                FieldError {
                    loc: "body.parameters".into(),
                    msg: "Input should be a valid dictionary".into()
                },
            ])
        );
        assert!(!k.is_transient());
        assert_eq!(
            k.to_string(),
            "main_server rejected the request (422): body.callback_url: Value error, callback host must be loopback; body.parameters: Input should be a valid dictionary"
        );
    }

    #[test]
    fn unknown_role_names_the_role() {
        let k = classify_status(
            StatusCode::NOT_FOUND,
            br#"{"detail":"unknown role: Lanlan"}"#,
        );
        assert_eq!(k, CallErrorKind::UnknownRole("Lanlan".into()));
        assert!(!k.is_transient());
    }

    #[test]
    fn five_hundreds_are_transient_with_a_snippet() {
        let long = "x".repeat(1000);
        let k = classify_status(StatusCode::BAD_GATEWAY, long.as_bytes());
        match &k {
            CallErrorKind::ServerError { status, body } => {
                assert_eq!(*status, 502);
                assert_eq!(body.chars().count(), BODY_SNIPPET + 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(k.is_transient());
    }

    #[test]
    fn ok_false_is_not_ok_with_the_failed_roles() {
        let e = read_reply(br#"{"ok":false,"registered":"t","affected_roles":[],"failed_roles":[{"role":"R","error":"sync failed"}],"error":"no role accepted the registration"}"#).unwrap_err();
        assert_eq!(
            e,
            CallErrorKind::NotOk {
                error: "no role accepted the registration".into(),
                failed_roles: vec![FailedRole {
                    role: "R".into(),
                    error: "sync failed".into()
                }]
            }
        );
        assert!(e.is_transient());
        assert_eq!(
            e.to_string(),
            "main_server answered ok:false: no role accepted the registration (failed roles: R (sync failed))"
        );
    }

    #[test]
    fn removed_reads_as_bool_or_count() {
        let r = read_reply(
            br#"{"ok":true,"removed":true,"name":"t","affected_roles":["a"],"failed_roles":[]}"#,
        )
        .unwrap();
        assert_eq!(r.removed, 1);
        let r = read_reply(
            br#"{"ok":true,"removed":4,"source":"s","affected_roles":["a","b"],"failed_roles":[]}"#,
        )
        .unwrap();
        assert_eq!(r.removed, 4);
        assert_eq!(r.affected_roles, ["a", "b"]);
    }

    #[test]
    fn the_listing_reads_builtins_and_remote_tools() {
        let o: Observed = serde_json::from_str(
            r#"{"ok":true,"tools_by_role":{"小八":[{"name":"b","description":"","source":"builtin","callback_url":null,"is_remote":false},{"name":"t","description":"d","source":"plugin:x","callback_url":"http://127.0.0.1:1/cb/t","is_remote":true}],"Lanlan":[]}}"#,
        )
        .unwrap();
        assert_eq!(o.roles().collect::<Vec<_>>(), ["Lanlan", "小八"]);
        assert!(o.has_role("Lanlan"));
        assert_eq!(o.find("小八", "b").unwrap().callback_url, None);
        assert_eq!(o.find("小八", "t").unwrap().source, "plugin:x");
        assert!(o.find("Lanlan", "t").is_none());
    }
}
