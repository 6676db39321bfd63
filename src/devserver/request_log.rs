//! The request log: every request that reaches the stand-in outside
//! `/__dev/`, with its method, path, query, body and arrival time, and the
//! status it got. Tests read it to assert what the sidecar sent (e.g. that
//! an idle client sends only GETs).
//!
//! Plain data guarded by `state.rs`; it never decides anything.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

/// One logged request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Arrival order, from 0, never reused (clearing the log keeps counting).
    pub seq: u64,
    pub method: String,
    pub path: String,
    /// The raw query string, without `?`.
    pub query: Option<String>,
    /// The body as JSON when it parses, else as text; `null` when empty.
    pub body: Value,
    /// Arrival time, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The status answered; `None` while the request is still in flight.
    pub status: Option<u16>,
}

impl RequestRecord {
    /// The body of a request as the log keeps it.
    pub(crate) fn body_value(bytes: &[u8]) -> Value {
        if bytes.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
    }
}

/// The log itself.
#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    records: Vec<RequestRecord>,
    next_seq: u64,
}

impl RequestLog {
    /// Appends a request and returns its `seq`.
    pub(crate) fn push(
        &mut self,
        method: &str,
        path: &str,
        query: Option<&str>,
        body: &[u8],
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.records.push(RequestRecord {
            seq,
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.map(str::to_owned),
            body: RequestRecord::body_value(body),
            at_unix_ms,
            status: None,
        });
        seq
    }

    /// Fills in the status of request `seq`, if it is still in the log.
    pub(crate) fn set_status(&mut self, seq: u64, status: u16) {
        if let Some(r) = self.records.iter_mut().rev().find(|r| r.seq == seq) {
            r.status = Some(status);
        }
    }

    pub(crate) fn records(&self) -> Vec<RequestRecord> {
        self.records.clone()
    }

    pub(crate) fn clear(&mut self) {
        self.records.clear();
    }
}
