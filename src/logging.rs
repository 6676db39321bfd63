//! Log output: readable text on a terminal, plain text for journald (no
//! colour codes when stderr is not a TTY), or JSON lines.
//!
//! The level comes from, in order: the `--log-level` flag, `RUST_LOG`, the
//! config's `[log] level`. This module only installs the subscriber.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Call once, from the binary. A second
/// call (as in tests that start several daemons in one process) is a no-op.
pub fn init(format: LogFormat, config_level: &str, flag_level: Option<&str>) {
    let filter = flag_level
        .and_then(|l| EnvFilter::try_new(l).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .or_else(|| EnvFilter::try_new(config_level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        // journald stamps every line itself; a second timestamp is noise.
        LogFormat::Text if std::env::var_os("JOURNAL_STREAM").is_some() => {
            builder.with_ansi(false).without_time().try_init()
        }
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}
