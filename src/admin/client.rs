//! Finding and reading a running sidecar's admin endpoints, for the
//! `status`, `call` and `auth` commands.
//!
//! The address comes from `--admin`, or else from the agent config's
//! `[admin] listen`. It reads, but for `auth`'s sign-in routes (a sign-in
//! started or finished, a logout), which the sidecar carries out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::view::StatusView;
use crate::config;
use crate::diag::root_cause;

/// A live sidecar answers at once; this only bounds a wedged one.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the admin endpoints could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("cannot use the agent config {path}:\n{problems}")]
    Config { path: PathBuf, problems: String },
    #[error(
        "the admin endpoints are turned off in {0} ([admin] listen = \"\"); turn them on, or pass --admin URL"
    )]
    AdminDisabled(PathBuf),
    #[error(
        "{0} has [admin] listen on port 0 (a new port at every start), so the port cannot be known from the config; pass --admin URL"
    )]
    EphemeralPort(PathBuf),
    #[error("--admin {0:?} is not an http:// URL or a HOST:PORT")]
    BadAdminUrl(String),
    #[error(
        "cannot reach the sidecar's admin endpoint at {url}: {reason} (is the sidecar running, with this config?)"
    )]
    Unreachable { url: String, reason: String },
    #[error("the admin endpoint at {url} answered {what}")]
    BadAnswer { url: String, what: String },
    #[error(
        "the process answering at {url} is not the sidecar of {config}: it does not know the identity token in {token_file} (another local process may have taken the admin port); nothing was sent to it"
    )]
    NotOurSidecar {
        url: String,
        config: PathBuf,
        token_file: PathBuf,
    },
    #[error(
        "cannot read the sidecar's identity token {path} ([admin] token_file of {config}): {reason}; run this as the sidecar's user or root, or start the sidecar first"
    )]
    TokenFile {
        path: PathBuf,
        config: PathBuf,
        reason: String,
    },
    #[error("cannot set up an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// The admin base URL (`http://HOST:PORT`, no trailing slash): `admin` when
/// given, else the config's `[admin] listen`.
pub(crate) fn admin_url(config_path: &Path, admin: Option<&str>) -> Result<String, ClientError> {
    if let Some(given) = admin {
        return normalise(given);
    }
    let (cfg, diags) = config::load(config_path);
    let Some(cfg) = cfg else {
        let problems: Vec<String> = diags
            .iter()
            .filter(|d| d.is_error())
            .map(|d| format!("  {d}"))
            .collect();
        return Err(ClientError::Config {
            path: config_path.to_path_buf(),
            problems: problems.join("\n"),
        });
    };
    match cfg.admin.listen {
        None => Err(ClientError::AdminDisabled(config_path.to_path_buf())),
        Some(addr) if addr.port() == 0 => {
            Err(ClientError::EphemeralPort(config_path.to_path_buf()))
        }
        Some(addr) => Ok(format!("http://{addr}")),
    }
}

/// The config's `[admin] token_file`, when the config reads and sets one.
pub(crate) fn token_file(config_path: &Path) -> Option<PathBuf> {
    config::load(config_path).0?.admin.token_file
}

fn normalise(given: &str) -> Result<String, ClientError> {
    let with_scheme = if given.contains("://") {
        given.to_owned()
    } else {
        format!("http://{given}")
    };
    match url::Url::parse(&with_scheme) {
        Ok(u) if u.scheme() == "http" && u.host().is_some() => {
            Ok(with_scheme.trim_end_matches('/').to_owned())
        }
        _ => Err(ClientError::BadAdminUrl(given.to_owned())),
    }
}

/// Reads a sidecar's admin endpoints.
#[derive(Debug, Clone)]
pub(crate) struct AdminClient {
    base: String,
    http: reqwest::Client,
    /// For the sign-in routes, whose redirects are the answer.
    no_redirect: reqwest::Client,
}

impl AdminClient {
    pub(crate) fn new(base: impl Into<String>) -> Result<Self, ClientError> {
        let http = crate::tls::plain_http()
            .timeout(REQUEST_TIMEOUT)
            // The sidecar is on this machine; a proxy would only get in the way.
            .no_proxy()
            .build()
            .map_err(ClientError::Client)?;
        let no_redirect = crate::tls::plain_http()
            .timeout(REQUEST_TIMEOUT * 6)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(ClientError::Client)?;
        Ok(Self {
            base: base.into(),
            http,
            no_redirect,
        })
    }

    /// Checks that the process at the admin address knows the identity
    /// token of `token_file` (see `identity`).
    pub(crate) async fn verify(&self, config: &Path, token_file: &Path) -> Result<(), ClientError> {
        let token =
            super::identity::read_token_file(token_file).map_err(|e| ClientError::TokenFile {
                path: token_file.to_path_buf(),
                config: config.to_path_buf(),
                reason: e.to_string(),
            })?;
        let challenge = super::identity::challenge().ok_or_else(|| ClientError::BadAnswer {
            url: self.base.clone(),
            what: "nothing: this system gave no randomness for a challenge".into(),
        })?;
        let url = format!("{}/identity?challenge={challenge}", self.base);
        let not_ours = || ClientError::NotOurSidecar {
            url: self.base.clone(),
            config: config.to_path_buf(),
            token_file: token_file.to_path_buf(),
        };
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| ClientError::Unreachable {
                url: self.base.clone(),
                reason: root_cause(&e),
            })?;
        if !resp.status().is_success() {
            return Err(not_ours());
        }
        let answer: serde_json::Value = resp.json().await.map_err(|_| not_ours())?;
        let expected = super::identity::proof(&token, &challenge);
        if answer["proof"].as_str() == Some(expected.as_str()) {
            Ok(())
        } else {
            Err(not_ours())
        }
    }

    /// GETs `url` without following a redirect: the status, the
    /// `Location` and the body.
    pub(crate) async fn get_no_redirect(
        &self,
        url: &str,
    ) -> Result<(u16, Option<String>, String), ClientError> {
        let unreachable = |e: reqwest::Error| ClientError::Unreachable {
            url: crate::manifest::remote::redact_url(url),
            reason: root_cause(&e.without_url()),
        };
        let resp = self
            .no_redirect
            .get(url)
            .send()
            .await
            .map_err(unreachable)?;
        let code = resp.status().as_u16();
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = resp.text().await.map_err(unreachable)?;
        Ok((code, location, body))
    }

    /// POSTs to `url` with no body: the status and the body.
    pub(crate) async fn post(&self, url: &str) -> Result<(u16, String), ClientError> {
        let unreachable = |e: reqwest::Error| ClientError::Unreachable {
            url: url.to_string(),
            reason: root_cause(&e),
        };
        let resp = self.http.post(url).send().await.map_err(unreachable)?;
        let code = resp.status().as_u16();
        Ok((code, resp.text().await.map_err(unreachable)?))
    }

    /// `GET /status`, as its text (for `--json`) and read.
    pub(crate) async fn status(&self) -> Result<(String, StatusView), ClientError> {
        let url = format!("{}/status", self.base);
        let unreachable = |e: reqwest::Error| ClientError::Unreachable {
            url: url.clone(),
            reason: root_cause(&e),
        };
        let resp = self.http.get(&url).send().await.map_err(unreachable)?;
        let code = resp.status();
        let text = resp.text().await.map_err(unreachable)?;
        if !code.is_success() {
            let head: String = text.trim().chars().take(200).collect();
            return Err(ClientError::BadAnswer {
                url,
                what: format!("HTTP {code}: {head}"),
            });
        }
        let view = serde_json::from_str(&text).map_err(|e| ClientError::BadAnswer {
            url: url.clone(),
            what: format!("a document that is not a sidecar status ({e})"),
        })?;
        Ok((text, view))
    }

    /// The call history (`POST /ui/calls`), as its text. The route wants
    /// the inspector page's token and Origin, against other web pages; a
    /// program on this machine gets the token as the page does, from `/`.
    pub(crate) async fn calls(&self) -> Result<String, ClientError> {
        let page_url = format!("{}/", self.base);
        let page = self.text(self.http.get(&page_url), &page_url).await?;
        let token = page_token(&page).ok_or_else(|| ClientError::BadAnswer {
            url: page_url.clone(),
            what: "a page without the inspector's token (a sidecar of another version?)".into(),
        })?;
        let url = format!("{}/ui/calls", self.base);
        let req = self
            .http
            .post(&url)
            .header("origin", &self.base)
            .header(super::inspector::TOKEN_HEADER, token)
            .header("content-type", "application/json")
            .body("{}");
        self.text(req, &url).await
    }

    /// The body of a 2xx answer to `req`, or why there is none.
    async fn text(&self, req: reqwest::RequestBuilder, url: &str) -> Result<String, ClientError> {
        let unreachable = |e: reqwest::Error| ClientError::Unreachable {
            url: url.to_owned(),
            reason: root_cause(&e),
        };
        let resp = req.send().await.map_err(unreachable)?;
        let code = resp.status();
        let text = resp.text().await.map_err(unreachable)?;
        if !code.is_success() {
            let head: String = text.trim().chars().take(200).collect();
            return Err(ClientError::BadAnswer {
                url: url.to_owned(),
                what: format!("HTTP {code}: {head}"),
            });
        }
        Ok(text)
    }
}

/// The token in the inspector page's `<meta name="neko-token">`; `None`
/// when the page has none (or an empty one: a sidecar without randomness).
pub(crate) fn page_token(page: &str) -> Option<&str> {
    let key = r#"<meta name="neko-token" content=""#;
    let start = page.find(key)? + key.len();
    let len = page[start..].find('"')?;
    Some(&page[start..start + len]).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_urls_take_a_scheme_and_lose_the_trailing_slash() {
        assert_eq!(
            normalise("127.0.0.1:48931").unwrap(),
            "http://127.0.0.1:48931"
        );
        assert_eq!(normalise("http://[::1]:9/").unwrap(), "http://[::1]:9");
        assert!(normalise("https://127.0.0.1:1").is_err());
        assert!(normalise("::").is_err());
    }

    #[test]
    fn the_config_gives_the_address_or_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            let p = dir.path().join("agent.toml");
            std::fs::write(&p, text).unwrap();
            p
        };
        let p = write("source = \"plugin:t\"\n");
        assert_eq!(admin_url(&p, None).unwrap(), "http://127.0.0.1:48931");
        let p = write("source = \"plugin:t\"\n[admin]\nlisten = \"127.0.0.1:5\"\n");
        assert_eq!(admin_url(&p, None).unwrap(), "http://127.0.0.1:5");
        let p = write("source = \"plugin:t\"\n[admin]\nlisten = \"\"\n");
        assert!(matches!(
            admin_url(&p, None),
            Err(ClientError::AdminDisabled(_))
        ));
        let p = write("source = \"plugin:t\"\n[admin]\nlisten = \"127.0.0.1:0\"\n");
        assert!(matches!(
            admin_url(&p, None),
            Err(ClientError::EphemeralPort(_))
        ));
        let p = write("sauce = 1\n");
        let err = admin_url(&p, None).unwrap_err().to_string();
        assert!(err.contains("agent.toml"), "{err}");
        // --admin wins without reading the config at all.
        assert_eq!(
            admin_url(Path::new("/nonexistent"), Some("127.0.0.1:7")).unwrap(),
            "http://127.0.0.1:7"
        );
    }
}
