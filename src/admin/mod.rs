//! The operator surface: the admin HTTP endpoints (`/healthz`, `/readyz`,
//! `/status`, `/metrics`), the inspector page at `/`, and the `status` and
//! `call` commands that use them.
//!
//! The daemon builds an [`AdminState`] from what it already runs
//! (registration store, callback handle, reload handle) and hands a bound
//! listener to [`serve`]. Everything shown is read from those handles at
//! request time: this module keeps no state of its own, never changes the
//! daemon's state, and never talks to main_server (only `call` reaches a
//! callback URL, as main_server would).
//!
//! Map: `sample` (one consistent read of every source), `readiness` and
//! `view` (pure: a sample in, a verdict or the `/status` JSON out), `prom`
//! (the Prometheus text format writer) and `metrics` (which series), `time`
//! (RFC 3339 timestamps), `page` (pure: a sample in, the inspector page's
//! HTML out), `inspector` (the page's routes and their gates, the call it
//! makes through `call_cmd`), `server` (HTTP), `client` (finding and reading a
//! running sidecar's endpoints), `status_cmd` and `call_cmd` (the commands).

mod auth_cmd;
mod call_cmd;
mod client;
pub mod history;
mod i18n;
mod identity;
mod inspector;
mod metrics;
mod oauth_routes;
mod page;
mod prom;
mod readiness;
mod sample;
mod server;
mod status_cmd;
mod time;
mod view;

pub(crate) use auth_cmd::{
    describe as describe_sign_in, list as auth_list, login as auth_login, logout as auth_logout,
};
pub(crate) use call_cmd::{CallOptions, call};
pub use sample::{ADMIN_TOKEN_ENV, AdminState, Sample};
pub use server::{AdminError, MAX_CONNECTIONS, serve, spawn, start_for};
pub(crate) use status_cmd::status;
