//! The admin listener's sign-in routes: where a browser starts a sign-in
//! to an MCP server (`GET /oauth/login/{name}`, a redirect to its
//! authorization server), where the authorization server sends it back
//! (`GET /oauth/callback`, the loopback redirect of RFC 8252), and where
//! `auth logout` signs out (`POST /oauth/logout/{name}`).
//!
//! The pages say what happened in words and never show the code, the
//! state or a token; the callback's query is logged nowhere. The logout
//! route acts, so a request a web page could send (one with an `Origin`)
//! is refused, as the inspector's call route does.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::sample::AdminState;

/// `GET /oauth/login/{name}`: a fresh sign-in, and the browser sent to
/// the authorization server.
pub(super) async fn login(
    State(state): State<Arc<AdminState>>,
    Path(name): Path<String>,
) -> Response {
    match state.mcp.oauth().start(&name).await {
        Ok(url) => (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, url),
                (header::CACHE_CONTROL, "no-store".into()),
            ],
        )
            .into_response(),
        Err(why) => page(
            StatusCode::CONFLICT,
            &format!("Cannot sign in to {name}"),
            &crate::logging::scrub(&why),
        ),
    }
}

/// `GET /oauth/callback?code=…&state=…`: the sign-in completed.
pub(super) async fn callback(
    State(state): State<Arc<AdminState>>,
    RawQuery(query): RawQuery,
) -> Response {
    match state
        .mcp
        .oauth()
        .finish(query.as_deref().unwrap_or_default())
        .await
    {
        Ok(name) => page(
            StatusCode::OK,
            &format!("Signed in to {name}"),
            &format!(
                "The sidecar is connecting to {name}; its tools stay registered with N.E.K.O. You can close this tab."
            ),
        ),
        Err(why) => {
            tracing::warn!("a sign-in's redirect was refused: {why}");
            page(
                StatusCode::BAD_REQUEST,
                "Sign-in refused",
                &crate::logging::scrub(&why),
            )
        }
    }
}

/// `POST /oauth/logout/{name}`: revoked where offered, and forgotten.
pub(super) async fn logout(
    State(state): State<Arc<AdminState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if headers.contains_key(header::ORIGIN) {
        return (
            StatusCode::FORBIDDEN,
            "a web page may not sign the sidecar out: use `neko-sidecar auth logout NAME`\n",
        )
            .into_response();
    }
    match state.mcp.oauth().logout(&name).await {
        Ok(said) => (
            StatusCode::OK,
            format!("{}\n", crate::logging::scrub(&said)),
        )
            .into_response(),
        Err(why) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}\n", crate::logging::scrub(&why)),
        )
            .into_response(),
    }
}

/// A small page with a title and a sentence, both escaped.
fn page(code: StatusCode, title: &str, text: &str) -> Response {
    let esc = super::page::esc;
    let body = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title></head><body><h1>{t}</h1><p>{x}</p></body></html>\n",
        t = esc(title),
        x = esc(text)
    );
    (
        code,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}
