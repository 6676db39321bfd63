//! The MCP handler end to end: `[[mcp_server]]` manifests whose server is
//! the stand-in MCP server (`neko-sidecar dev-mcp` as the sidecar's child on
//! stdio, or `devmcp::serve_http` in the test), the daemon in-process (the
//! real binary where signals, exit codes or `check` are the point), and
//! every call made through the stand-in main_server as the model makes it,
//! so what is asserted is what the model reads.
//!
//! `stdio`: which tools main_server holds (prefix, filters, paging,
//! list_changed, rejections, both protocol generations, a manifest edit);
//! `answers`: each kind of result and the deadline; `process`: restarts,
//! signals and the child's environment; `http`: Streamable HTTP and its
//! outage; `probe`: `check --probe`; `status`: `/status` and `/metrics`.

mod answers;
mod http;
mod probe;
#[cfg(target_os = "linux")]
mod process;
mod status;
mod stdio;
