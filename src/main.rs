//! The `neko-sidecar` binary: parse the command line, set up logging, call the
//! library, and map the result to an exit code. Nothing else lives here.

use clap::Parser;
use neko_sidecar::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(_args) => std::process::ExitCode::SUCCESS,
        Command::DevServer(args) => dev_server(args),
    }
}

/// `neko-sidecar dev-server`: the stand-in main_server until Ctrl-C. Exit
/// code 1 when it cannot start (e.g. the port is taken).
fn dev_server(args: neko_sidecar::cli::DevServerArgs) -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(neko_sidecar::devserver::run_cli(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
