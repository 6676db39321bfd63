//! The MCP handler end to end: `[[mcp_server]]` manifests whose server is
//! the stand-in MCP server (`neko-sidecar dev-mcp` as the sidecar's child on
//! stdio, or `devmcp::serve_http`/`serve_sse` in the test), the daemon in-process (the
//! real binary where signals, exit codes or `check` are the point), and
//! every call made through the stand-in main_server as the model makes it,
//! so what is asserted is what the model reads.
//!
//! `stdio`: which tools main_server holds (prefix, filters, paging,
//! list_changed, rejections, both protocol generations, a manifest edit);
//! `answers`: each kind of result and the deadline; `process`: restarts,
//! signals and the child's environment; `http`: Streamable HTTP and its
//! outage; `sse`: the legacy HTTP+SSE transport, its cut stream, the
//! fallback to it, and a real server of the Python SDK; `probe`: `check
//! --probe`; `status`: `/status` and `/metrics`; `slow`: servers slow to give their first answer, both generations, both
//! transports, under `run` and `check --probe`;
//! `remote`: servers over https (a test CA, `ca_file`, refused
//! certificates), secrets, timeouts and proxies;
//! `import`: `[[mcp_import]]` of Claude Desktop, VS Code and N.E.K.O files,
//! and live edits of them; `start_failure`: a server that fails to start
//! says why (its stderr's end and a hint) in `/status`, the inspector and
//! `check --probe`.

mod answers;
mod http;
mod import;
// A Python server of the SDK's auth support.
#[cfg(unix)]
mod oauth;
mod oauth_login;
mod probe;
#[cfg(target_os = "linux")]
mod process;
mod remote;
mod slow;
mod sse;
// `sh` scripts as servers.
#[cfg(unix)]
mod start_failure;
mod status;
mod stdio;
