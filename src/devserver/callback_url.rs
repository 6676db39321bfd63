//! The `callback_url` rule of main_server: an http(s) URL whose host is a
//! loopback address or the literal `localhost`.
//!
//! Upstream checks the URL with Python's `urlparse` plus
//! `ipaddress.ip_address(...)`, so this module mirrors `urlparse`'s lenient
//! splitting (it validates nothing but the scheme and the host) instead of
//! using a WHATWG parser, which would accept hosts like `127.1` that upstream
//! refuses. It never does I/O and never looks at the port or the path.

use std::net::IpAddr;

use crate::contract::is_loopback_ip;

/// Why a `callback_url` is refused; the text becomes the pydantic
/// `value_error` message ("Value error, <this>").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallbackUrlError {
    #[error("callback_url must use http or https")]
    Scheme,
    #[error("callback_url must have a host")]
    NoHost,
    #[error("callback_url host must be loopback (127.0.0.0/8, ::1) or localhost, got {0:?}")]
    NotLoopback(String),
}

/// Checks `url` the way main_server's validator does.
pub(crate) fn check_callback_url(url: &str) -> Result<(), CallbackUrlError> {
    let parts = split_url(url);
    if parts.scheme != "http" && parts.scheme != "https" {
        return Err(CallbackUrlError::Scheme);
    }
    let host = parts.hostname.ok_or(CallbackUrlError::NoHost)?;
    if host == "localhost" || host_is_loopback_ip(&host) {
        Ok(())
    } else {
        Err(CallbackUrlError::NotLoopback(host))
    }
}

fn host_is_loopback_ip(host: &str) -> bool {
    // `ipaddress.ip_address` accepts an IPv6 zone suffix ("%eth0"); the
    // address part alone decides whether it is loopback.
    let addr = host.split('%').next().unwrap_or(host);
    addr.parse::<IpAddr>().is_ok_and(is_loopback_ip)
}

/// The pieces of a URL that `urlparse` would give: lowercased scheme and
/// lowercased `hostname` (brackets stripped), or `None` when there is none.
#[derive(Debug, PartialEq, Eq)]
struct UrlParts {
    scheme: String,
    hostname: Option<String>,
}

fn split_url(url: &str) -> UrlParts {
    // urlsplit strips leading C0 controls and spaces, and drops tabs and
    // newlines anywhere in the URL.
    let cleaned: String = url
        .trim_start_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\r' | '\n'))
        .collect();
    let (scheme, rest) = match cleaned.split_once(':') {
        Some((s, rest)) if is_scheme(s) => (s.to_ascii_lowercase(), rest),
        _ => (String::new(), cleaned.as_str()),
    };
    let hostname = rest.strip_prefix("//").and_then(|after| {
        let netloc = after.split(['/', '?', '#']).next().unwrap_or_default();
        hostname_of(netloc)
    });
    UrlParts { scheme, hostname }
}

fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn hostname_of(netloc: &str) -> Option<String> {
    let hostport = netloc.rsplit('@').next().unwrap_or(netloc);
    let host = if let Some(after) = hostport.strip_prefix('[') {
        after.split(']').next().unwrap_or(after)
    } else {
        hostport.split(':').next().unwrap_or(hostport)
    };
    (!host.is_empty()).then(|| host.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_accepted() {
        for url in [
            "http://127.0.0.1:9000/tool",
            "https://127.0.0.1/x",
            "http://127.255.3.4:1/",
            "http://localhost:8080/cb",
            "HTTP://LOCALHOST/cb",
            "http://[::1]:9000/tool",
            "http://[::ffff:127.0.0.1]:9000/tool",
            "http://user:pw@127.0.0.1:9/x",
            "http://127.0.0.1:notaport/x",
        ] {
            assert_eq!(check_callback_url(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn other_hosts_are_refused() {
        for url in [
            "http://10.0.0.1/x",
            "http://example.com/x",
            "http://127.1/x",
            "http://0.0.0.0/x",
            "http://[::ffff:10.0.0.1]/x",
            "http://localhost.example.com/x",
            "http://127.0.0.1.nip.io/x",
            "http://evil@example.com:80@127.0.0.1/x",
        ] {
            let refused = check_callback_url(url).is_err();
            // The last one is a userinfo trick: urlparse takes the part after
            // the LAST '@', which is loopback, so upstream accepts it too.
            if url.contains("evil@") {
                assert!(!refused, "{url}");
            } else {
                assert!(refused, "{url}");
            }
        }
    }

    #[test]
    fn scheme_and_host_are_required() {
        assert_eq!(
            check_callback_url("ftp://127.0.0.1/x"),
            Err(CallbackUrlError::Scheme)
        );
        assert_eq!(
            check_callback_url("127.0.0.1:9000/x"),
            Err(CallbackUrlError::Scheme)
        );
        assert_eq!(check_callback_url(""), Err(CallbackUrlError::Scheme));
        assert_eq!(
            check_callback_url("http:///x"),
            Err(CallbackUrlError::NoHost)
        );
        assert_eq!(check_callback_url("http:x"), Err(CallbackUrlError::NoHost));
    }

    #[test]
    fn mapped_and_plain_ip_loopback() {
        assert!(is_loopback_ip("::ffff:127.9.9.9".parse().unwrap()));
        assert!(is_loopback_ip("::1".parse().unwrap()));
        assert!(!is_loopback_ip("::2".parse().unwrap()));
        assert!(!is_loopback_ip("192.168.1.1".parse().unwrap()));
    }
}
