//! The stand-in's router: the `/__dev/*` control routes (`control.rs`) behind
//! the same gates as the API, and everything else through the main_server
//! emulation (`api_routes.rs`).
//!
//! It only assembles routes; the handlers and what they share (`http.rs`)
//! never refer back to it.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::Response;

use super::http::{AppState, MAX_BODY_BYTES, access_gates};

/// The whole router of one listener generation.
pub(crate) fn router(state: AppState) -> Router {
    super::control::routes()
        .layer(middleware::from_fn(dev_gate))
        // axum's 2 MB default would answer its own 413 to `/__dev/` bodies
        // main_server's limit lets through. The API fallback reads its body
        // itself, with main_server's limit and answer.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .fallback(super::api_routes::entry)
        .with_state(state)
}

/// `/__dev/*` gets the same gates as the API, so the control surface is
/// never reachable from another host either.
async fn dev_gate(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    match access_gates(peer, req.headers()) {
        Some(refused) => refused,
        None => next.run(req).await,
    }
}
