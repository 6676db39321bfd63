//! The shutdown clear: remove every tool of our source from main_server,
//! best effort, within a deadline.
//!
//! One `POST /api/tools/clear` round trip (as the Python SDK does), falling
//! back to one unregister per known name when the clear is refused or
//! answers `ok:false`. It never retries with backoff: shutdown has a
//! deadline, and a tool left behind is found and re-registered (or removed)
//! by the next start anyway.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::client::{CallError, CallErrorKind, Client};

/// How our tools were removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearMethod {
    /// One `clear` by source.
    Clear,
    /// One `unregister` per name, after the clear failed.
    PerName,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClearReport {
    pub method: ClearMethod,
    /// (tool, role) pairs for `Clear`; names removed for `PerName`.
    pub removed: u64,
    /// Per-name failures of the fallback.
    pub failed: Vec<(String, CallError)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClearError {
    #[error("clearing our tools did not finish within {0:?}")]
    Deadline(Duration),
    /// Nobody to clear with: main_server forgets everything when it comes
    /// back anyway, unless it is only unreachable to us.
    #[error("cannot clear our tools: {0}")]
    Unreachable(CallError),
}

/// Clears every tool of `source`, falling back to unregistering `names`
/// (at most `max_in_flight` at once); everything within `deadline`.
pub async fn clear_source(
    client: &Client,
    source: &str,
    names: &BTreeSet<String>,
    max_in_flight: usize,
    deadline: Duration,
) -> Result<ClearReport, ClearError> {
    let work = async {
        let error = match client.clear(source).await {
            Ok(reply) => {
                tracing::info!(
                    source,
                    removed = reply.removed,
                    "cleared our tools from main_server"
                );
                return Ok(ClearReport {
                    method: ClearMethod::Clear,
                    removed: reply.removed,
                    failed: Vec::new(),
                });
            }
            Err(e) if matches!(e.kind, CallErrorKind::Unreachable(_)) => {
                return Err(ClearError::Unreachable(e));
            }
            Err(e) => e,
        };
        tracing::warn!(%error, names = names.len(), "clear failed; unregistering our tools one by one");
        Ok(unregister_each(client, names, max_in_flight.max(1)).await)
    };
    tokio::time::timeout(deadline, work)
        .await
        .map_err(|_| ClearError::Deadline(deadline))?
}

async fn unregister_each(client: &Client, names: &BTreeSet<String>, max: usize) -> ClearReport {
    let mut set = JoinSet::new();
    let mut results = Vec::with_capacity(names.len());
    for name in names {
        if set.len() >= max
            && let Some(done) = set.join_next().await
        {
            results.push(done);
        }
        let client = client.clone();
        let name = name.clone();
        set.spawn(async move {
            let r = client.unregister(&name, None).await;
            (name, r)
        });
    }
    while let Some(done) = set.join_next().await {
        results.push(done);
    }
    let mut report = ClearReport {
        method: ClearMethod::PerName,
        removed: 0,
        failed: Vec::new(),
    };
    for (name, result) in results.into_iter().flatten() {
        match result {
            Ok(reply) => report.removed += reply.removed,
            Err(e) => report.failed.push((name, e)),
        }
    }
    report
}
