//! Dead-plugin eviction, the counting half: consecutive connection-level
//! failures per (source, `scheme://host:port`), for `plugin:` sources only.
//! Any other outcome, a read timeout included, resets the count to zero.
//!
//! Pure: it is told the outcome of each callback and answers whether the
//! tools of that source on that origin must go now. It never removes tools
//! itself (`Registry::evict` does, from every role and from the ledger) and
//! never does I/O.

use std::collections::HashMap;

/// Failures in a row that evict a plugin's tools.
pub(crate) const EVICTION_THRESHOLD: u32 = 3;

/// Only sources with this prefix are ever evicted.
pub(crate) const EVICTABLE_PREFIX: &str = "plugin:";

/// What one callback attempt came to, as far as eviction cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallOutcome {
    /// Refused or connect timeout: the plugin looks dead.
    ConnectionFailure,
    /// An HTTP answer arrived, whatever its status or envelope.
    Completed,
    /// A read timeout or another failure that is not a connect failure:
    /// the plugin was reached or may have been, so it resets the count like
    /// a completed exchange (upstream only counts connect failures in a row).
    Inconclusive,
}

/// Consecutive-failure counts, keyed by (source, origin).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EvictionCounter {
    failures: HashMap<(String, String), u32>,
}

impl EvictionCounter {
    /// Records one outcome; true when the tools of `source` on `origin`
    /// must be evicted now (the count then starts again from zero).
    pub(crate) fn record(&mut self, source: &str, origin: &str, outcome: CallOutcome) -> bool {
        if !source.starts_with(EVICTABLE_PREFIX) {
            return false;
        }
        let key = (source.to_owned(), origin.to_owned());
        match outcome {
            CallOutcome::Completed | CallOutcome::Inconclusive => {
                self.failures.remove(&key);
                false
            }
            CallOutcome::ConnectionFailure => {
                let count = self.failures.entry(key.clone()).or_insert(0);
                *count += 1;
                if *count >= EVICTION_THRESHOLD {
                    self.failures.remove(&key);
                    true
                } else {
                    false
                }
            }
        }
    }

    /// The current count for a key, for tests and the snapshot.
    #[cfg(test)]
    pub(crate) fn count(&self, source: &str, origin: &str) -> u32 {
        self.failures
            .get(&(source.to_owned(), origin.to_owned()))
            .copied()
            .unwrap_or(0)
    }
}

/// `scheme://host:port` of a callback URL, the default port filled in;
/// `None` for a URL that cannot be called at all.
pub(crate) fn origin_of(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    // host_str keeps the brackets of an IPv6 host, so the origin stays
    // unambiguous.
    let host = parsed.host_str()?;
    Some(format!(
        "{}://{}:{}",
        parsed.scheme(),
        host,
        parsed.port_or_known_default()?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use CallOutcome::*;

    const P: &str = "plugin:weather";
    const O: &str = "http://127.0.0.1:7000";

    #[test]
    fn third_consecutive_connection_failure_evicts() {
        let mut c = EvictionCounter::default();
        assert!(!c.record(P, O, ConnectionFailure));
        assert!(!c.record(P, O, ConnectionFailure));
        assert!(c.record(P, O, ConnectionFailure));
        assert_eq!(c.count(P, O), 0);
    }

    #[test]
    fn a_completed_exchange_resets_the_count() {
        let mut c = EvictionCounter::default();
        c.record(P, O, ConnectionFailure);
        c.record(P, O, ConnectionFailure);
        assert!(!c.record(P, O, Completed));
        assert!(!c.record(P, O, ConnectionFailure));
        assert!(!c.record(P, O, ConnectionFailure));
        assert_eq!(c.count(P, O), 2);
    }

    #[test]
    fn only_plugin_sources_count_and_keys_are_separate() {
        let mut c = EvictionCounter::default();
        for _ in 0..5 {
            assert!(!c.record("external", O, ConnectionFailure));
        }
        c.record(P, O, ConnectionFailure);
        c.record(P, O, ConnectionFailure);
        assert!(!c.record(P, "http://127.0.0.1:7001", ConnectionFailure));
        assert!(!c.record("plugin:other", O, ConnectionFailure));
        assert!(c.record(P, O, ConnectionFailure));
    }

    #[test]
    fn origins_fill_in_default_ports() {
        assert_eq!(
            origin_of("http://127.0.0.1/x").as_deref(),
            Some("http://127.0.0.1:80")
        );
        assert_eq!(
            origin_of("https://LOCALHOST/x").as_deref(),
            Some("https://localhost:443")
        );
        assert_eq!(
            origin_of("http://[::1]:9/x?q").as_deref(),
            Some("http://[::1]:9")
        );
        assert_eq!(origin_of("not a url"), None);
    }
}
