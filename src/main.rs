//! The `neko-sidecar` binary: parse the command line, set up logging, call the
//! library, and map the result to an exit code. Nothing else lives here.
//!
//! Exit codes: 0 success; 1 `check` found errors or a command failed;
//! 78 (EX_CONFIG) the daemon's config or manifests are invalid.

use std::future::Future;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use neko_sidecar::cli::{Cli, Command};
use neko_sidecar::config::LogFormat;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => {
            let loaded = neko_sidecar::check::load_all(&args.config);
            let (text, ok) = neko_sidecar::check::render(&loaded, args.verbose);
            print_or_exit(&text);
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::DevServer(args) => {
            neko_sidecar::logging::init(LogFormat::Text, "info", None);
            block_on(async move { Ok(neko_sidecar::devserver::run_cli(args).await?) })
        }
    }
}

/// Runs a future on a fresh multi-threaded runtime and maps its result.
fn block_on(fut: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("neko-sidecar: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("neko-sidecar: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints to stdout; a closed pipe (`check | head`) is not an error.
fn print_or_exit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("neko-sidecar: cannot write to stdout: {e}");
        }
    }
}
