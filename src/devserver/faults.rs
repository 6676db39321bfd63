//! The faults a test can switch on: storage-blocked mode (409), failing the
//! next N `/api/*` requests, delaying `/api/*` answers, and making one role's
//! sync fail.
//!
//! Plain data guarded by `state.rs`; it never sleeps or answers requests
//! itself, the HTTP layer asks it what to do.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::http::StatusCode;

/// Every fault currently switched on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Faults {
    /// While on, every `/api/*` route answers 409 `storage_startup_blocked`.
    pub storage_blocked: bool,
    /// How many of the next `/api/*` requests fail, and with which status.
    pub fail_next: Option<(u32, StatusCode)>,
    /// Added to every `/api/*` answer, after the request took effect: a slow
    /// server whose writes still happen when the client gives up.
    pub delay: Duration,
    /// Roles whose per-role sync fails: the registry is still written for
    /// them (as upstream does) but they report in `failed_roles`.
    pub failing_roles: BTreeSet<String>,
}

impl Faults {
    /// Consumes one injected failure, if any is pending.
    pub(crate) fn take_failure(&mut self) -> Option<StatusCode> {
        let (left, status) = self.fail_next?;
        self.fail_next = (left > 1).then(|| (left - 1, status));
        Some(status)
    }

    pub(crate) fn role_sync_fails(&self, role: &str) -> bool {
        self.failing_roles.contains(role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_next_counts_down_to_nothing() {
        let mut f = Faults {
            fail_next: Some((2, StatusCode::BAD_GATEWAY)),
            ..Faults::default()
        };
        assert_eq!(f.take_failure(), Some(StatusCode::BAD_GATEWAY));
        assert_eq!(f.take_failure(), Some(StatusCode::BAD_GATEWAY));
        assert_eq!(f.take_failure(), None);
        assert_eq!(f.fail_next, None);
    }
}
