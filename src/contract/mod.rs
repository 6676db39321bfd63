//! main_server's rules, written once: what the sidecar and the stand-in
//! both need to know about how the real server behaves (`../shared/CONTRACT.md`).
//!
//! - Python truthiness and the envelope predicate (`truthy`, `is_envelope`);
//! - how an answer becomes what the model reads (`answer`): the eight rules
//!   of "How main_server builds `output`", and the text the model reads;
//! - the image rules (`images`), with a real JPEG/PNG decode;
//! - loopback, the `builtin` source that no client may use, and the
//!   connection limit of main_server's callback client;
//! - where main_server listens when nobody says (`main_server_url`): the
//!   port N.E.K.O publishes in its environment, else 48911.
//!
//! Two copies of a rule drift, and then the tests prove the wrong thing: the
//! stand-in (`devserver`) reads answers with this module, and the sidecar
//! (`envelope`) checks its own answers against the same reading.
//! Pure: no I/O, no logging.

pub(crate) mod answer;
pub mod envelope;
pub mod images;

use std::net::IpAddr;

use serde_json::{Map, Value as Json};

pub use answer::{Reading, model_reads, model_text, read_answer, transport_failure};

/// The source tag of main_server's own built-in tools. A client that clears
/// this source deletes them.
pub const BUILTIN_SOURCE: &str = "builtin";

/// The one built-in tool main_server has today, in every role.
pub const RECALL_MEMORY: &str = "recall_memory";

/// main_server's one httpx client holds at most this many connections for
/// all callbacks together; a call past them waits for one (`PoolTimeout`).
pub(crate) const MAX_CALLBACK_CONNECTIONS: usize = 20;

/// Python truthiness, as main_server reads `is_error`: null, false, 0, "",
/// [] and {} are false; everything else (the string "false" too) is true.
pub fn truthy(v: &Json) -> bool {
    match v {
        Json::Null => false,
        Json::Bool(b) => *b,
        Json::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Json::String(s) => !s.is_empty(),
        Json::Array(a) => !a.is_empty(),
        Json::Object(o) => !o.is_empty(),
    }
}

/// An object with an `output` or an `is_error` key is an envelope; any
/// other object is plain data, shown to the model whole.
pub(crate) fn is_envelope(obj: &Map<String, Json>) -> bool {
    obj.contains_key("output") || obj.contains_key("is_error")
}

/// Loopback as main_server sees it: 127.0.0.0/8, `::1` and IPv4-mapped
/// `::ffff:127.x.x.x` (how a dual-stack socket reports an IPv4 peer).
pub fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Whether a URL's host is loopback: a loopback IP literal or the literal
/// `localhost`.
pub(crate) fn url_host_is_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => is_loopback_ip(ip.into()),
        Some(url::Host::Ipv6(ip)) => is_loopback_ip(ip.into()),
        None => false,
    }
}

/// main_server's port when nothing overrides it (`MAIN_SERVER_PORT` in
/// N.E.K.O's `config/network.py`).
pub const DEFAULT_MAIN_SERVER_PORT: u16 = 48911;

/// The variables N.E.K.O reads main_server's port from, first wins. Its
/// launcher picks another port when 48911 is busy and exports the choice
/// as `NEKO_MAIN_SERVER_PORT` to every server it starts, so plugin
/// processes, and the sidecar a plugin starts, inherit it
/// (`launcher_core/runtime.py`; reading order in `config/network.py`
/// `_read_port_env` @1136f662).
pub const MAIN_SERVER_PORT_VARS: [&str; 2] = ["NEKO_MAIN_SERVER_PORT", "MAIN_SERVER_PORT"];

/// main_server's base URL as N.E.K.O itself works it out, from `env` (a
/// lookup, so that this stays pure): the first of [`MAIN_SERVER_PORT_VARS`]
/// that holds a port (what Python's `int()` reads, 1 to 65535; anything
/// else is skipped, as upstream does), else [`DEFAULT_MAIN_SERVER_PORT`].
/// Always loopback: main_server serves plugins on 127.0.0.1. (Upstream
/// then falls back to the desktop app's `port_config.json`; the N.E.K.O
/// plugin passes that choice on as `NEKO_MAIN_SERVER_PORT`.)
pub fn main_server_url(env: impl Fn(&str) -> Option<String>) -> String {
    let port = MAIN_SERVER_PORT_VARS
        .iter()
        .filter_map(|var| env(var))
        .find_map(|raw| python_port(&raw))
        .unwrap_or(DEFAULT_MAIN_SERVER_PORT);
    format!("http://127.0.0.1:{port}")
}

/// A port as `1 <= int(raw) <= 65535` reads it in Python: surrounding
/// whitespace, a sign and `_` between digits are allowed.
fn python_port(raw: &str) -> Option<u16> {
    let t = raw.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    let well_formed = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.chars().all(|c| c.is_ascii_digit() || c == '_');
    if !well_formed {
        return None;
    }
    let n: u64 = digits.replace('_', "").parse().ok()?;
    u16::try_from(n).ok().filter(|p| *p >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn main_server_url_follows_nekos_reading_order() {
        assert_eq!(main_server_url(env_of(&[])), "http://127.0.0.1:48911");
        assert_eq!(
            main_server_url(env_of(&[("MAIN_SERVER_PORT", "5000")])),
            "http://127.0.0.1:5000"
        );
        // NEKO_ wins over the bare name.
        assert_eq!(
            main_server_url(env_of(&[
                ("NEKO_MAIN_SERVER_PORT", "48920"),
                ("MAIN_SERVER_PORT", "5000")
            ])),
            "http://127.0.0.1:48920"
        );
        // What int() reads.
        for (raw, port) in [(" 48921 ", 48921), ("+48922", 48922), ("48_923", 48923)] {
            assert_eq!(
                main_server_url(env_of(&[("NEKO_MAIN_SERVER_PORT", raw)])),
                format!("http://127.0.0.1:{port}"),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn a_value_that_is_no_port_is_skipped_as_upstream_does() {
        for bad in ["", "0", "65536", "-1", "http", "0x10", "48_", "4__8", "1.5"] {
            assert_eq!(
                main_server_url(env_of(&[
                    ("NEKO_MAIN_SERVER_PORT", bad),
                    ("MAIN_SERVER_PORT", "5001")
                ])),
                "http://127.0.0.1:5001",
                "{bad:?}"
            );
            assert_eq!(
                main_server_url(env_of(&[("NEKO_MAIN_SERVER_PORT", bad)])),
                "http://127.0.0.1:48911",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn truthiness_is_pythons() {
        for falsy in [
            json!(false),
            json!(null),
            json!(0),
            json!(0.0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            assert!(!truthy(&falsy), "{falsy}");
        }
        for t in [
            json!(true),
            json!("false"),
            json!("0"),
            json!(1),
            json!(-0.5),
            json!([0]),
            json!({"a": 0}),
        ] {
            assert!(truthy(&t), "{t}");
        }
    }

    #[test]
    fn an_envelope_has_output_or_is_error() {
        let obj = |v: Json| v.as_object().cloned().unwrap();
        assert!(is_envelope(&obj(json!({"output": null}))));
        assert!(is_envelope(&obj(json!({"is_error": false}))));
        assert!(!is_envelope(&obj(json!({"error": "x", "images": []}))));
    }

    #[test]
    fn loopback_includes_mapped_v4_and_not_others() {
        for ip in ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback_ip(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "10.0.0.1",
            "0.0.0.0",
            "::",
            "::ffff:10.0.0.1",
            "192.168.1.1",
        ] {
            assert!(!is_loopback_ip(ip.parse().unwrap()), "{ip}");
        }
    }
}
