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
use neko_sidecar::commands::Invocation;

/// mimalloc instead of glibc's malloc: every call allocates and frees a
/// few dozen small buffers, which glibc does more slowly. Built with
/// `no_thp`: transparent huge pages swell an idle daemon's arenas
/// (BENCHMARKS.md, benchmark 1, has both figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let invocation = match Invocation::prepare(Cli::parse()) {
        Ok(invocation) => invocation,
        Err(code) => return code,
    };
    if let Some(log) = invocation.log_settings() {
        neko_sidecar::logging::init(log.format, &log.level, log.flag_level.as_deref());
    }
    invocation.run()
}
