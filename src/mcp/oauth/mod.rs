//! Signing in to remote MCP servers that answer `401`, as the MCP
//! specification's Authorization section asks: discovery (`discovery`),
//! the client's identity (a configured `client_id`, else one registered
//! dynamically by RFC 7591 and kept, else a clear reason), the
//! authorization code flow with PKCE (S256), `state` and the `resource`
//! parameter (RFC 8707), its redirect to the admin listener's
//! `/oauth/callback` (a loopback redirect, RFC 8252), tokens kept in a
//! file only the sidecar's user can read (`store`) and refreshed before
//! they expire and after a `401`.
//!
//! Why our own small pieces rather than rmcp's `auth` feature: rmcp's
//! `AuthorizationManager` brings the `oauth2` crate (with chrono, a second
//! `rand` and a second `sha2`), falls back to endpoints guessed from the
//! server's URL when discovery finds nothing, which the specification
//! dropped, proceeds when the authorization server does not say it offers
//! S256, which the specification asks clients to refuse, and, given our
//! reqwest client (every client comes from `tls`), drops its own address
//! checks. The protocol is a handful of JSON and form requests; PKCE is a
//! SHA-256 and base64, both already in the build.
//!
//! One `OAuth` per sidecar holds the store, the redirect and the pending
//! sign-ins (one per server, for `PENDING_FOR`, used once); each `url`
//! server's session holds its `ServerAuth`. A server that needs a sign-in
//! keeps its tools registered; a call answers "sign in to NAME at LINK".

pub(crate) mod discovery;
pub(crate) mod store;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use sha2::Digest as _;
use tokio::sync::Notify;
use tokio::time::Instant;
use url::Url;

use self::discovery::{Challenge, ResourceMetadata, ServerMetadata};
use self::store::{Client, Entry, Store, Tokens};
use crate::manifest::{HttpOptions, McpServerSpec, McpTransport};

/// How long a sign-in link, once opened, may take to come back.
const PENDING_FOR: Duration = Duration::from_secs(600);
/// An access token this close to its expiry is refreshed before use.
const REFRESH_BEFORE: Duration = Duration::from_secs(60);
/// The most a token or registration answer may weigh.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The client name a dynamic registration gives.
const CLIENT_NAME: &str = "neko-sidecar";

/// A server's sign-in, as operators see it (`/status`, `status`, the
/// inspector, `check --probe`, `auth list`). Never a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignIn {
    /// "signed_in", "needs_sign_in", or "refused" (this server cannot be
    /// signed in to as it is configured; `reason` says why).
    pub state: String,
    /// Where to sign in (the admin listener's `/oauth/login/NAME`), when
    /// one is needed and the admin listener is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the access token expires, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Whether a refresh token is kept (a silent renewal is possible).
    #[serde(default)]
    pub refreshable: bool,
}

/// The sidecar's sign-ins: the store, the redirect, the pending ones.
pub(crate) struct OAuth {
    store: Store,
    /// `http://127.0.0.1:PORT/oauth/callback`, once the admin listener is up.
    callback: RwLock<Option<String>>,
    servers: Mutex<BTreeMap<String, Arc<ServerAuth>>>,
    pending: Mutex<BTreeMap<String, Pending>>,
}

/// A sign-in link that was opened and has not come back yet.
struct Pending {
    server: String,
    state: String,
    verifier: String,
    redirect_uri: String,
    expires: Instant,
}

impl OAuth {
    pub(crate) fn new(store: Store) -> Arc<Self> {
        Arc::new(Self {
            store,
            callback: RwLock::new(None),
            servers: Mutex::default(),
            pending: Mutex::default(),
        })
    }

    /// The admin listener is at `addr`: redirects come back there.
    pub(crate) fn set_admin(&self, addr: std::net::SocketAddr) {
        *self.callback.write().unwrap_or_else(|e| e.into_inner()) =
            Some(format!("http://{addr}/oauth/callback"));
    }

    fn callback(&self) -> Option<String> {
        self.callback
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Where the user signs in to `name`, or how, when there is no link.
    pub(crate) fn link(&self, name: &str) -> Option<String> {
        self.callback()
            .map(|cb| cb.replace("/oauth/callback", &format!("/oauth/login/{name}")))
    }

    /// The sign-in of the `url` server `spec`, or `None` (a `command`
    /// server, `oauth = false`, or an `Authorization` header of its own). A server already known keeps its
    /// state when its spec is unchanged in what signing in depends on.
    pub(crate) fn server(self: &Arc<Self>, spec: &McpServerSpec) -> Option<Arc<ServerAuth>> {
        let McpTransport::Http {
            url,
            options,
            headers,
            ..
        } = &spec.transport
        else {
            return None;
        };
        // A key of the user's own in `Authorization`: that is how it signs
        // in, and a 401 means the key is wrong, not that OAuth is wanted.
        let own_key = headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"));
        if !options.oauth.enabled || own_key {
            return None;
        }
        let parsed = Url::parse(url).ok()?;
        let auth = Arc::new(ServerAuth {
            name: spec.name.clone(),
            url: parsed,
            server_url: url.clone(),
            options: options.clone(),
            hub: Arc::downgrade(self),
            state: Mutex::new(AuthState::default()),
            refreshing: tokio::sync::Mutex::new(()),
            signed_in: Notify::new(),
        });
        if let Some(secret) = &options.oauth.client_secret {
            crate::logging::keep_out(std::slice::from_ref(secret));
        }
        if let Some(e) = self.store.get(&spec.name)
            && e.server_url == *url
        {
            auth.lock().entry = Some(e);
        }
        lock(&self.servers).insert(spec.name.clone(), auth.clone());
        Some(auth)
    }

    /// A server removed from the manifests: its pending sign-in goes.
    pub(crate) fn forget(&self, name: &str, auth: &Arc<ServerAuth>) {
        let mut servers = lock(&self.servers);
        if servers.get(name).is_some_and(|a| Arc::ptr_eq(a, auth)) {
            servers.remove(name);
            lock(&self.pending).remove(name);
        }
    }

    fn find(&self, name: &str) -> Option<Arc<ServerAuth>> {
        lock(&self.servers).get(name).cloned()
    }

    /// Starts a sign-in to `name`: the authorization server's URL to send
    /// the browser to. A new start replaces the server's pending one.
    pub(crate) async fn start(&self, name: &str) -> Result<String, String> {
        let auth = self.find(name).ok_or_else(|| {
            format!("no MCP server `{name}` signs in with OAuth here (a `url` server, without oauth = false)")
        })?;
        let redirect_uri = self.callback().ok_or_else(|| {
            "the admin listener is off ([admin] listen = \"\"), and a sign-in comes back to it: turn it on".to_string()
        })?;
        let entry = auth.prepared(&redirect_uri).await?;
        let client = entry
            .client
            .clone()
            .ok_or("no client could be made for the sign-in")?;
        let verifier = random_text(32)?;
        let state = random_text(16)?;
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(sha2::Sha256::digest(verifier.as_bytes()));
        let mut url = Url::parse(&entry.metadata.authorization_endpoint)
            .map_err(|e| format!("its authorization endpoint is not a URL ({e})"))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", &client.client_id)
                .append_pair("redirect_uri", &redirect_uri)
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", &state)
                .append_pair("resource", &entry.resource);
            if let Some(scope) = auth.scope(&entry) {
                q.append_pair("scope", &scope);
            }
        }
        crate::logging::keep_out(std::slice::from_ref(&verifier));
        lock(&self.pending).insert(
            name.to_string(),
            Pending {
                server: name.to_string(),
                state,
                verifier,
                redirect_uri,
                expires: Instant::now() + PENDING_FOR,
            },
        );
        tracing::info!(mcp_server = %name, "a sign-in was started; it comes back to the admin listener's /oauth/callback within {} minutes", PENDING_FOR.as_secs() / 60);
        Ok(url.to_string())
    }

    /// The redirect came back with `query` (`code` and `state`, or
    /// `error`): the code exchanged for tokens. Returns the server's name.
    pub(crate) async fn finish(&self, query: &str) -> Result<String, String> {
        let pairs: BTreeMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        if let Some(code) = pairs.get("code") {
            crate::logging::keep_out(std::slice::from_ref(code));
        }
        let state = pairs.get("state").ok_or(
            "the redirect has no `state`: it is not the answer to a sign-in the sidecar started",
        )?;
        let pending = {
            let mut all = lock(&self.pending);
            let name = all
                .iter()
                .find(|(_, p)| constant_eq(p.state.as_bytes(), state.as_bytes()))
                .map(|(n, _)| n.clone());
            match name {
                Some(n) => all.remove(&n),
                None => None,
            }
        };
        let Some(pending) = pending else {
            return Err("the redirect's `state` matches no sign-in in progress: it was used already (a replayed redirect), it expired, or it was not started here; start again from the sign-in link".into());
        };
        let name = pending.server.clone();
        let link = self.link(&name).unwrap_or_default();
        if pending.expires <= Instant::now() {
            return Err(format!(
                "the sign-in to `{name}` took longer than {} minutes: start again at {link}",
                PENDING_FOR.as_secs() / 60
            ));
        }
        if let Some(error) = pairs.get("error") {
            let about = pairs
                .get("error_description")
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            return Err(format!(
                "the authorization server refused the sign-in to `{name}` ({error}{about}); start again at {link}"
            ));
        }
        let code = pairs
            .get("code")
            .ok_or("the redirect has neither `code` nor `error`")?;
        let auth = self
            .find(&name)
            .ok_or_else(|| format!("the MCP server `{name}` was removed meanwhile"))?;
        if let Some(iss) = pairs.get("iss") {
            let entry = auth.lock().entry.clone();
            if let Some(e) = entry
                && iss.trim_end_matches('/') != e.metadata.issuer.trim_end_matches('/')
            {
                return Err(format!(
                    "the redirect names issuer {iss}, not the one `{name}` signs in with (RFC 9207: a mix-up): refused"
                ));
            }
        }
        auth.exchange(code, &pending.verifier, &pending.redirect_uri)
            .await?;
        tracing::info!(mcp_server = %name, "signed in");
        Ok(name)
    }

    /// Signs out of `name`: its tokens revoked where the authorization
    /// server offers revocation (RFC 7009), then forgotten.
    pub(crate) async fn logout(&self, name: &str) -> Result<String, String> {
        let auth = self.find(name);
        let entry = self.store.get(name);
        let mut said = Vec::new();
        if let Some(e) = &entry
            && let (Some(tokens), Some(client)) = (&e.tokens, &e.client)
        {
            match &e.metadata.revocation_endpoint {
                Some(endpoint) => {
                    let options = auth.as_ref().map(|a| a.options.clone()).unwrap_or_default();
                    for (token, hint) in [
                        (tokens.refresh_token.as_ref(), "refresh_token"),
                        (Some(&tokens.access_token), "access_token"),
                    ] {
                        let Some(token) = token else { continue };
                        let r = revoke(endpoint, &options, client, token, hint).await;
                        said.push(match r {
                            Ok(()) => format!("{} revoked", hint.replace('_', " ")),
                            Err(why) => format!("the {} could not be revoked: {why}", hint.replace('_', " ")),
                        });
                    }
                }
                None => said.push("the authorization server offers no revocation (RFC 7009): the tokens were forgotten here".into()),
            }
        }
        if let Some(mut e) = entry {
            e.tokens = None;
            self.store.put(name, Some(e)).await?;
        }
        if let Some(a) = &auth {
            if let Some(e) = a.lock().entry.as_mut() {
                e.tokens = None;
            }
            a.set_needs(None);
        }
        if said.is_empty() {
            said.push("it was not signed in".into());
        }
        Ok(said.join("; "))
    }

    /// Every known server's sign-in, by name, for `auth list` when the
    /// daemon does not answer: what the file holds.
    pub(crate) fn stored(&self) -> BTreeMap<String, SignIn> {
        self.store
            .all()
            .into_iter()
            .map(|(n, e)| (n, sign_in_of(Some(&e), None, None)))
            .collect()
    }
}

/// One server's sign-in.
pub(crate) struct ServerAuth {
    pub name: String,
    url: Url,
    server_url: String,
    options: HttpOptions,
    hub: std::sync::Weak<OAuth>,
    state: Mutex<AuthState>,
    /// One refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// Told when a sign-in completed.
    pub signed_in: Notify,
}

#[derive(Default)]
struct AuthState {
    entry: Option<Entry>,
    /// The last `401`'s challenge.
    challenge: Option<Challenge>,
    /// Needs a sign-in, and why ("" when there is no more to say).
    needs: Option<String>,
    /// Cannot be signed in to as configured, and why.
    refused: Option<String>,
}

/// What to do after a `401`.
pub(crate) enum Unauthorized {
    /// The token was refreshed: connect again now.
    Retry,
    /// A sign-in is needed: the message says where.
    NeedsSignIn(String),
    /// No sign-in can work as configured: the reason.
    Refused(String),
}

impl ServerAuth {
    fn lock(&self) -> std::sync::MutexGuard<'_, AuthState> {
        lock(&self.state)
    }

    fn hub(&self) -> Result<Arc<OAuth>, String> {
        self.hub
            .upgrade()
            .ok_or_else(|| "the sidecar is stopping".to_string())
    }

    /// The sign-in as operators see it; `None` while nothing is known
    /// (never challenged, never signed in).
    pub(crate) fn status(&self) -> Option<SignIn> {
        let link = self.hub.upgrade().and_then(|h| h.link(&self.name));
        let st = self.lock();
        if let Some(why) = &st.refused {
            return Some(SignIn {
                state: "refused".into(),
                link: None,
                reason: Some(why.clone()),
                expires_at: None,
                refreshable: false,
            });
        }
        let signed_in = st.entry.as_ref().is_some_and(|e| e.tokens.is_some());
        if !signed_in && st.needs.is_none() {
            return None;
        }
        Some(sign_in_of(st.entry.as_ref(), st.needs.as_deref(), link))
    }

    /// Whether a call cannot be made until something is done about the
    /// sign-in (calls answer so).
    pub(crate) fn needs_sign_in(&self) -> bool {
        let st = self.lock();
        st.needs.is_some() || st.refused.is_some()
    }

    /// Whether the session waits for the user's sign-in rather than
    /// trying again on its backoff (a refused configuration is tried
    /// again: the service may change).
    pub(crate) fn waits_for_user(&self) -> bool {
        let st = self.lock();
        st.needs.is_some() && st.refused.is_none()
    }

    /// What a call answers while a sign-in is needed: short, for the
    /// model to relay.
    pub(crate) fn sign_in_message(&self) -> String {
        let st = self.lock();
        if let Some(why) = &st.refused {
            return format!(
                "the MCP server `{}` needs a sign-in that cannot be done as configured: {why}",
                self.name
            );
        }
        match self.hub.upgrade().and_then(|h| h.link(&self.name)) {
            Some(link) => format!("sign in to {} at {link}", self.name),
            None => format!(
                "sign in to {} with `neko-sidecar auth login {}`",
                self.name, self.name
            ),
        }
    }

    fn set_needs(&self, why: Option<String>) {
        let mut st = self.lock();
        st.needs = why;
    }

    /// A request was answered `401` with `header` (its WWW-Authenticate).
    pub(crate) fn challenged(&self, header: &str) {
        self.lock().challenge = Some(Challenge::parse(header));
    }

    pub(crate) fn take_challenge(&self) -> Option<Challenge> {
        self.lock().challenge.take()
    }

    /// The access token to send, refreshed first when it expires within
    /// `REFRESH_BEFORE`; `None` when there is none (or the refresh was
    /// refused: the server then needs a sign-in).
    pub(crate) async fn bearer(&self) -> Option<String> {
        let (token, expiring) = {
            let st = self.lock();
            let t = st.entry.as_ref()?.tokens.as_ref()?;
            let expiring = t
                .expires_at
                .is_some_and(|at| at <= now_secs() + REFRESH_BEFORE.as_secs());
            (
                t.access_token.clone(),
                expiring && t.refresh_token.is_some(),
            )
        };
        if !expiring {
            return Some(token);
        }
        match self.refresh(&token).await {
            Ok(()) => self
                .lock()
                .entry
                .as_ref()
                .and_then(|e| e.tokens.as_ref())
                .map(|t| t.access_token.clone()),
            // Not refreshed now (the authorization server unreachable):
            // the token may still be good for its last minute.
            Err(RefreshError::Transient(_)) => Some(token),
            Err(RefreshError::Refused(_)) => None,
        }
    }

    /// A request with the access token `sent` was answered `401`: the
    /// refreshed token to try once more with, or `None`.
    pub(crate) async fn renew(&self, sent: &str) -> Option<String> {
        self.refresh(sent).await.ok()?;
        let st = self.lock();
        let t = st.entry.as_ref()?.tokens.as_ref()?;
        (t.access_token != sent).then(|| t.access_token.clone())
    }

    /// After a connection failed with a `401` (`challenge`): refresh and
    /// retry, or say that a sign-in is needed, or why none can work.
    pub(crate) async fn unauthorized(&self, challenge: Challenge) -> Unauthorized {
        let sent = self
            .lock()
            .entry
            .as_ref()
            .and_then(|e| e.tokens.as_ref())
            .map(|t| t.access_token.clone());
        if let Some(sent) = sent {
            match self.refresh(&sent).await {
                Ok(()) => return Unauthorized::Retry,
                Err(RefreshError::Transient(why)) => {
                    return Unauthorized::NeedsSignIn(format!(
                        "the server refused its access token, and it could not be refreshed now ({why}): trying again"
                    ));
                }
                Err(RefreshError::Refused(_)) => {}
            }
        }
        self.lock().challenge = Some(challenge.clone());
        match self.discover(Some(&challenge)).await {
            Ok(()) => {
                let msg = self.sign_in_message();
                Unauthorized::NeedsSignIn(format!("the server needs a sign-in: {msg}"))
            }
            Err(why) => {
                self.lock().refused = Some(why.clone());
                Unauthorized::Refused(why)
            }
        }
    }

    /// Discovery, the client's identity, and the state "needs sign-in".
    async fn discover(&self, challenge: Option<&Challenge>) -> Result<(), String> {
        let hub = self.hub()?;
        let redirect = hub.callback();
        let entry = self.discovered(challenge, redirect.as_deref()).await?;
        let mut st = self.lock();
        st.refused = None;
        if st.needs.is_none() {
            st.needs = Some(String::new());
        }
        st.entry = Some(entry);
        Ok(())
    }

    /// The entry with fresh metadata and a client for `redirect` (when
    /// known; a configured client needs none to be known).
    async fn discovered(
        &self,
        challenge: Option<&Challenge>,
        redirect: Option<&str>,
    ) -> Result<Entry, String> {
        let client = self.client_for(&self.url)?;
        let challenge = challenge.cloned().or_else(|| self.lock().challenge.clone());
        // RFC 9728: the challenge's resource_metadata, else the well-known
        // URIs, path-aware first.
        let mut places = Vec::new();
        if let Some(rm) = challenge.as_ref().and_then(|c| c.resource_metadata.clone()) {
            match Url::parse(&rm) {
                Ok(u) => places.push(u),
                Err(e) => {
                    return Err(format!(
                        "the challenge's resource_metadata is not a URL ({e})"
                    ));
                }
            }
        }
        places.extend(discovery::resource_metadata_urls(&self.url));
        let mut found = None;
        for place in &places {
            if let Some(why) = discovery::endpoint_problem("protected resource metadata", place) {
                return Err(why);
            }
            if let Some(doc) = discovery::fetch_json(&client, place).await? {
                let doc: ResourceMetadata = serde_json::from_value(doc)
                    .map_err(|e| format!("its protected resource metadata cannot be read ({e})"))?;
                found = Some(doc);
                break;
            }
        }
        let Some(resource_doc) = found else {
            return Err("it answers 401 but offers no protected resource metadata (RFC 9728), which the MCP specification asks of it: the sidecar cannot find where to sign in".into());
        };
        let (issuer, resource) = discovery::check_resource(&resource_doc, &self.url)?;
        let as_client = self.client_for(&issuer)?;
        let mut metadata = None;
        for place in discovery::authorization_metadata_urls(&issuer) {
            if let Some(doc) = discovery::fetch_json(&as_client, &place).await? {
                let doc: ServerMetadata = serde_json::from_value(doc).map_err(|e| {
                    format!("its authorization server's metadata cannot be read ({e})")
                })?;
                metadata = Some(doc);
                break;
            }
        }
        let Some(metadata) = metadata else {
            return Err(format!(
                "its authorization server {} publishes no metadata (RFC 8414 or OpenID Connect discovery)",
                crate::manifest::remote::redact_url(issuer.as_str())
            ));
        };
        discovery::check_server(&metadata, &issuer)?;
        let previous = self
            .lock()
            .entry
            .clone()
            .filter(|e| e.metadata.issuer == metadata.issuer && e.resource == resource);
        let scopes_hint = challenge
            .as_ref()
            .and_then(|c| c.scope.clone())
            .or_else(|| resource_doc.scopes_supported.as_ref().map(|s| s.join(" ")));
        let mut entry = Entry {
            server_url: self.server_url.clone(),
            resource,
            metadata,
            client: previous.as_ref().and_then(|e| e.client.clone()),
            tokens: previous.and_then(|e| e.tokens),
        };
        entry.client = self
            .identity(&entry, redirect, scopes_hint.as_deref())
            .await?;
        self.lock().challenge = challenge.map(|mut c| {
            c.scope = scopes_hint;
            c
        });
        // Kept when it holds something to reuse: a registration, tokens.
        if let Some(hub) = self.hub.upgrade()
            && (entry.tokens.is_some() || entry.client.as_ref().is_some_and(|c| c.registered))
        {
            hub.store.put(&self.name, Some(entry.clone())).await?;
        }
        Ok(entry)
    }

    /// The client the authorization server knows us by: the configured
    /// one, else the one registered before (for the same redirect), else a
    /// new registration (RFC 7591), else why there is none. `None`: a
    /// registration is possible but waits for the redirect to be known
    /// (`check --probe` has no admin listener).
    async fn identity(
        &self,
        entry: &Entry,
        redirect: Option<&str>,
        scope: Option<&str>,
    ) -> Result<Option<Client>, String> {
        let o = &self.options.oauth;
        if let Some(id) = &o.client_id {
            return Ok(Some(Client {
                client_id: id.clone(),
                client_secret: o.client_secret.clone(),
                redirect_uri: redirect.unwrap_or_default().to_string(),
                registered: false,
            }));
        }
        if let Some(c) = &entry.client
            && c.registered
            && redirect.is_none_or(|r| r == c.redirect_uri)
        {
            return Ok(Some(c.clone()));
        }
        let Some(endpoint) = &entry.metadata.registration_endpoint else {
            return Err(format!(
                "this server needs a registered client: its authorization server offers no dynamic registration (RFC 7591); register one with the service and set `client_id` (and `client_secret = \"${{VAR}}\"`) in [mcp_server.oauth] of `{}`",
                self.name
            ));
        };
        let Some(redirect) = redirect else {
            return Ok(None);
        };
        let mut body = serde_json::json!({
            "client_name": CLIENT_NAME,
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        });
        if let Some(scope) = o
            .scopes
            .as_ref()
            .map(|s| s.join(" "))
            .or(scope.map(str::to_string))
        {
            body["scope"] = Json::String(scope);
        }
        let url = Url::parse(endpoint)
            .map_err(|e| format!("its registration endpoint is not a URL ({e})"))?;
        let client = self.client_for(&url)?;
        let resp = client.post(url).json(&body).send().await.map_err(|e| {
            format!(
                "the dynamic registration failed: {}",
                super::remote_http::chain(&e.without_url())
            )
        })?;
        let status = resp.status();
        let bytes = discovery::read_capped(resp, MAX_ANSWER_BYTES).await?;
        if !status.is_success() {
            return Err(format!(
                "the dynamic registration was refused (HTTP {status}{}): register a client with the service and set `client_id` in [mcp_server.oauth] of `{}`",
                oauth_error(&bytes),
                self.name
            ));
        }
        #[derive(Deserialize)]
        struct Registered {
            client_id: String,
            client_secret: Option<String>,
        }
        let r: Registered = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the dynamic registration's answer cannot be read ({e})"))?;
        if let Some(s) = &r.client_secret {
            crate::logging::keep_out(std::slice::from_ref(s));
        }
        tracing::info!(mcp_server = %self.name, "registered as a client of its authorization server (RFC 7591); kept for the next sign-ins");
        Ok(Some(Client {
            client_id: r.client_id,
            client_secret: r.client_secret,
            redirect_uri: redirect.to_string(),
            registered: true,
        }))
    }

    /// The scope to ask for: configured, else the challenge's, else the
    /// resource's `scopes_supported`.
    fn scope(&self, _entry: &Entry) -> Option<String> {
        if let Some(s) = &self.options.oauth.scopes {
            return Some(s.join(" "));
        }
        self.lock()
            .challenge
            .as_ref()
            .and_then(|c| c.scope.clone())
            .filter(|s| !s.is_empty())
    }

    /// The entry ready for a sign-in at `redirect`: discovered (again when
    /// needed) with a client registered for that redirect.
    async fn prepared(&self, redirect: &str) -> Result<Entry, String> {
        let current = self.lock().entry.clone();
        if let Some(e) = current
            && let Some(c) = &e.client
            && (c.redirect_uri == redirect || !c.registered)
        {
            return Ok(e);
        }
        let entry = self
            .discovered(None, Some(redirect))
            .await
            .inspect_err(|why| {
                self.lock().refused = Some(why.clone());
            })?;
        self.lock().entry = Some(entry.clone());
        Ok(entry)
    }

    /// The authorization code exchanged for tokens, kept.
    async fn exchange(&self, code: &str, verifier: &str, redirect_uri: &str) -> Result<(), String> {
        let entry = self.lock().entry.clone().ok_or("nothing was discovered")?;
        let client = entry.client.clone().ok_or("no client")?;
        let form = vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code.to_string()),
            ("redirect_uri", redirect_uri.to_string()),
            ("code_verifier", verifier.to_string()),
            ("resource", entry.resource.clone()),
        ];
        let tokens = self
            .token_request(&entry, &client, form, None)
            .await
            .map_err(|e| match e {
                RefreshError::Refused(w) | RefreshError::Transient(w) => {
                    format!("the authorization code could not be exchanged for tokens: {w}")
                }
            })?;
        self.keep(entry, tokens).await?;
        Ok(())
    }

    async fn keep(&self, mut entry: Entry, tokens: Tokens) -> Result<(), String> {
        entry.tokens = Some(tokens);
        let hub = self.hub()?;
        hub.store.put(&self.name, Some(entry.clone())).await?;
        {
            let mut st = self.lock();
            st.entry = Some(entry);
            st.needs = None;
            st.refused = None;
        }
        self.signed_in.notify_waiters();
        self.signed_in.notify_one();
        Ok(())
    }

    /// Refreshes the access token `sent` (unless another refresh already
    /// replaced it); a refused refresh forgets the tokens and marks the
    /// server as needing a sign-in.
    async fn refresh(&self, sent: &str) -> Result<(), RefreshError> {
        let _one = self.refreshing.lock().await;
        let entry = self.lock().entry.clone();
        let Some(entry) = entry else {
            return Err(RefreshError::Refused("not signed in".into()));
        };
        let Some(tokens) = entry.tokens.clone() else {
            return Err(RefreshError::Refused("not signed in".into()));
        };
        if tokens.access_token != sent {
            return Ok(()); // refreshed meanwhile
        }
        let Some(refresh_token) = tokens.refresh_token.clone() else {
            self.refused_refresh(&entry, "it gave no refresh token")
                .await;
            return Err(RefreshError::Refused("no refresh token".into()));
        };
        let client = entry
            .client
            .clone()
            .ok_or(RefreshError::Refused("no client".into()))?;
        let form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh_token.clone()),
            ("resource", entry.resource.clone()),
        ];
        match self
            .token_request(&entry, &client, form, Some(&refresh_token))
            .await
        {
            Ok(new) => {
                tracing::info!(mcp_server = %self.name, "access token refreshed");
                self.keep(entry, new).await.map_err(RefreshError::Transient)
            }
            Err(RefreshError::Refused(why)) => {
                self.refused_refresh(&entry, &why).await;
                Err(RefreshError::Refused(why))
            }
            Err(e) => Err(e),
        }
    }

    async fn refused_refresh(&self, entry: &Entry, why: &str) {
        tracing::warn!(mcp_server = %self.name, "its refresh was refused ({why}): it needs a new sign-in; its tools stay registered");
        let mut e = entry.clone();
        e.tokens = None;
        if let Some(hub) = self.hub.upgrade()
            && let Err(w) = hub.store.put(&self.name, Some(e.clone())).await
        {
            tracing::error!(mcp_server = %self.name, "{w}");
        }
        let mut st = self.lock();
        st.entry = Some(e);
        st.needs = Some(format!("its refresh was refused ({why})"));
    }

    /// POSTs `form` to the token endpoint with the client's
    /// authentication; the new tokens (a refresh token not rotated is
    /// kept: `keep_refresh`).
    async fn token_request(
        &self,
        entry: &Entry,
        client: &Client,
        form: Vec<(&'static str, String)>,
        keep_refresh: Option<&str>,
    ) -> Result<Tokens, RefreshError> {
        let url = Url::parse(&entry.metadata.token_endpoint)
            .map_err(|e| RefreshError::Refused(format!("its token endpoint is not a URL ({e})")))?;
        let http = self.client_for(&url).map_err(RefreshError::Transient)?;
        let resp = form_post(&http, url, client, form, uses_post(&entry.metadata))
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| RefreshError::Transient(super::remote_http::chain(&e.without_url())))?;
        let status = resp.status();
        let bytes = discovery::read_capped(resp, MAX_ANSWER_BYTES)
            .await
            .map_err(RefreshError::Transient)?;
        if status.is_client_error() {
            return Err(RefreshError::Refused(format!(
                "HTTP {status}{}",
                oauth_error(&bytes)
            )));
        }
        if !status.is_success() {
            return Err(RefreshError::Transient(format!("HTTP {status}")));
        }
        #[derive(Deserialize)]
        struct Answer {
            access_token: String,
            token_type: Option<String>,
            expires_in: Option<u64>,
            refresh_token: Option<String>,
            scope: Option<String>,
        }
        let a: Answer = serde_json::from_slice(&bytes)
            .map_err(|e| RefreshError::Refused(format!("its token answer cannot be read ({e})")))?;
        if a.token_type
            .as_deref()
            .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(RefreshError::Refused(format!(
                "it gave a token of type {}, not Bearer",
                a.token_type.unwrap_or_default()
            )));
        }
        let tokens = Tokens {
            access_token: a.access_token,
            refresh_token: a.refresh_token.or(keep_refresh.map(str::to_string)),
            expires_at: a.expires_in.map(|s| now_secs() + s),
            scope: a.scope,
        };
        let mut secrets = vec![tokens.access_token.clone()];
        secrets.extend(tokens.refresh_token.clone());
        crate::logging::keep_out(&secrets);
        Ok(tokens)
    }

    /// A client for requests to `url` with the server's TLS trust, proxy
    /// and timeouts.
    fn client_for(&self, url: &Url) -> Result<reqwest::Client, String> {
        crate::tls::server_client(url, &self.options).map(|c| c.http)
    }
}

enum RefreshError {
    /// The authorization server said no (4xx): a sign-in is needed.
    Refused(String),
    /// It could not be asked (network, 5xx): try again later.
    Transient(String),
}

/// A form POST to an authorization server with the client's
/// authentication: `client_id` always in the form (some servers, the
/// Python SDK's, find the client by it), a secret in the form when
/// `secret_in_form` (`client_secret_post`), else as HTTP Basic.
fn form_post(
    http: &reqwest::Client,
    url: Url,
    client: &Client,
    mut form: Vec<(&'static str, String)>,
    secret_in_form: bool,
) -> reqwest::RequestBuilder {
    let mut req = http.post(url);
    form.push(("client_id", client.client_id.clone()));
    if let Some(secret) = &client.client_secret {
        if secret_in_form {
            form.push(("client_secret", secret.clone()));
        } else {
            req = req.basic_auth(form_encode(&client.client_id), Some(form_encode(secret)));
        }
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    req.header(
        http::header::CONTENT_TYPE,
        "application/x-www-form-urlencoded",
    )
    .body(body)
}

/// An RFC 7009 revocation of `token`.
async fn revoke(
    endpoint: &str,
    options: &HttpOptions,
    client: &Client,
    token: &str,
    hint: &str,
) -> Result<(), String> {
    let url = Url::parse(endpoint).map_err(|e| format!("not a URL ({e})"))?;
    let http = crate::tls::server_client(&url, options)?.http;
    let form = vec![
        ("token", token.to_string()),
        ("token_type_hint", hint.to_string()),
    ];
    // RFC 7009: the client authenticates as at the token endpoint; a
    // secret goes in the header (the form's `client_id` names it).
    let resp = form_post(&http, url, client, form, false)
        .send()
        .await
        .map_err(|e| super::remote_http::chain(&e.without_url()))?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {}", resp.status()))
    }
}

/// The sign-in shown for `entry`, with `needs` (a reason, possibly empty)
/// when a sign-in is needed.
fn sign_in_of(entry: Option<&Entry>, needs: Option<&str>, link: Option<String>) -> SignIn {
    let tokens = entry.and_then(|e| e.tokens.as_ref());
    match (needs, tokens) {
        (None, Some(t)) => SignIn {
            state: "signed_in".into(),
            link: None,
            reason: None,
            expires_at: t.expires_at,
            refreshable: t.refresh_token.is_some(),
        },
        (needs, _) => SignIn {
            state: "needs_sign_in".into(),
            link,
            reason: needs.filter(|n| !n.is_empty()).map(str::to_string),
            expires_at: None,
            refreshable: false,
        },
    }
}

/// Whether the token endpoint wants the client's secret in the form
/// (`client_secret_post` offered, `client_secret_basic` not).
fn uses_post(m: &ServerMetadata) -> bool {
    m.token_endpoint_auth_methods_supported
        .as_ref()
        .is_some_and(|a| {
            a.iter().any(|x| x == "client_secret_post")
                && !a.iter().any(|x| x == "client_secret_basic")
        })
}

/// RFC 6749, 2.3.1: the client's id and secret are form-encoded before
/// they go into HTTP Basic.
fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// An OAuth error answer's `error` (and description), as a clause.
fn oauth_error(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<Json>(body) else {
        return String::new();
    };
    match (
        v.get("error").and_then(Json::as_str),
        v.get("error_description").and_then(Json::as_str),
    ) {
        (Some(e), Some(d)) => format!(": {e}, {}", d.chars().take(200).collect::<String>()),
        (Some(e), None) => format!(": {e}"),
        _ => String::new(),
    }
}

/// `n` random bytes as base64url without padding (a PKCE verifier of 43
/// characters for 32 bytes; RFC 7636, 4.1).
fn random_text(n: usize) -> Result<String, String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| format!("the system gives no randomness ({e})"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Compares without stopping at the first difference.
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pkce_verifier_is_43_characters_of_base64url_and_its_challenge_the_rfc_example() {
        let v = random_text(32).unwrap();
        assert_eq!(v.len(), 43);
        assert!(
            v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        // RFC 7636, appendix B.
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
            sha2::Sha256::digest(b"dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
        );
        assert_eq!(challenge, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }

    #[test]
    fn states_compare_whole_and_secrets_in_basic_auth_are_form_encoded() {
        assert!(constant_eq(b"abc", b"abc"));
        assert!(!constant_eq(b"abc", b"abd"));
        assert!(!constant_eq(b"abc", b"ab"));
        assert_eq!(form_encode("a b:c"), "a+b%3Ac");
    }

    #[test]
    fn a_refresh_token_not_rotated_is_kept_and_the_shown_state_never_has_a_token() {
        let e = Entry {
            server_url: "https://m.example/mcp".into(),
            resource: "https://m.example/mcp".into(),
            metadata: ServerMetadata {
                issuer: "https://a.example".into(),
                authorization_endpoint: "https://a.example/authorize".into(),
                token_endpoint: "https://a.example/token".into(),
                registration_endpoint: None,
                revocation_endpoint: None,
                code_challenge_methods_supported: Some(vec!["S256".into()]),
                token_endpoint_auth_methods_supported: None,
                scopes_supported: None,
            },
            client: None,
            tokens: Some(Tokens {
                access_token: "planted-access".into(),
                refresh_token: Some("planted-refresh".into()),
                expires_at: Some(42),
                scope: None,
            }),
        };
        let s = sign_in_of(Some(&e), None, None);
        assert_eq!(
            (s.state.as_str(), s.expires_at, s.refreshable),
            ("signed_in", Some(42), true)
        );
        let shown = serde_json::to_string(&s).unwrap();
        assert!(!shown.contains("planted"), "{shown}");
        let s = sign_in_of(
            Some(&e),
            Some("its refresh was refused"),
            Some("http://l/".into()),
        );
        assert_eq!(s.state, "needs_sign_in");
        assert_eq!(s.link.as_deref(), Some("http://l/"));
    }

    /// A hub with one server `srv` whose metadata and configured client
    /// are known already, so a sign-in starts without the network; its
    /// authorization server is `issuer` on a refused loopback port.
    fn hub_with_one_server(dir: &std::path::Path, issuer: &str) -> Arc<OAuth> {
        let hub = OAuth::new(Store::at(dir.join("oauth.json")));
        hub.set_admin("127.0.0.1:48999".parse().unwrap());
        let url = "http://127.0.0.1:9/mcp";
        let auth = Arc::new(ServerAuth {
            name: "srv".into(),
            url: Url::parse(url).unwrap(),
            server_url: url.into(),
            options: HttpOptions::default(),
            hub: Arc::downgrade(&hub),
            state: Mutex::new(AuthState {
                entry: Some(Entry {
                    server_url: url.into(),
                    resource: url.into(),
                    metadata: ServerMetadata {
                        issuer: issuer.into(),
                        authorization_endpoint: format!("{issuer}/authorize"),
                        token_endpoint: format!("{issuer}/token"),
                        registration_endpoint: None,
                        revocation_endpoint: None,
                        code_challenge_methods_supported: Some(vec!["S256".into()]),
                        token_endpoint_auth_methods_supported: None,
                        scopes_supported: None,
                    },
                    client: Some(Client {
                        client_id: "configured".into(),
                        client_secret: None,
                        redirect_uri: String::new(),
                        registered: false,
                    }),
                    tokens: None,
                }),
                needs: Some(String::new()),
                ..AuthState::default()
            }),
            refreshing: tokio::sync::Mutex::new(()),
            signed_in: Notify::new(),
        });
        lock(&hub.servers).insert("srv".into(), auth);
        hub
    }

    /// The `state` of the authorization URL a sign-in started with.
    fn state_of(authorize: &str) -> String {
        Url::parse(authorize)
            .unwrap()
            .query_pairs()
            .find(|(k, _)| k == "state")
            .unwrap()
            .1
            .into_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_sign_in_older_than_ten_minutes_is_refused_with_its_reason_and_gone() {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub_with_one_server(dir.path(), "http://127.0.0.1:9");
        // Just within its time, the redirect gets past the expiry (to the
        // issuer check, which a wrong `iss` fails without the network).
        let state = state_of(&hub.start("srv").await.unwrap());
        tokio::time::advance(PENDING_FOR - Duration::from_secs(1)).await;
        let e = hub
            .finish(&format!("state={state}&code=c&iss=http://other.example"))
            .await
            .unwrap_err();
        assert!(e.contains("RFC 9207"), "{e}");

        let state = state_of(&hub.start("srv").await.unwrap());
        tokio::time::advance(PENDING_FOR).await;
        let e = hub
            .finish(&format!("state={state}&code=c"))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "the sign-in to `srv` took longer than 10 minutes: start again at http://127.0.0.1:48999/oauth/login/srv"
        );
        // Used up: the same redirect again matches nothing.
        let e = hub
            .finish(&format!("state={state}&code=c"))
            .await
            .unwrap_err();
        assert!(e.contains("matches no sign-in in progress"), "{e}");
    }

    #[tokio::test]
    async fn a_redirect_naming_another_issuer_is_refused_before_any_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub_with_one_server(dir.path(), "http://127.0.0.1:9");
        for iss in [
            "http://127.0.0.1:9/elsewhere",
            "https://127.0.0.1:9",
            "http://evil.example",
        ] {
            let state = state_of(&hub.start("srv").await.unwrap());
            let e = hub
                .finish(&format!(
                    "state={state}&code=planted-code&iss={}",
                    form_encode(iss)
                ))
                .await
                .unwrap_err();
            assert_eq!(
                e,
                format!(
                    "the redirect names issuer {iss}, not the one `srv` signs in with (RFC 9207: a mix-up): refused"
                )
            );
        }
        // The issuer it signs in with (a trailing slash aside) passes the
        // check and goes on to the exchange, which finds nobody at the
        // token endpoint; so does a redirect without `iss`, which RFC 9207
        // lets a server leave out.
        for tail in ["&iss=http%3A%2F%2F127.0.0.1%3A9%2F", ""] {
            let state = state_of(&hub.start("srv").await.unwrap());
            let e = hub
                .finish(&format!("state={state}&code=c{tail}"))
                .await
                .unwrap_err();
            assert!(
                !e.contains("RFC 9207") && !e.contains("issuer"),
                "{tail}: {e}"
            );
        }
    }
}
