//! Fuzz target `config`: arbitrary bytes as the agent config.
//!
//! `config::parse` must never panic; every diagnostic must point inside the
//! text (the config reports in check order, not reading order, so only the
//! place is checked); a config comes back
//! exactly when there is no error, and a config that comes back keeps every
//! promise its types make (loopback listeners, backoff bounds, a main_server
//! base URL that joins to the API routes as written).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use neko_sidecar::config;
use neko_sidecar::contract::is_loopback_ip;
use neko_sidecar_fuzz::assert_positions_within;

const PATH: &str = "/nonexistent/neko-sidecar-fuzz/agent.toml";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new(PATH);
    let (cfg, diags) = config::parse(path, &text);

    assert_positions_within(path, &text, &diags);
    let has_errors = diags.iter().any(|d| d.is_error());
    assert_eq!(cfg.is_none(), has_errors, "{diags:?}");
    let Some(c) = cfg else {
        return;
    };
    assert!(
        !c.source.is_empty() && c.source != "builtin",
        "{:?}",
        c.source
    );
    assert!(!c.manifest_dirs.is_empty());
    assert!(
        is_loopback_ip(c.callback.listen.ip()),
        "{}",
        c.callback.listen
    );
    assert!(c.admin.listen.is_none_or(|a| is_loopback_ip(a.ip())));
    let r = &c.registration;
    assert!(r.backoff_initial <= r.backoff_max);
    for d in [
        r.poll_interval,
        r.backoff_initial,
        r.reclaim_interval,
        c.main_server.request_timeout,
        c.handlers.kill_grace,
        c.shutdown_deadline,
        c.reload.debounce,
        c.reload.rescan_interval,
    ] {
        assert!(!d.is_zero());
    }
    assert!((1..=1024).contains(&r.max_in_flight));
    for n in [c.callback.max_body_bytes, c.handlers.max_output_bytes] {
        assert!((1024..=256 << 20).contains(&n));
    }
    // The client sends to `{url}/api/tools`: that must be the base's own
    // path plus the route, on the same host and port.
    let base = url::Url::parse(&c.main_server.url).expect("the base URL parses");
    let joined = url::Url::parse(&format!("{}/api/tools", c.main_server.url))
        .expect("the joined URL parses");
    assert_eq!(base.scheme(), "http");
    assert_eq!(
        (joined.host_str(), joined.port_or_known_default()),
        (base.host_str(), base.port_or_known_default()),
        "{:?}",
        c.main_server.url
    );
    assert_eq!(
        joined.path(),
        format!("{}/api/tools", base.path().trim_end_matches('/')),
        "base URL {:?}",
        c.main_server.url
    );
    assert_eq!(joined.query(), None, "{:?}", c.main_server.url);
});
