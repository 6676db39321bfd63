//! The budget of one `tools/list` (every page of it): pages, bytes and
//! tools, each with the reason a server past it reads in its status; and
//! an rmcp request error in words. Pure: the session does the asking.
//!
//! Before issue 49 a server answering `nextCursor` for ever took 4.66 GB
//! within the listing's 20 s, and one listing 100,000 tools took 30 s of
//! CPU and 56,759 registrations.

use rmcp::ServiceError;
use rmcp::model::ListToolsResult;

use super::tools::Listed;

/// The most pages one listing may take; past it the listing is refused.
pub(crate) const MAX_PAGES: usize = 100;
/// The most bytes (of tools as JSON) one listing may take; past it the
/// listing is refused.
pub(crate) const MAX_BYTES: usize = 16 * 1024 * 1024;
/// The most tools one server may offer; the first are kept.
pub(crate) const MAX_TOOLS: usize = 1000;

/// The pages of one listing so far.
#[derive(Debug, Default)]
pub(crate) struct Pages {
    pub listing: Vec<Listed>,
    /// The shortest time to live a page gave.
    pub ttl_ms: Option<u64>,
    /// Tools listed past [`MAX_TOOLS`], not kept.
    pub over: usize,
    pages: usize,
    bytes: usize,
}

impl Pages {
    /// Adds one page; returns the cursor of the next, or why the listing
    /// is refused.
    pub(crate) fn add(&mut self, page: ListToolsResult) -> Result<Option<String>, String> {
        self.pages += 1;
        self.ttl_ms = match (self.ttl_ms, page.ttl_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for tool in &page.tools {
            let Ok(wire) = serde_json::to_value(tool) else {
                continue;
            };
            self.bytes += approximate_size(&wire);
            if self.bytes > MAX_BYTES {
                return Err(format!(
                    "its tools take more than {} MiB (at page {}); a server's listing may take at most that",
                    MAX_BYTES / (1024 * 1024),
                    self.pages
                ));
            }
            if self.listing.len() >= MAX_TOOLS {
                self.over += 1;
                continue;
            }
            if let Some(listed) = Listed::from_wire(&wire) {
                self.listing.push(listed);
            }
        }
        let next = page.next_cursor.filter(|c| !c.is_empty());
        if next.is_some() && self.pages >= MAX_PAGES {
            return Err(format!(
                "it gave a next page ({MAX_PAGES} pages so far, {} tools); a listing may take at most {MAX_PAGES} pages",
                self.listing.len() + self.over
            ));
        }
        Ok(next)
    }
}

/// About how many bytes `v` takes as JSON, without writing it.
fn approximate_size(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Null | serde_json::Value::Bool(_) => 5,
        serde_json::Value::Number(_) => 8,
        serde_json::Value::String(s) => s.len() + 2,
        serde_json::Value::Array(items) => {
            2 + items.iter().map(|i| approximate_size(i) + 1).sum::<usize>()
        }
        serde_json::Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + approximate_size(v))
                .sum::<usize>()
        }
    }
}

/// An rmcp request error in words, never a Rust type name.
pub(crate) fn service_error(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(e) => {
            format!("the server answered with error {}: {}", e.code.0, e.message)
        }
        ServiceError::TransportSend(e) => format!("the request could not be sent ({e})"),
        ServiceError::TransportClosed => "the connection closed before the answer".into(),
        ServiceError::UnexpectedResponse => {
            "the server answered with something else than a tool list".into()
        }
        ServiceError::Timeout { timeout } => format!("no answer within {} s", timeout.as_secs()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Tool;
    use std::sync::Arc;

    fn page(names: impl IntoIterator<Item = String>, next: Option<&str>) -> ListToolsResult {
        let tools = names
            .into_iter()
            .map(|n| Tool::new(n, "d", Arc::new(serde_json::Map::new())))
            .collect();
        let mut p = ListToolsResult::with_all_items(tools);
        p.next_cursor = next.map(str::to_owned);
        p
    }

    #[test]
    fn an_endless_listing_is_refused_at_its_page_limit() {
        let mut pages = Pages::default();
        for i in 0..MAX_PAGES - 1 {
            assert_eq!(
                pages.add(page([format!("t{i}")], Some("more"))),
                Ok(Some("more".into()))
            );
        }
        assert_eq!(
            pages.add(page(["last".into()], Some("more"))),
            Err("it gave a next page (100 pages so far, 100 tools); a listing may take at most 100 pages".into())
        );
    }

    #[test]
    fn tools_past_the_limit_are_counted_not_kept_and_bytes_are_bounded() {
        let mut pages = Pages::default();
        let next = pages.add(page((0..MAX_TOOLS + 5).map(|i| format!("t{i}")), None));
        assert_eq!(next, Ok(None));
        assert_eq!((pages.listing.len(), pages.over), (MAX_TOOLS, 5));

        let mut pages = Pages::default();
        let big = Tool::new(
            "big",
            "x".repeat(MAX_BYTES),
            Arc::new(serde_json::Map::new()),
        );
        let refused = pages.add(ListToolsResult::with_all_items(vec![big]));
        assert_eq!(
            refused,
            Err("its tools take more than 16 MiB (at page 1); a server's listing may take at most that".into())
        );
    }
}
