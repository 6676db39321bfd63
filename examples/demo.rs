//! `cargo run --example demo`: the README's quick-start demo, on the build
//! that `cargo test --all-targets` makes.
//!
//! Cargo builds an example with the dev-dependencies and their features,
//! as it builds the tests, so the two quick-start commands share one build
//! of every dependency, and `cargo test --all-targets` (which builds the
//! examples too) leaves this one built; `cargo run -- demo` would build the
//! dependencies a second time with other features (BENCHMARKS.md, "Build").
//! It is the `neko-sidecar` executable itself, with `demo` as its command
//! when none is given: `cargo run --example demo -- --keep-running` keeps
//! everything up, and the `status` and `call` commands the demo prints to
//! try run through it too.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use neko_sidecar::cli::Cli;

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let commands: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let named = args
        .get(1)
        .and_then(|a| a.to_str())
        .is_some_and(|a| commands.iter().any(|c| c == a) || a == "help");
    if !named {
        args.insert(1, "demo".into());
    }
    neko_sidecar::commands::main(Cli::parse_from(args))
}
