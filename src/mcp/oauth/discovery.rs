//! Finding how a protected MCP server signs in, in the order the MCP
//! specification's Authorization section gives: the protected resource
//! metadata (RFC 9728) named by the `401`'s `WWW-Authenticate`
//! (`resource_metadata`), else at its well-known URIs (path-aware first,
//! then at the root); its first authorization server; that server's
//! metadata (RFC 8414, then OpenID Connect discovery, path-inserted before
//! path-appended), whose `issuer` must be the server it came from.
//!
//! What is refused, each with its reason: an authorization server or an
//! endpoint that is not https (plain http only on loopback, as for MCP
//! servers), an `issuer` that does not match, a server that does not offer
//! PKCE with S256 (the specification asks clients to refuse one that does
//! not say it does), a resource metadata whose `resource` is not this
//! server. The parsing and the checks are pure; `fetch_json` does the I/O.

use serde::Deserialize;
use serde_json::Value as Json;
use url::Url;

use crate::contract::url_host_is_loopback;

/// The most a metadata document may weigh.
const MAX_METADATA_BYTES: usize = 256 * 1024;

/// What a `401`'s `WWW-Authenticate: Bearer …` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

impl Challenge {
    /// The parameters of the `Bearer` challenge of `header` (RFC 6750,
    /// 3; RFC 9728, 5.1): quoted or bare values, other schemes skipped.
    pub(crate) fn parse(header: &str) -> Self {
        let mut out = Self::default();
        let Some(at) = header.to_ascii_lowercase().find("bearer") else {
            return out;
        };
        let mut rest = &header[at + "bearer".len()..];
        loop {
            rest = rest.trim_start_matches([' ', ',', '\t']);
            let Some(eq) = rest.find('=') else { break };
            let key = rest[..eq].trim().to_ascii_lowercase();
            if key.contains(' ') {
                // The next scheme's name: its parameters are not ours.
                break;
            }
            rest = &rest[eq + 1..];
            let value;
            if let Some(q) = rest.strip_prefix('"') {
                let mut v = String::new();
                let mut chars = q.char_indices();
                let mut end = q.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, n)) = chars.next() {
                                v.push(n);
                            }
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => v.push(c),
                    }
                }
                value = v;
                rest = &q[end.min(q.len())..];
            } else {
                let end = rest.find([',', ' ']).unwrap_or(rest.len());
                value = rest[..end].to_string();
                rest = &rest[end..];
            }
            match key.as_str() {
                "resource_metadata" => out.resource_metadata = Some(value),
                "scope" => out.scope = Some(value),
                "error" => out.error = Some(value),
                _ => {}
            }
        }
        out
    }
}

/// RFC 9728's well-known URIs of the resource at `server`: path-aware
/// first (`/.well-known/oauth-protected-resource/mcp`), then the root.
pub(crate) fn resource_metadata_urls(server: &Url) -> Vec<Url> {
    let mut out = Vec::new();
    let path = server.path().trim_end_matches('/');
    let mut at = |p: &str| {
        let mut u = server.clone();
        u.set_path(p);
        u.set_query(None);
        u.set_fragment(None);
        if !out.contains(&u) {
            out.push(u);
        }
    };
    if !path.is_empty() {
        at(&format!("/.well-known/oauth-protected-resource{path}"));
    }
    at("/.well-known/oauth-protected-resource");
    out
}

/// Where the metadata of the authorization server `issuer` is, in the
/// specification's order: with a path, OAuth path-inserted, OpenID
/// path-inserted, OpenID path-appended; without, OAuth then OpenID.
pub(crate) fn authorization_metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let at = |p: String| {
        let mut u = issuer.clone();
        u.set_path(&p);
        u.set_query(None);
        u.set_fragment(None);
        u
    };
    if path.is_empty() {
        vec![
            at("/.well-known/oauth-authorization-server".into()),
            at("/.well-known/openid-configuration".into()),
        ]
    } else {
        vec![
            at(format!("/.well-known/oauth-authorization-server{path}")),
            at(format!("/.well-known/openid-configuration{path}")),
            at(format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

/// The canonical URI of the MCP server at `url` (RFC 8707, as the MCP
/// specification defines it): scheme and host lower case, no fragment,
/// no trailing slash after a path.
pub(crate) fn canonical_resource(url: &Url) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    let mut s = u.to_string();
    if s.ends_with('/') && u.path() != "/" {
        s.pop();
    }
    if u.path() == "/" && u.query().is_none() {
        s.pop();
    }
    s
}

/// Why an endpoint may not be used, or `None`: https anywhere, plain http
/// on loopback only.
pub(crate) fn endpoint_problem(what: &str, url: &Url) -> Option<String> {
    match url.scheme() {
        "https" => None,
        "http" if url_host_is_loopback(url) => None,
        "http" => Some(format!(
            "its {what} {} is plain http off loopback, where codes and tokens would travel in clear text: an authorization server must use https",
            crate::manifest::remote::redact_url(url.as_str())
        )),
        other => Some(format!("its {what} has scheme `{other}`, not https")),
    }
}

/// RFC 9728's document, the parts we use.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ResourceMetadata {
    pub resource: Option<String>,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Option<Vec<String>>,
}

/// RFC 8414's document (and OpenID Connect's), the parts we use.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
pub(crate) struct ServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub registration_endpoint: Option<String>,
    pub revocation_endpoint: Option<String>,
    pub code_challenge_methods_supported: Option<Vec<String>>,
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    pub scopes_supported: Option<Vec<String>>,
}

/// The resource metadata `doc` checked against the server at `server`:
/// its `resource` (when given) must be the server's URL or a prefix of it
/// on a path boundary, and it must name an authorization server. Returns
/// the issuer to use and the resource identifier to ask tokens for.
pub(crate) fn check_resource(
    doc: &ResourceMetadata,
    server: &Url,
) -> Result<(Url, String), String> {
    let canonical = canonical_resource(server);
    let resource = match &doc.resource {
        Some(r) => {
            let r_trim = r.trim_end_matches('/');
            let ok = canonical == r_trim
                || canonical
                    .strip_prefix(r_trim)
                    .is_some_and(|rest| rest.starts_with('/'));
            if !ok {
                return Err(format!(
                    "its protected resource metadata is for {}, not for this server ({}): refused, as RFC 9728 asks",
                    crate::manifest::remote::redact_url(r),
                    crate::manifest::remote::redact_url(&canonical)
                ));
            }
            r_trim.to_string()
        }
        None => canonical,
    };
    let Some(first) = doc.authorization_servers.first() else {
        return Err(
            "its protected resource metadata names no authorization server (`authorization_servers`)".into(),
        );
    };
    let issuer = Url::parse(first)
        .map_err(|e| format!("its authorization server \"{first}\" is not a URL ({e})"))?;
    if let Some(why) = endpoint_problem("authorization server", &issuer) {
        return Err(why);
    }
    Ok((issuer, resource))
}

/// The metadata `doc` of the authorization server `issuer` checked: the
/// same issuer (RFC 8414, 3.3), https endpoints, PKCE with S256.
pub(crate) fn check_server(doc: &ServerMetadata, issuer: &Url) -> Result<(), String> {
    let norm = |s: &str| s.trim_end_matches('/').to_string();
    if norm(&doc.issuer) != norm(issuer.as_str()) {
        return Err(format!(
            "its authorization server's metadata says issuer {}, but it came from {}: refused, as RFC 8414 asks (a mix-up or an impersonation)",
            crate::manifest::remote::redact_url(&doc.issuer),
            crate::manifest::remote::redact_url(issuer.as_str())
        ));
    }
    for (what, url) in [
        ("authorization endpoint", Some(&doc.authorization_endpoint)),
        ("token endpoint", Some(&doc.token_endpoint)),
        ("registration endpoint", doc.registration_endpoint.as_ref()),
        ("revocation endpoint", doc.revocation_endpoint.as_ref()),
    ] {
        let Some(url) = url else { continue };
        let parsed = Url::parse(url).map_err(|e| format!("its {what} is not a URL ({e})"))?;
        if let Some(why) = endpoint_problem(what, &parsed) {
            return Err(why);
        }
    }
    let s256 = doc
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m == "S256"));
    if !s256 {
        return Err(format!(
            "its authorization server does not offer PKCE with S256 (code_challenge_methods_supported: {}): the MCP specification asks clients to refuse it",
            match &doc.code_challenge_methods_supported {
                Some(m) if !m.is_empty() => m.join(", "),
                _ => "absent".to_string(),
            }
        ));
    }
    Ok(())
}

/// GETs `url` as JSON with `client`: `Ok(None)` for a 404 or another 4xx
/// (not there: try the next place), an error for anything else wrong.
pub(crate) async fn fetch_json(
    client: &reqwest::Client,
    url: &Url,
) -> Result<Option<Json>, String> {
    let shown = crate::manifest::remote::redact_url(url.as_str());
    let resp = client
        .get(url.clone())
        .header(http::header::ACCEPT, "application/json")
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .map_err(|e| {
            format!(
                "cannot fetch {shown}: {}",
                super::super::remote_http::chain(&e.without_url())
            )
        })?;
    let status = resp.status();
    if status.is_client_error() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(format!("{shown} answered HTTP {status}"));
    }
    let body = read_capped(resp, MAX_METADATA_BYTES)
        .await
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| format!("{shown} is not JSON ({e})"))
}

/// The body of `resp`, at most `limit` bytes.
pub(crate) async fn read_capped(
    mut resp: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| super::super::remote_http::chain(&e.without_url()))?
    {
        if out.len() + chunk.len() > limit {
            return Err(format!("its answer is larger than {} KiB", limit / 1024));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn a_bearer_challenge_is_read_with_quoted_and_bare_values() {
        let c = Challenge::parse(
            r#"Bearer error="invalid_token", resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp", scope="read write""#,
        );
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.scope.as_deref(), Some("read write"));
        let c = Challenge::parse("Basic realm=\"x\", Bearer scope=files");
        assert_eq!(c.scope.as_deref(), Some("files"));
        assert_eq!(Challenge::parse("Basic realm=x"), Challenge::default());
    }

    #[test]
    fn well_known_uris_are_path_aware_first_then_at_the_root() {
        assert_eq!(
            resource_metadata_urls(&u("https://h.example/public/mcp?x=1")),
            [
                u("https://h.example/.well-known/oauth-protected-resource/public/mcp"),
                u("https://h.example/.well-known/oauth-protected-resource"),
            ]
        );
        assert_eq!(
            resource_metadata_urls(&u("https://h.example/")),
            [u("https://h.example/.well-known/oauth-protected-resource")]
        );
        assert_eq!(
            authorization_metadata_urls(&u("https://auth.example/tenant1")),
            [
                u("https://auth.example/.well-known/oauth-authorization-server/tenant1"),
                u("https://auth.example/.well-known/openid-configuration/tenant1"),
                u("https://auth.example/tenant1/.well-known/openid-configuration"),
            ]
        );
        assert_eq!(
            authorization_metadata_urls(&u("https://auth.example/")),
            [
                u("https://auth.example/.well-known/oauth-authorization-server"),
                u("https://auth.example/.well-known/openid-configuration"),
            ]
        );
    }

    fn server(issuer: &str) -> ServerMetadata {
        ServerMetadata {
            issuer: issuer.into(),
            authorization_endpoint: format!("{issuer}/authorize"),
            token_endpoint: format!("{issuer}/token"),
            registration_endpoint: None,
            revocation_endpoint: None,
            code_challenge_methods_supported: Some(vec!["S256".into()]),
            token_endpoint_auth_methods_supported: None,
            scopes_supported: None,
        }
    }

    #[test]
    fn the_issuer_must_match_endpoints_be_https_and_s256_be_offered() {
        let issuer = u("https://auth.example/");
        assert_eq!(
            check_server(&server("https://auth.example"), &issuer),
            Ok(())
        );
        let e = check_server(&server("https://evil.example"), &issuer).unwrap_err();
        assert!(e.contains("issuer https://evil.example"), "{e}");
        let mut plain = server("https://auth.example");
        plain.token_endpoint = "http://auth.example/token".into();
        assert!(
            check_server(&plain, &issuer)
                .unwrap_err()
                .contains("clear text")
        );
        let mut no_pkce = server("https://auth.example");
        no_pkce.code_challenge_methods_supported = None;
        let e = check_server(&no_pkce, &issuer).unwrap_err();
        assert!(e.contains("S256") && e.contains("absent"), "{e}");
        no_pkce.code_challenge_methods_supported = Some(vec!["plain".into()]);
        assert!(
            check_server(&no_pkce, &issuer)
                .unwrap_err()
                .contains("plain")
        );
        let local = u("http://127.0.0.1:9000/");
        assert_eq!(
            check_server(&server("http://127.0.0.1:9000"), &local),
            Ok(())
        );
    }

    #[test]
    fn the_resource_must_be_this_server_and_name_an_https_authorization_server() {
        let doc = |resource: Option<&str>, servers: &[&str]| ResourceMetadata {
            resource: resource.map(str::to_string),
            authorization_servers: servers.iter().map(|s| s.to_string()).collect(),
            scopes_supported: None,
        };
        let mcp = u("https://mcp.example/mcp");
        let (issuer, resource) = check_resource(
            &doc(Some("https://mcp.example/mcp"), &["https://auth.example"]),
            &mcp,
        )
        .unwrap();
        assert_eq!(issuer, u("https://auth.example"));
        assert_eq!(resource, "https://mcp.example/mcp");
        let (_, resource) = check_resource(
            &doc(Some("https://mcp.example/"), &["https://auth.example"]),
            &mcp,
        )
        .unwrap();
        assert_eq!(resource, "https://mcp.example");
        assert!(
            check_resource(
                &doc(Some("https://other.example/mcp"), &["https://a.example"]),
                &mcp
            )
            .unwrap_err()
            .contains("not for this server")
        );
        assert!(
            check_resource(
                &doc(Some("https://mcp.example/mc"), &["https://a.example"]),
                &mcp
            )
            .is_err()
        );
        assert!(
            check_resource(&doc(None, &[]), &mcp)
                .unwrap_err()
                .contains("names no")
        );
        assert!(
            check_resource(&doc(None, &["http://auth.example"]), &mcp)
                .unwrap_err()
                .contains("clear text")
        );
        assert_eq!(
            canonical_resource(&u("HTTPS://MCP.Example/mcp/")),
            "https://mcp.example/mcp"
        );
        assert_eq!(
            canonical_resource(&u("https://mcp.example/")),
            "https://mcp.example"
        );
    }
}
