//! The `neko-sidecar` binary: parse the command line, set up logging, call the
//! library, and map the result to an exit code. Nothing else lives here.
//!
//! Exit codes: 0 success; 1 `check` found errors or a command failed;
//! 78 (EX_CONFIG) the daemon's config or manifests are invalid.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use neko_sidecar::cli::{Cli, Command};

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
        Command::DevServer(_args) => ExitCode::SUCCESS,
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
