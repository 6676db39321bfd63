//! The routing table: which tools the callback server serves, each with its
//! concurrency slots and statistics.
//!
//! A reload builds a whole new table from the desired state and swaps it in
//! at once; calls already running keep the route they started with. Slots
//! are carried over while a tool's `max_concurrency` is unchanged, and
//! statistics always are (by name), so a reload neither resets counters nor
//! frees a full tool's slots. Pure data: nothing here runs a call.

use std::collections::HashMap;
use std::sync::Arc;

use super::http_handler::{Endpoint, HttpClients};
use super::limits::Slots;
use super::stats::ToolStats;
use crate::desired::DesiredState;
use crate::manifest::{Handler, ToolSpec};

/// One served tool.
#[derive(Debug)]
pub(crate) struct Route {
    pub spec: Arc<ToolSpec>,
    /// An http handler's address, parsed here once rather than per call.
    pub endpoint: Option<Result<Endpoint, String>>,
    pub slots: Slots,
    pub stats: Arc<ToolStats>,
}

/// Every served tool, by name.
#[derive(Debug, Default)]
pub(crate) struct RouteTable {
    /// The sidecar's registration source, for messages.
    pub source: String,
    tools: HashMap<String, Arc<Route>>,
}

impl RouteTable {
    pub(crate) fn get(&self, tool: &str) -> Option<Arc<Route>> {
        self.tools.get(tool).cloned()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Arc<Route>)> {
        self.tools.iter()
    }

    /// The table for `desired`, reusing what `self` holds for tools that
    /// stay. A tool whose `max_concurrency` changed gets fresh slots; calls
    /// still holding old ones finish under the old limit. http handlers get
    /// their client from `clients`, so connections outlive a reload.
    pub(crate) fn rebuild(&self, desired: &DesiredState, clients: &HttpClients) -> RouteTable {
        let tools = desired
            .tools
            .iter()
            .map(|(name, tool)| {
                let old = self.tools.get(name);
                let slots = match old {
                    Some(r) if r.slots.limit() == tool.spec.max_concurrency => r.slots.clone(),
                    _ => Slots::new(tool.spec.max_concurrency),
                };
                let stats = old.map_or_else(Default::default, |r| r.stats.clone());
                let endpoint = match &tool.spec.handler {
                    Handler::Http(h) => Some(Endpoint::new(h, clients)),
                    Handler::Exec(_) | Handler::Mcp(_) => None,
                };
                let route = Route {
                    spec: tool.spec.clone(),
                    endpoint,
                    slots,
                    stats,
                };
                (name.clone(), Arc::new(route))
            })
            .collect();
        RouteTable {
            source: desired.source.clone(),
            tools,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{LoadContext, parse_manifest};
    use std::path::Path;
    use tokio::time::Instant;

    fn state(max: &str, names: &[&str]) -> DesiredState {
        let text: String = names
            .iter()
            .map(|n| {
                format!("[[tool]]\nname = \"{n}\"\ndescription = \"d\"\n{max}\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/w\" }}\n")
            })
            .collect();
        let f = parse_manifest(Path::new("/t/a.toml"), &text, &LoadContext::default());
        assert!(!f.has_errors(), "{:?}", f.diagnostics);
        DesiredState::assemble("plugin:t", &[f]).0
    }

    #[tokio::test]
    async fn a_reload_keeps_slots_and_stats_of_unchanged_tools() {
        let clients = HttpClients::default();
        let t1 =
            RouteTable::default().rebuild(&state("max_concurrency = 1", &["a", "b"]), &clients);
        let a1 = t1.get("a").unwrap();
        let held = a1.slots.acquire(Instant::now()).await;
        assert!(held.is_some());
        a1.stats
            .begin()
            .finish(super::super::stats::Outcome::Ok, None);

        let t2 = t1.rebuild(&state("max_concurrency = 1", &["a"]), &clients);
        let a2 = t2.get("a").unwrap();
        assert!(
            a2.slots.acquire(Instant::now()).await.is_none(),
            "the slot held before the reload is still held"
        );
        assert_eq!(a2.stats.snapshot().calls, 1);
        assert!(t2.get("b").is_none());

        let t3 = t2.rebuild(&state("max_concurrency = 2", &["a"]), &clients);
        let a3 = t3.get("a").unwrap();
        assert!(
            a3.slots.acquire(Instant::now()).await.is_some(),
            "a new limit gets new slots"
        );
        assert_eq!(a3.stats.snapshot().calls, 1, "stats survive a limit change");
    }
}
