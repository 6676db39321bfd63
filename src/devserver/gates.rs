//! Who may talk to the stand-in, as pure functions over addresses and
//! header values: the `Host`-header gate (400 `untrusted_host`), then the
//! local-access decision (local = loopback peer AND loopback `Host`; a
//! loopback peer naming another IP literal needs an instance key or a
//! session cookie, 401, and a keyed call from a foreign `Origin` gets 403).
//!
//! Tests can only connect from loopback, so the peer half of the decision
//! is unit-tested here on addresses; the HTTP layer only calls these. This
//! module never reads a request or builds a response.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::contract::{is_loopback_ip, url_host_is_loopback};

/// What a trusted `Host` header names, its port dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostName {
    Ip(IpAddr),
    Localhost,
}

impl HostName {
    fn is_loopback(self) -> bool {
        match self {
            HostName::Ip(ip) => is_loopback_ip(ip),
            HostName::Localhost => true,
        }
    }
}

/// Parses a `Host` header that is an IP literal or `localhost`, with or
/// without a port; `None` for anything else (a name, garbage, no header).
fn host_name(host: Option<&str>) -> Option<HostName> {
    let host = host?.trim();
    // A bare IPv6 literal ("::1") has colons that are not a port separator.
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(HostName::Ip(ip));
    }
    if let Some(after) = host.strip_prefix('[') {
        let (inside, rest) = after.split_once(']')?;
        let ip = inside.parse::<Ipv6Addr>().ok()?;
        return port_suffix_ok(rest).then_some(HostName::Ip(IpAddr::V6(ip)));
    }
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    if port.is_some_and(|p| !is_port(p)) {
        return None;
    }
    if name.eq_ignore_ascii_case("localhost") {
        return Some(HostName::Localhost);
    }
    name.parse::<Ipv4Addr>()
        .ok()
        .map(|v4| HostName::Ip(IpAddr::V4(v4)))
}

/// True when a `Host` header is an IP literal or `localhost`, with or without
/// a port. A missing header is untrusted: HTTP/1.1 requires it.
pub(crate) fn is_trusted_host(host: Option<&str>) -> bool {
    host_name(host).is_some()
}

/// True when a `Host` header names loopback: 127.0.0.0/8, `::1`,
/// `[::ffff:127.x.x.x]` or `localhost`, with or without a port.
pub(crate) fn is_loopback_host(host: Option<&str>) -> bool {
    host_name(host).is_some_and(HostName::is_loopback)
}

fn port_suffix_ok(rest: &str) -> bool {
    rest.is_empty() || rest.strip_prefix(':').is_some_and(is_port)
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// The headers the local-access decision reads, as sent.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AccessHeaders<'a> {
    pub host: Option<&'a str>,
    pub authorization: Option<&'a str>,
    pub cookie: Option<&'a str>,
    pub origin: Option<&'a str>,
}

/// The local-access decision for a request whose `Host` already passed
/// [`is_trusted_host`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Loopback peer and loopback `Host`: served.
    Local,
    /// Loopback peer naming another host, carrying a credential from no
    /// foreign origin: served.
    Authorized,
    /// Loopback peer naming another host without a credential:
    /// `401 instance_authorization_required`.
    AuthorizationRequired,
    /// A credentialed call from a foreign `Origin`: `403 origin_not_allowed`.
    OriginNotAllowed,
    /// Not a loopback peer at all: 403, whatever it carries.
    NotLoopbackPeer,
}

/// Decides whether main_server serves a caller at `peer` sending `headers`.
///
/// The stand-in cannot know main_server's instance key, so any non-empty
/// `Bearer` token counts as one; any cookie whose name contains `session`
/// counts as a session cookie. A peer that is not on loopback stays refused
/// with 403 even with a credential: CONTRACT.md does not say such a caller
/// is ever served, and the stand-in must not be kinder than upstream.
pub(crate) fn local_access(peer: IpAddr, headers: AccessHeaders<'_>) -> Access {
    if !is_loopback_ip(peer) {
        return Access::NotLoopbackPeer;
    }
    if is_loopback_host(headers.host) {
        return Access::Local;
    }
    if !has_bearer(headers.authorization) && !has_session_cookie(headers.cookie) {
        return Access::AuthorizationRequired;
    }
    if headers.origin.is_some_and(|o| !is_loopback_origin(o)) {
        return Access::OriginNotAllowed;
    }
    Access::Authorized
}

/// `Authorization: Bearer TOKEN` with a non-empty token (scheme
/// case-insensitive, as RFC 7235 has it).
fn has_bearer(header: Option<&str>) -> bool {
    header.is_some_and(|h| {
        let h = h.trim();
        h.get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("bearer "))
            && !h[7..].trim().is_empty()
    })
}

fn has_session_cookie(header: Option<&str>) -> bool {
    header.is_some_and(|h| {
        h.split(';').any(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            name.trim().to_ascii_lowercase().contains("session") && !value.trim().is_empty()
        })
    })
}

/// True when an `Origin` header is an http(s) origin on loopback. `null`
/// (an opaque origin) and anything unparsable are foreign.
fn is_loopback_origin(origin: &str) -> bool {
    let Ok(url) = url::Url::parse(origin.trim()) else {
        return false;
    };
    matches!(url.scheme(), "http" | "https") && url_host_is_loopback(&url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_and_localhost_are_trusted_hosts() {
        for ok in [
            "127.0.0.1",
            "127.0.0.1:48911",
            "10.1.2.3:80",
            "localhost",
            "LocalHost:8080",
            "[::1]",
            "[::1]:48911",
            "::1",
            "[2001:db8::1]:80",
        ] {
            assert!(is_trusted_host(Some(ok)), "{ok}");
        }
    }

    #[test]
    fn names_and_garbage_are_untrusted_hosts() {
        for bad in [
            "example.com",
            "example.com:48911",
            "localhost.evil.com",
            "127.0.0.1.nip.io",
            "127.0.0.1:port",
            "[::1",
            "[nothost]:1",
            "",
        ] {
            assert!(!is_trusted_host(Some(bad)), "{bad}");
        }
        assert!(!is_trusted_host(None));
    }

    #[test]
    fn only_loopback_literals_and_localhost_are_loopback_hosts() {
        for ok in [
            "127.0.0.1",
            "127.9.9.9:80",
            "localhost:1",
            "[::1]:48911",
            "::1",
            "[::ffff:127.0.0.1]",
        ] {
            assert!(is_loopback_host(Some(ok)), "{ok}");
        }
        for bad in [
            "10.1.2.3",
            "[2001:db8::1]:80",
            "0.0.0.0",
            "[::]",
            "example.com",
        ] {
            assert!(!is_loopback_host(Some(bad)), "{bad}");
        }
        assert!(!is_loopback_host(None));
    }

    fn access(
        peer: &str,
        host: &str,
        auth: Option<&str>,
        cookie: Option<&str>,
        origin: Option<&str>,
    ) -> Access {
        local_access(
            peer.parse().unwrap(),
            AccessHeaders {
                host: Some(host),
                authorization: auth,
                cookie,
                origin,
            },
        )
    }

    #[test]
    fn local_needs_a_loopback_peer_and_a_loopback_host() {
        assert_eq!(
            access("127.0.0.1", "127.0.0.1:1", None, None, None),
            Access::Local
        );
        assert_eq!(
            access("::1", "localhost", None, None, Some("http://evil.test")),
            Access::Local
        );
        assert_eq!(
            access("127.0.0.1", "10.1.2.3", None, None, None),
            Access::AuthorizationRequired
        );
        assert_eq!(
            access("10.0.0.2", "127.0.0.1", Some("Bearer k"), None, None),
            Access::NotLoopbackPeer
        );
    }

    #[test]
    fn a_credential_serves_a_non_loopback_host_unless_the_origin_is_foreign() {
        let bearer = Some("Bearer k3y");
        assert_eq!(
            access("127.0.0.1", "10.1.2.3", bearer, None, None),
            Access::Authorized
        );
        assert_eq!(
            access(
                "127.0.0.1",
                "10.1.2.3",
                Some("bearer k3y"),
                None,
                Some("http://127.0.0.1:3000")
            ),
            Access::Authorized
        );
        assert_eq!(
            access(
                "127.0.0.1",
                "[2001:db8::1]:80",
                None,
                Some("a=1; neko_session=xyz"),
                None
            ),
            Access::Authorized
        );
        for foreign in ["http://evil.test", "null", "http://10.1.2.3", "file:///x"] {
            assert_eq!(
                access("127.0.0.1", "10.1.2.3", bearer, None, Some(foreign)),
                Access::OriginNotAllowed,
                "{foreign}"
            );
        }
        for not_a_credential in ["Bearer ", "Basic dXNlcjpwdw==", "Bearerk"] {
            assert_eq!(
                access(
                    "127.0.0.1",
                    "10.1.2.3",
                    Some(not_a_credential),
                    Some("a=1; session="),
                    None
                ),
                Access::AuthorizationRequired,
                "{not_a_credential}"
            );
        }
    }
}
