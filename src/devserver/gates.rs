//! Who may talk to the stand-in: the loopback-caller gate (403) and the
//! `Host`-header gate (400 `untrusted_host`), as pure functions over
//! addresses and header values.
//!
//! Tests can only connect from loopback, so the decisions live here where
//! they are unit-tested on addresses; the HTTP layer only calls them. This
//! module never reads a request or builds a response.

use std::net::IpAddr;

use super::callback_url::ip_is_loopback;

/// True when main_server would serve a caller at `peer`: 127.0.0.0/8, `::1`
/// or an IPv4-mapped loopback address (how a dual-stack socket reports an
/// IPv4 loopback peer).
pub fn is_loopback_peer(peer: IpAddr) -> bool {
    ip_is_loopback(peer)
}

/// True when a `Host` header is an IP literal or `localhost`, with or without
/// a port. A missing header is untrusted: HTTP/1.1 requires it.
pub fn is_trusted_host(host: Option<&str>) -> bool {
    let Some(host) = host.map(str::trim) else {
        return false;
    };
    // A bare IPv6 literal ("::1") has colons that are not a port separator.
    if host.parse::<IpAddr>().is_ok() {
        return true;
    }
    let (name, port) = if let Some(after) = host.strip_prefix('[') {
        let Some((inside, rest)) = after.split_once(']') else {
            return false;
        };
        if inside.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        return port_suffix_ok(rest);
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if let Some(port) = port
        && !is_port(port)
    {
        return false;
    }
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

fn port_suffix_ok(rest: &str) -> bool {
    rest.is_empty() || rest.strip_prefix(':').is_some_and(is_port)
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_peers_pass_others_do_not() {
        for ok in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback_peer(ok.parse().unwrap()), "{ok}");
        }
        for bad in [
            "10.0.0.2",
            "192.168.0.10",
            "::ffff:10.0.0.1",
            "fe80::1",
            "0.0.0.0",
            "::",
        ] {
            assert!(!is_loopback_peer(bad.parse().unwrap()), "{bad}");
        }
    }

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
}
