//! The whole daemon against the stand-in: end to end through the example
//! handlers, recovery, manifest reloads, signals and exit codes, systemd
//! notifications, a main_server with no role yet, and the end of stdin as
//! a stop (`--stop-on-stdin-eof`).

// `sh` and python3 handlers; signals.
#[cfg(unix)]
mod e2e;
mod main_server_env;
mod no_role;
mod recovery;
mod relative_paths;
#[cfg(unix)]
mod reload;
#[cfg(unix)]
mod signals;
#[cfg(target_os = "linux")]
mod spawn;
mod stdin_eof;
#[cfg(target_os = "linux")]
mod systemd;
