//! What a `url` MCP server may be and how it is shown: which URLs may be
//! reached (`reach_problem`), the client settings of its table
//! (`read_http_settings`: `ca_file`, `proxy`, `connect_timeout_seconds`,
//! `read_timeout_seconds`), and the URL with its secrets left out
//! (`redact_url`), the only form in which a URL leaves the daemon.
//!
//! An `https` URL to any host is allowed: the user chose the service in a
//! file only they can edit, and whoever can edit it can already start
//! programs. Plain `http` off loopback stays refused unless
//! `allow_remote_handlers` is set, because the headers (an API key) would
//! travel in clear text.

use std::path::Path;
use std::time::Duration;

use super::fields::expand;
use super::{
    DEFAULT_CONNECT_TIMEOUT_SECONDS, DEFAULT_READ_TIMEOUT_SECONDS, HttpOptions, OAuthOptions,
    ProxySetting,
};
use crate::config::{absolutize, runtime_path};
use crate::contract::url_host_is_loopback;
use crate::tomldoc::TableReader;

/// The longest connect or read timeout allowed: an hour.
const MAX_TIMEOUT_SECONDS: f64 = 3600.0;

/// Why an MCP server at `url` may not be reached, or `None` if it may.
pub(crate) fn reach_problem(url: &url::Url, allow_remote_handlers: bool) -> Option<String> {
    match url.scheme() {
        "https" => None,
        "http" if url_host_is_loopback(url) || allow_remote_handlers => None,
        "http" => Some(
            "it uses plain http to a host that is not loopback, so its headers (an API key) would travel in clear text: use https, or set allow_remote_handlers = true in the agent config to allow it".to_string(),
        ),
        other => Some(format!(
            "its URL has scheme `{other}`: an MCP server is reached over https, or http on loopback"
        )),
    }
}

/// `url` as it may be shown: a query's values and a password replaced by
/// `…` (`https://host/sse?key=…`), the rest kept. The one rule for every
/// URL the daemon shows (the model's text, `/status`, the inspector, the
/// log, `check`): MCP servers', http handlers', main_server's, a proxy's.
pub(crate) fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        // Not a URL: keep what is before a query, never the query.
        return match url.split_once('?') {
            Some((head, _)) => format!("{head}?…"),
            None => url.to_string(),
        };
    };
    if parsed.password().is_none() && parsed.query().is_none() {
        // Nothing secret: shown as written (no trailing `/` added).
        return url.to_string();
    }
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("…"));
    }
    if let Some(query) = parsed.query() {
        let redacted: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) => format!("{k}=…"),
                None => "…".to_string(),
            })
            .collect();
        parsed.set_query(Some(&redacted.join("&")));
    }
    // `Url` percent-encodes the ellipsis; show it as typed.
    parsed.to_string().replace("%E2%80%A6", "…")
}

/// A command-line word as it may be shown: a URL in it (the whole word, or
/// the value of `--flag=URL`) redacted as [`redact_url`] does, the rest kept.
pub(crate) fn redact_word(word: &str) -> String {
    if !word.contains("://") {
        return word.to_string();
    }
    let (flag, value) = match word.split_once('=') {
        Some((f, v)) if v.contains("://") && !f.contains("://") => (Some(f), v),
        _ => (None, word),
    };
    let shown = redact_url(value);
    match flag {
        Some(f) => format!("{f}={shown}"),
        None => shown,
    }
}

/// The parts of `url` that are secret and must be scrubbed from any text
/// the daemon shows: each query value and the password.
pub(crate) fn url_secrets(url: &str) -> Vec<String> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    if let Some(q) = parsed.query() {
        out.push(q.to_string());
        for pair in q.split('&') {
            if let Some((_, v)) = pair.split_once('=') {
                out.push(v.to_string());
            }
        }
        for (_, v) in parsed.query_pairs() {
            out.push(v.into_owned());
        }
    }
    if let Some(p) = parsed.password() {
        out.push(p.to_string());
    }
    out
}

/// Everything of a `url` server that must never be shown: its header
/// values (and their words, as "Bearer KEY" may be quoted as "KEY"), its
/// URL's query values and password. Values of fewer than 4 characters are
/// left out: scrubbing "1" would mangle every number of a text.
pub(crate) fn secrets_of(
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = url_secrets(url);
    for v in headers.values() {
        out.push(v.clone());
        out.extend(v.split_whitespace().map(str::to_string));
    }
    out.retain(|s| s.chars().count() >= 4);
    // Longest first, so that a value is scrubbed whole before its parts.
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// `text` with each of `secrets` replaced by `…`.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "…");
        }
    }
    out
}

/// The `url` of a table with `${VAR}` expanded, as in `headers`.
pub(super) fn expand_url(text: &str) -> Result<String, String> {
    expand(text, |var| std::env::var(var).ok())
}

/// `ca_file`, `proxy`, `connect_timeout_seconds`, `read_timeout_seconds`
/// of a `url` server's table; `None` after an error (located in `r`).
pub(super) fn read_http_settings(r: &mut TableReader<'_, '_>, base: &Path) -> Option<HttpOptions> {
    let mut ok = true;
    let ca_file = match r.string("ca_file") {
        Some((c, sp)) => {
            let p = absolutize(base, &c);
            if p.is_file() {
                Some(runtime_path(&p))
            } else {
                let msg = format!(
                    "`ca_file` \"{c}\" of {} is not a file ({}): give the PEM file of the CA that signed the server's certificate",
                    r.what,
                    p.display()
                );
                r.error(&sp, msg);
                ok = false;
                None
            }
        }
        None if r.get("ca_file").is_some() => {
            ok = false;
            None
        }
        None => None,
    };
    let proxy = match r.get("proxy").map(|i| i.get_ref()) {
        None => ProxySetting::System,
        Some(toml::de::DeValue::Boolean(false)) => ProxySetting::Off,
        Some(toml::de::DeValue::String(_)) => {
            let (text, sp) = r.string("proxy")?;
            match expand_url(&text).map_err(|e| e.to_string()).and_then(|u| {
                let parsed = url::Url::parse(&u).map_err(|e| format!("not a URL ({e})"))?;
                match parsed.scheme() {
                    "http" | "https" | "socks5" | "socks5h" => Ok(u),
                    s => Err(format!("scheme `{s}` is not a proxy's")),
                }
            }) {
                Ok(u) => ProxySetting::Url(u),
                Err(why) => {
                    let msg = format!(
                        "`proxy` of {} is not usable: {why}; allowed: a proxy's URL such as \"http://127.0.0.1:3128\", or false to reach the server directly",
                        r.what
                    );
                    r.error(&sp, msg);
                    ok = false;
                    ProxySetting::System
                }
            }
        }
        Some(_) => {
            let sp = r.get("proxy").map(|i| i.span()).unwrap_or_default();
            let msg = format!(
                "`proxy` of {} must be a proxy's URL (e.g. \"http://127.0.0.1:3128\") or false; leave it out to use HTTPS_PROXY/ALL_PROXY/NO_PROXY and the system's settings",
                r.what
            );
            r.error(&sp, msg);
            ok = false;
            ProxySetting::System
        }
    };
    let connect = read_seconds(
        r,
        "connect_timeout_seconds",
        DEFAULT_CONNECT_TIMEOUT_SECONDS,
    );
    let read = read_seconds(r, "read_timeout_seconds", DEFAULT_READ_TIMEOUT_SECONDS);
    let oauth = read_oauth(r);
    if !ok {
        return None;
    }
    Some(HttpOptions {
        ca_file,
        proxy,
        connect_timeout: connect?,
        read_timeout: read?,
        oauth: oauth?,
    })
}

/// The keys of `[mcp_server.oauth]`.
const OAUTH_KEYS: &[&str] = &["client_id", "client_secret", "scopes"];

/// `oauth`: absent (sign in when asked, the client registered
/// dynamically), `false` (never), `true` (the default said), or a table
/// with `client_id`, `client_secret` (only as `${VAR}`: a secret is never
/// written in a manifest) and `scopes`; `None` after an error.
pub(super) fn read_oauth(r: &mut TableReader<'_, '_>) -> Option<OAuthOptions> {
    let what = r.what.clone();
    let Some(item) = r.get("oauth") else {
        return Some(OAuthOptions::default());
    };
    let table = match item.get_ref() {
        toml::de::DeValue::Boolean(b) => {
            return Some(OAuthOptions {
                enabled: *b,
                ..OAuthOptions::default()
            });
        }
        toml::de::DeValue::Table(t) => t,
        other => {
            let msg = format!(
                "`oauth` of {what} must be false (never sign in), or a table with client_id, client_secret and scopes, found {}",
                crate::tomldoc::type_name(other)
            );
            r.error(&item.span(), msg);
            return None;
        }
    };
    let mut t = TableReader::new(
        r.src,
        table,
        item.span(),
        format!("`oauth` of {what}"),
        r.diags,
    );
    let before = t.diags.iter().filter(|d| d.is_error()).count();
    t.deny_unknown(OAUTH_KEYS);
    let client_id = match t.string("client_id") {
        Some((id, sp)) => match expand_url(&id) {
            Ok(id) if !id.trim().is_empty() && !id.contains(['\0', '\r', '\n']) => Some(id),
            Ok(_) => {
                let msg = format!(
                    "`client_id` of {} is empty or holds a line break: give the client ID the service registered for you, or leave it out to register one dynamically",
                    t.what
                );
                t.error(&sp, msg);
                None
            }
            Err(why) => {
                let msg = format!("`client_id` of {}: {why}", t.what);
                t.error(&sp, msg);
                None
            }
        },
        None => None,
    };
    let client_secret = match t.string("client_secret") {
        Some((text, sp)) if !text.contains("${") => {
            let msg = format!(
                "`client_secret` of {} is written out: a secret stays out of the manifest; write client_secret = \"${{VAR}}\" and set VAR in the sidecar's environment",
                t.what
            );
            t.error(&sp, msg);
            None
        }
        Some((text, sp)) => match expand_url(&text) {
            Ok(secret) if !secret.is_empty() => Some(secret),
            Ok(_) => {
                let msg = format!("`client_secret` of {} is empty once expanded", t.what);
                t.error(&sp, msg);
                None
            }
            Err(why) => {
                let msg = format!("`client_secret` of {}: {why}", t.what);
                t.error(&sp, msg);
                None
            }
        },
        None => None,
    };
    if client_secret.is_some() && client_id.is_none() && t.get("client_id").is_none() {
        let sp = t.get("client_secret").map(|i| i.span()).unwrap_or_default();
        let msg = format!(
            "`client_secret` of {} needs `client_id`: the secret belongs to a registered client",
            t.what
        );
        t.error(&sp, msg);
    }
    let scopes = match t.string_array("scopes") {
        Some((list, sp)) => {
            let bad = list.iter().find(|(s, _)| {
                s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\')
            });
            match bad {
                Some((s, _)) => {
                    let msg = format!(
                        "scope \"{s}\" in `scopes` of {} is not a scope: scopes are non-empty words without spaces or quotes (RFC 6749, 3.3)",
                        t.what
                    );
                    t.error(&sp, msg);
                    None
                }
                None => Some(list.into_iter().map(|(s, _)| s).collect()),
            }
        }
        None => None,
    };
    let failed = t.diags.iter().filter(|d| d.is_error()).count() > before;
    (!failed).then_some(OAuthOptions {
        enabled: true,
        client_id,
        client_secret,
        scopes,
    })
}

fn read_seconds(r: &mut TableReader<'_, '_>, key: &str, default: f64) -> Option<Duration> {
    match r.number(key) {
        Some((t, sp)) if !(t > 0.0 && t <= MAX_TIMEOUT_SECONDS) => {
            let msg = format!(
                "`{key}` of {} is {t}: allowed values are greater than 0 and at most {MAX_TIMEOUT_SECONDS}",
                r.what
            );
            r.error(&sp, msg);
            None
        }
        Some((t, _)) => Some(Duration::from_secs_f64(t)),
        None if r.get(key).is_some() => None,
        None => Some(Duration::from_secs_f64(default)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_and_passwords_are_left_out() {
        assert_eq!(
            redact_url("https://maps.example/sse?key=abc123&x=1"),
            "https://maps.example/sse?key=…&x=…"
        );
        assert_eq!(
            redact_url("http://u:pw@127.0.0.1:1/mcp"),
            "http://u:…@127.0.0.1:1/mcp"
        );
        assert_eq!(redact_url("https://h/mcp"), "https://h/mcp");
        let s = url_secrets("https://h/sse?key=abc%2B1");
        assert!(s.contains(&"abc+1".to_string()) && s.contains(&"abc%2B1".to_string()));
    }

    #[test]
    fn https_anywhere_plain_http_on_loopback_only() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert_eq!(reach_problem(&u("https://maps.example/sse"), false), None);
        assert_eq!(reach_problem(&u("http://127.0.0.1:9/mcp"), false), None);
        let why = reach_problem(&u("http://maps.example/sse"), false).unwrap();
        assert!(why.contains("clear text"), "{why}");
        assert_eq!(reach_problem(&u("http://maps.example/sse"), true), None);
        assert!(
            reach_problem(&u("ftp://h/x"), true)
                .unwrap()
                .contains("ftp")
        );
    }
}
