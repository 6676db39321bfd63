//! Command-line surface: the raw clap definitions of every subcommand.
//!
//! This module only describes arguments; it never does I/O. `main.rs` parses
//! them, and `commands` hands each subcommand to the library function that
//! owns it.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The default agent config path, as packaged for systemd.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/neko-sidecar/agent.toml";

#[derive(Debug, Parser)]
#[command(
    name = "neko-sidecar",
    version,
    about = "Keeps the LLM tools of non-Rust plugins registered with the N.E.K.O main_server and serves their callbacks"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate the agent config and every tool manifest, reporting all problems.
    Check(CheckArgs),
    /// Run the stand-in main_server (the tool API of N.E.K.O) for development and tests.
    DevServer(DevServerArgs),
    /// Run the stand-in MCP server (on stdio, or Streamable HTTP with --http)
    /// for development and tests.
    DevMcp(DevMcpArgs),
    /// Run a stand-in exec handler for development and tests: it answers
    /// with what it read on stdin, so the answer is the call exactly as an
    /// exec handler receives it. Unlike `cat`, it exists on every platform.
    DevHandler,
    /// Run the sidecar: keep the manifests' tools registered and serve their calls.
    Run(RunArgs),
    /// Show the whole idea end to end: stand-in main_server, example tools, sidecar.
    Demo(DemoArgs),
    /// Show a running sidecar's tools, main_server link and manifest errors.
    /// Exit 0: all tools registered; 1: not; 2: admin endpoint unreachable or bad config.
    Status(StatusArgs),
    /// Call a tool through the running sidecar as main_server would, and
    /// print what the model would see. Exit 0: success; 1: the model sees an
    /// error; 2: the call could not be made.
    Call(CallArgs),
    /// Print the JSON Schema of a tool manifest or of the agent config, for
    /// editors that validate and complete TOML (taplo, VS Code's Even Better
    /// TOML): point a file at it with a `#:schema PATH` first line.
    Schema(SchemaArgs),
    /// Sign in to (or out of) the remote MCP servers that need OAuth, and
    /// list their sign-ins, through the running sidecar.
    Auth(AuthArgs),
}

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Which file's schema.
    #[arg(value_enum)]
    pub of: SchemaOf,
}

/// The files that have a schema.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaOf {
    /// A tool manifest: `[[tool]]`, `[[mcp_server]]` and `[[mcp_import]]` tables.
    Manifest,
    /// The agent config (`--config`).
    Config,
}

#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub action: AuthAction,
    /// Path of the agent config file (where `[admin] listen` is read).
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH, env = "NEKO_SIDECAR_CONFIG", global = true)]
    pub config: PathBuf,
    /// The admin endpoint, e.g. `127.0.0.1:48931`; overrides the config.
    #[arg(long, global = true)]
    pub admin: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum AuthAction {
    /// Print the sign-in link of the MCP server NAME and open a browser
    /// where there is one; without one, paste back the address the browser
    /// ended on. Exit 0: signed in; 1: refused; 2: the sidecar unreachable.
    Login {
        name: String,
        /// Only print the link.
        #[arg(long)]
        no_browser: bool,
    },
    /// Revoke the sign-in of the MCP server NAME where its authorization
    /// server offers revocation, and forget it.
    Logout { name: String },
    /// Each MCP server's sign-in: its state and expiry, never a token.
    List,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Path of the agent config file (where `[admin] listen` is read).
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH, env = "NEKO_SIDECAR_CONFIG")]
    pub config: PathBuf,
    /// The admin endpoint, e.g. `127.0.0.1:48931`; overrides the config.
    #[arg(long)]
    pub admin: Option<String>,
    /// Print the raw `/status` JSON instead of the table (with `--calls`,
    /// the call history's JSON).
    #[arg(long)]
    pub json: bool,
    /// Print the last calls the model made (tool, arguments, outcome, what
    /// the model read), newest first, instead of the status.
    #[arg(long)]
    pub calls: bool,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The tool's name.
    pub tool: String,
    /// The arguments as JSON text, e.g. '{"city": "Tokyo"}'. Default: {}.
    #[arg(long)]
    pub args: Option<String>,
    /// The model's argument text verbatim, JSON or not (wins over --args),
    /// to see how a tool copes with what a model may send.
    #[arg(long, conflicts_with = "args")]
    pub raw_args: Option<String>,
    /// Path of the agent config file (where `[admin] listen` is read, and
    /// `token_file`, with which `call` checks it talks to this sidecar).
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH, env = "NEKO_SIDECAR_CONFIG")]
    pub config: PathBuf,
    /// The admin endpoint, e.g. `127.0.0.1:48931`; overrides the config.
    #[arg(long)]
    pub admin: Option<String>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Leave everything running after the story, until Ctrl-C.
    #[arg(long)]
    pub keep_running: bool,
    /// Write each step's checked outcome as JSON to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Show the sidecar's own log lines (info level) between the narration.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Path of the agent config file.
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH, env = "NEKO_SIDECAR_CONFIG")]
    pub config: PathBuf,
    /// Log level or tracing filter, overriding RUST_LOG and `[log] level`.
    #[arg(long)]
    pub log_level: Option<String>,
    /// Log format, overriding `[log] format`.
    #[arg(long, value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// Stop (as on SIGTERM: tools cleared, calls drained) when stdin ends
    /// or cannot be read: for a parent that starts the sidecar with a pipe
    /// as its stdin and holds the other end, so that the sidecar stops
    /// when the parent closes it or dies (N.E.K.O's plugin does so).
    #[arg(long)]
    pub stop_on_stdin_eof: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Path of the agent config file.
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH, env = "NEKO_SIDECAR_CONFIG")]
    pub config: PathBuf,
    /// Also list every tool that would be registered, with its fingerprint.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Also start each MCP server once, list its tools, report every tool
    /// main_server or the manifest rules would refuse, and stop it.
    #[arg(long)]
    pub probe: bool,
}

#[derive(Debug, Args)]
pub struct DevServerArgs {
    /// Address to listen on. main_server itself listens on 127.0.0.1:48911.
    #[arg(long, default_value = "127.0.0.1:48911")]
    pub listen: SocketAddr,
    /// Comma-separated role (character) names the stand-in serves.
    #[arg(long, value_delimiter = ',', default_value = "小八,Lanlan")]
    pub roles: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DevMcpArgs {
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio, and print
    /// that URL on stdout once bound (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Serve the legacy HTTP+SSE transport (MCP 2024-11-05) at
    /// http://ADDR/sse instead of stdio, and print that URL on stdout once
    /// bound (port 0 picks a free port).
    #[arg(long, value_name = "ADDR", conflicts_with = "http")]
    pub sse: Option<SocketAddr>,
    /// List tools in pages of at most N, with a cursor to the next page.
    #[arg(long, value_name = "N")]
    pub page_size: Option<NonZeroUsize>,
    /// Behave as a server of the 2025-11-25 generation: answer
    /// server/discover with method-not-found, so clients use initialize.
    #[arg(long)]
    pub legacy: bool,
    /// Also list a tool whose name is 60 characters long.
    #[arg(long)]
    pub long_name: bool,
    /// Also list a tool whose input schema is not valid JSON Schema.
    #[arg(long)]
    pub bad_schema: bool,
    /// Answer nothing for MS milliseconds after starting (no input read on
    /// stdio, no connection taken over HTTP), as a server that starts slowly.
    #[arg(long, value_name = "MS")]
    pub first_answer_delay_ms: Option<u64>,
    /// Misbehave as a hostile server does, for tests and benchmarks of the
    /// sidecar's budgets (bounded: each ends on its own).
    #[arg(long, value_name = "NAME")]
    pub fault: Option<crate::devmcp::Fault>,
}
