//! What the admin endpoints read: [`AdminState`], the handles of the running
//! daemon, and [`Sample`], one read of all of them taken per request.
//!
//! Taking one sample first and rendering from it keeps a `/status` answer
//! (or a scrape) consistent with itself and keeps the renderers pure. This
//! module only reads handles; it never changes what they hold.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::callback::{CallbackHandle, CallbackStats};
use crate::daemon::Daemon;
use crate::desired::DesiredState;
use crate::mcp::{McpServers, ServerStatus};
use crate::registration::{RegistrationSnapshot, RegistrationStore};
use crate::reload::{ManifestHealth, ReloadHandle};

/// The daemon's handles the admin endpoints read, plus who this sidecar is.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// Each tool's registration state and main_server's reachability,
    /// written by the engine.
    pub registration: Arc<RegistrationStore>,
    /// Call statistics and each tool's callback URL.
    pub callbacks: CallbackHandle,
    /// Every manifest file's health.
    pub reload: ReloadHandle,
    /// The desired state as the engine sees it: the manifests' tools and
    /// the MCP servers' tools.
    pub desired: tokio::sync::watch::Receiver<Arc<DesiredState>>,
    /// The MCP servers' sessions.
    pub mcp: McpServers,
    /// The registration source tag.
    pub source: String,
    /// main_server's base URL, shown so an operator sees where we look.
    pub main_server_url: String,
    /// Wall-clock start, shown to people.
    pub started_at: SystemTime,
    /// Monotonic start, for the uptime (immune to clock changes).
    pub started: Instant,
    pub version: &'static str,
    /// The inspector page's per-process secret: the page carries it and its
    /// call endpoint requires it, so no other web page can call a tool
    /// through the sidecar. `None` when the system had no randomness to
    /// give; the page then shows but cannot call.
    pub page_token: Option<Arc<str>>,
    /// The identity token `neko-sidecar call` checks (`identity`): unlike
    /// the page token, never shown on any page.
    pub identity_token: Option<Arc<str>>,
}

impl AdminState {
    /// The state of a daemon that has just started, with this crate's version.
    pub fn from_daemon(daemon: &Daemon) -> Self {
        Self {
            registration: Arc::clone(&daemon.registration),
            callbacks: daemon.callback.clone(),
            reload: daemon.reload.clone(),
            desired: daemon.desired.clone(),
            mcp: daemon.mcp.clone(),
            source: daemon.config.source.clone(),
            main_server_url: daemon.config.main_server.url.clone(),
            started_at: SystemTime::now(),
            started: Instant::now(),
            version: env!("CARGO_PKG_VERSION"),
            page_token: new_page_token(),
            identity_token: new_page_token(),
        }
    }

    /// Reads every source once.
    pub(crate) fn sample(&self) -> Sample {
        let desired = Arc::clone(&self.desired.borrow());
        let callback_urls = desired
            .tools
            .keys()
            .map(|name| (name.clone(), self.callbacks.url_for(name)))
            .collect();
        Sample {
            registration: self.registration.snapshot(),
            callbacks: self.callbacks.stats(),
            callback_urls,
            manifests: self.reload.health(),
            mcp: self.mcp.statuses(),
            desired,
            source: self.source.clone(),
            main_server_url: self.main_server_url.clone(),
            version: self.version,
            now: SystemTime::now(),
            started_at: self.started_at,
            uptime: self.started.elapsed(),
        }
    }
}

/// The environment variable a parent (the N.E.K.O plugin) sets to give
/// the sidecar the token of its admin routes that act, so that it can use
/// them too without reading the page. Never passed on to a handler or an MCP
/// server (`systemd::SERVICE_ONLY_ENV`).
pub const ADMIN_TOKEN_ENV: &str = "NEKO_SIDECAR_ADMIN_TOKEN";

/// The token `ADMIN_TOKEN_ENV` gives, when it is one: 32 to 256 of
/// `A-Z a-z 0-9 - _` (so it is long enough and fits a header as it is).
pub(crate) fn given_token(value: Option<&str>) -> Result<Option<Arc<str>>, String> {
    let Some(v) = value else { return Ok(None) };
    let fits = (32..=256).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if fits {
        Ok(Some(v.into()))
    } else {
        Err(format!(
            "{ADMIN_TOKEN_ENV} is not 32 to 256 of A-Z a-z 0-9 - _ ({} bytes); a token of the sidecar's own is used instead",
            v.len()
        ))
    }
}

/// The parent's token (`ADMIN_TOKEN_ENV`), else 128 random bits as hex,
/// else `None` (logged) when the system gives none.
fn new_page_token() -> Option<Arc<str>> {
    let given = std::env::var(ADMIN_TOKEN_ENV).ok();
    match given_token(given.as_deref()) {
        Ok(Some(t)) => return Some(t),
        Ok(None) => {}
        Err(why) => tracing::error!("{why}"),
    }
    let mut bytes = [0u8; 16];
    match getrandom::fill(&mut bytes) {
        Ok(()) => Some(
            bytes
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .into(),
        ),
        Err(e) => {
            tracing::error!(
                "no randomness for the inspector page's token ({e}): the page cannot call tools"
            );
            None
        }
    }
}

/// Everything one answer shows, read at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    pub registration: RegistrationSnapshot,
    pub callbacks: CallbackStats,
    /// Each desired tool's callback URL.
    pub callback_urls: std::collections::BTreeMap<String, String>,
    pub manifests: Arc<ManifestHealth>,
    /// Each MCP server, by name.
    pub mcp: Vec<ServerStatus>,
    pub desired: Arc<DesiredState>,
    pub source: String,
    pub main_server_url: String,
    pub version: &'static str,
    pub now: SystemTime,
    pub started_at: SystemTime,
    pub uptime: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_token_is_long_and_plain_or_refused() {
        assert_eq!(given_token(None), Ok(None));
        let good = "a".repeat(31) + "-_Z9";
        assert_eq!(
            given_token(Some(&good)).unwrap().as_deref(),
            Some(good.as_str())
        );
        assert!(given_token(Some("short")).is_err());
        assert!(given_token(Some(&"a\"".repeat(20))).is_err());
        assert!(given_token(Some(&"a".repeat(257))).is_err());
        // Handlers and MCP servers never see it.
        assert!(crate::systemd::SERVICE_ONLY_ENV.contains(&ADMIN_TOKEN_ENV));
    }
}
