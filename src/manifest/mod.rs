//! Tool manifests: the declarative description of each tool a plugin offers.
//!
//! A manifest is a `*.toml` file with one or more `[[tool]]` tables. This
//! module owns the validated types (`ToolSpec`, `Handler`); `load` turns one
//! file into them with every problem located, `scan` finds the files, and
//! `schema` checks JSON Schemas, `import` reads the MCP server lists of
//! other programs (`[[mcp_import]]`). Nothing here talks to main_server.

mod fields;
pub(crate) mod import;
mod load;
mod mcp;
pub(crate) mod remote;
pub(crate) mod scan;
pub mod schema;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;

use crate::diag::Position;

pub use fields::{LoadContext, find_in_path, valid_name};
/// The JSON-with-comments reader of imported server lists, for the fuzz
/// target `jsonc`.
pub use import::node::{JsonError, Node as JsonNode, Value as JsonValue, parse_jsonc};
pub use load::{ManifestFile, load_file, parse_manifest};

/// The default JSON Schema when a tool takes no parameters, as main_server
/// itself defaults it.
pub(crate) fn default_parameters() -> Json {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Where a tool was declared, for messages ("tools/weather.toml:3:1").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
}

impl Origin {
    /// Where in its file, for a diagnostic.
    pub(crate) fn position(&self) -> Position {
        Position {
            line: self.line,
            col: self.col,
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.col)
    }
}

/// One validated tool: what main_server is told and how calls are served.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// `[A-Za-z0-9_.\-]{1,64}`, unique within one sidecar.
    pub name: String,
    pub description: String,
    /// A meta-validated JSON Schema whose root is `type: object`.
    pub parameters: Json,
    /// Compiled once per load; argument validation uses it on every call.
    pub validator: Arc<jsonschema::Validator>,
    /// In (0, 300]; both main_server's call timeout and our deadline base.
    pub timeout_seconds: f64,
    /// `None`: every role (main_server's `role: null`).
    pub role: Option<String>,
    pub handler: Handler,
    /// Check arguments against `parameters` before the handler runs.
    pub validate_arguments: bool,
    /// At most this many calls run at once; `None` is unbounded.
    pub max_concurrency: Option<NonZeroUsize>,
    pub origin: Origin,
}

impl ToolSpec {
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_seconds)
    }
}

/// How a call reaches the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// POST the callback JSON to an HTTP endpoint of the plugin.
    Http(HttpHandler),
    /// Run a process per call, callback JSON on stdin, answer on stdout.
    Exec(ExecHandler),
    /// A tool of an `[[mcp_server]]`: `tools/call` on that server's session.
    Mcp(McpToolHandler),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpToolHandler {
    /// The `[[mcp_server]]`'s name.
    pub server: String,
    /// The tool's name on the MCP server (without our prefix).
    pub tool: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpHandler {
    /// The request URL. With `unix_socket`, only its path and query matter.
    pub url: String,
    /// Connect through this unix socket instead of TCP (absolute path).
    pub unix_socket: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecHandler {
    /// argv; `command[0]` is a bare name looked up in PATH or an absolute
    /// path (relative paths with a `/` were resolved against `cwd`).
    pub command: Vec<String>,
    /// Absolute working directory (default: the manifest's folder).
    pub cwd: PathBuf,
    /// Added to what is inherited (`inherit_env`).
    pub env: BTreeMap<String, String>,
    /// What of the sidecar's own environment the process gets.
    pub inherit_env: InheritEnv,
}

/// `inherit_env` of an exec handler: which of the sidecar's environment
/// variables its processes get (besides the manifest's `env` and
/// `NEKO_TOOL_NAME`, `NEKO_CALL_ID`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum InheritEnv {
    /// `true` (the default): all of them, except systemd's notify variables.
    #[default]
    All,
    /// `false` (none), or a list of names (those, when set).
    Only(Vec<String>),
}

impl std::fmt::Display for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // URLs as `remote::redact_url` shows them, wherever this is
            // shown (`/status`, the inspector, the log).
            Handler::Http(h) => match &h.unix_socket {
                Some(s) => write!(
                    f,
                    "http {} via unix:{}",
                    remote::redact_url(&h.url),
                    s.display()
                ),
                None => write!(f, "http {}", remote::redact_url(&h.url)),
            },
            Handler::Exec(e) => {
                let words: Vec<String> = e.command.iter().map(|w| remote::redact_word(w)).collect();
                write!(f, "exec {}", words.join(" "))
            }
            Handler::Mcp(m) => write!(f, "mcp {} tool {}", m.server, m.tool),
        }
    }
}

/// One validated `[[mcp_server]]`: an MCP server whose tools become ours.
///
/// `PartialEq` decides whether a reload restarts the server: any change to
/// how it is reached or what its tools are made into does.
#[derive(Clone, PartialEq)]
pub struct McpServerSpec {
    /// `[A-Za-z0-9_.\-]{1,64}`, unique within one sidecar; for logs, status
    /// and the default prefix.
    pub name: String,
    pub transport: McpTransport,
    /// Put before each MCP tool's name to make ours (default `name + "_"`).
    pub prefix: String,
    /// Only these MCP tool names, when given.
    pub include: Option<Vec<String>>,
    /// Never these MCP tool names.
    pub exclude: Vec<String>,
    /// As for `[[tool]]`: each tool's registered timeout and our deadline.
    pub timeout_seconds: f64,
    /// How long one start may take to answer its handshake (each protocol
    /// generation tried gets it whole).
    pub startup_timeout_seconds: f64,
    pub role: Option<String>,
    /// At most this many calls at once on this server, across its tools.
    pub max_concurrency: Option<NonZeroUsize>,
    pub origin: Origin,
}

/// `startup_timeout_seconds` when the table has none.
pub(crate) const DEFAULT_STARTUP_TIMEOUT_SECONDS: f64 = 120.0;
/// The largest `startup_timeout_seconds` allowed: an hour.
pub(crate) const MAX_STARTUP_TIMEOUT_SECONDS: f64 = 3600.0;

impl McpServerSpec {
    /// How long one start may take to answer its handshake.
    pub(crate) fn startup_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.startup_timeout_seconds)
    }

    /// Whether the MCP tool `name` is offered (after include/exclude).
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.include
            .as_ref()
            .is_none_or(|inc| inc.iter().any(|i| i == name))
            && !self.exclude.iter().any(|e| e == name)
    }
}

/// Secrets (`${VAR}` in `env` and `headers`) never reach a log through
/// `Debug`: values are left out.
impl std::fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("transport", &format_args!("{}", self.transport))
            .field("prefix", &self.prefix)
            .field("origin", &format_args!("{}", self.origin))
            .finish_non_exhaustive()
    }
}

/// A server of an imported file that the sidecar cannot reach (https, a
/// remote host): never started, reported by `check` and `status` with its
/// reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnbridgedServer {
    pub name: String,
    /// "sse URL" or "http URL".
    pub transport: String,
    pub reason: String,
    /// Its entry in the imported file.
    pub origin: Origin,
}

/// How the sidecar reaches an MCP server.
#[derive(Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// As for an exec handler: a bare name is looked up in PATH, a
        /// relative path was made absolute against `cwd`.
        command: Vec<String>,
        cwd: PathBuf,
        /// Added to the sidecar's environment, `${VAR}`s expanded.
        env: BTreeMap<String, String>,
    },
    /// A server already running at `url`, reached over HTTP with these
    /// headers (`${VAR}`s expanded), by the transport `kind` says.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        kind: HttpKind,
        /// TLS trust, proxy and timeouts.
        options: HttpOptions,
    },
}

/// How a `url` server's client connects: `ca_file`, `proxy`,
/// `connect_timeout_seconds`, `read_timeout_seconds` of its table.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    /// Certificates (PEM) trusted for this server besides the OS's.
    pub ca_file: Option<PathBuf>,
    pub proxy: ProxySetting,
    /// For the TCP connection and the TLS handshake together.
    pub connect_timeout: Duration,
    /// Longest silence while reading an answer or the event stream.
    pub read_timeout: Duration,
    /// How it signs in when it answers 401 (`oauth`).
    pub oauth: OAuthOptions,
}

/// A `url` server's `oauth`: `false` never signs in (a 401 stays an
/// error); a table (`[mcp_server.oauth]`) names a registered client and
/// the scopes to ask for; absent, a 401 starts the MCP specification's
/// discovery with a client registered dynamically.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthOptions {
    pub enabled: bool,
    pub client_id: Option<String>,
    /// `${VAR}` expanded; never shown.
    pub client_secret: Option<String>,
    /// Asked for instead of the challenge's `scope` or the resource's
    /// `scopes_supported`.
    pub scopes: Option<Vec<String>>,
}

impl Default for OAuthOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            client_id: None,
            client_secret: None,
            scopes: None,
        }
    }
}

/// The secret is never shown, not even through `Debug`.
impl std::fmt::Debug for OAuthOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthOptions")
            .field("enabled", &self.enabled)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// `connect_timeout_seconds` when the table has none.
pub(crate) const DEFAULT_CONNECT_TIMEOUT_SECONDS: f64 = 10.0;
/// `read_timeout_seconds` when the table has none.
pub(crate) const DEFAULT_READ_TIMEOUT_SECONDS: f64 = 300.0;

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            ca_file: None,
            proxy: ProxySetting::System,
            connect_timeout: Duration::from_secs_f64(DEFAULT_CONNECT_TIMEOUT_SECONDS),
            read_timeout: Duration::from_secs_f64(DEFAULT_READ_TIMEOUT_SECONDS),
            oauth: OAuthOptions::default(),
        }
    }
}

/// Which proxy a `url` server is reached through (loopback never is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxySetting {
    /// `HTTPS_PROXY`/`ALL_PROXY`/`NO_PROXY`, and the Windows and macOS
    /// settings.
    System,
    /// `proxy = false`: straight to the server.
    Off,
    /// `proxy = "URL"` (`${VAR}`s expanded; it may hold a password).
    Url(String),
}

/// Which of MCP's two HTTP transports a `url` server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpKind {
    /// Not said: what the MCP specification asks of clients for backwards
    /// compatibility (2025-03-26 and later, "Transports", "Backwards
    /// Compatibility"): Streamable HTTP first, and when the POST of the
    /// handshake gets an HTTP 4xx, the HTTP+SSE transport by a GET.
    Detect,
    /// Streamable HTTP (MCP 2025-03-26 and later) only.
    StreamableHttp,
    /// The legacy HTTP+SSE transport (MCP 2024-11-05) only: a GET opens an
    /// event stream whose `endpoint` event says where to POST.
    Sse,
}

impl HttpKind {
    /// The word operators see before the URL ("sse URL", "http URL").
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Sse => "sse",
            Self::Detect | Self::StreamableHttp => "http",
        }
    }
}

impl std::fmt::Display for McpTransport {
    /// What an operator may see: the command or the URL, never env or
    /// header values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio { command, .. } => write!(f, "stdio {}", command.join(" ")),
            McpTransport::Http { url, kind, .. } => {
                write!(f, "{} {}", kind.label(), remote::redact_url(url))
            }
        }
    }
}
