//! The `neko-sidecar` binary: parse the command line, set up logging, call the
//! library, and map the result to an exit code. Nothing else lives here.
//!
//! Exit codes: 0 success; 1 `check` found errors or a command failed;
//! 78 (EX_CONFIG) the daemon's config or manifests are invalid. `status`:
//! 1 not every tool registered, 2 admin endpoint unreachable or bad config;
//! `call`: 1 the model would see an error, 2 the call could not be made.
//! The library's `commands` module runs each command and picks its code.

use std::process::ExitCode;

use clap::Parser;
use neko_sidecar::cli::Cli;

fn main() -> ExitCode {
    neko_sidecar::commands::main(Cli::parse())
}
