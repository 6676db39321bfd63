//! The integration tests of neko-sidecar, as one test binary (`cargo test
//! --test it`; one area: `cargo test --test it daemon::`).
//!
//! They drive the crate from outside, over real sockets: the stand-in
//! main_server (`neko_sidecar::devserver`) starts in-process on a loopback
//! port-0 listener; the daemon runs in-process, or as the real binary in a
//! child process when a test needs signals, exit codes or its output; tool
//! handlers are in-test HTTP servers and `sh` scripts in a tempdir. Nothing
//! listens on a fixed port, and every wait is on a condition with a
//! deadline, never a bare sleep.
//!
//! One module per area; the helpers they share are written once, in
//! `support`. `check_fixtures` reads `tests/fixtures/`; the property tests
//! replay the past failures kept beside them (`prop/*.proptest-regressions`).

mod support;

mod admin;
mod callback;
// Unix paths, modes and symlinks, and /proc/self/mem.
#[cfg(target_os = "linux")]
mod check_fixtures;
mod contract;
mod daemon;
mod demo;
mod devserver;
mod editor_schemas;
mod engine;
mod fuzz_regressions;
mod hostile;
mod mcp;
#[cfg(unix)]
mod model_reads;
mod platform;
mod prop;
mod reload;
mod shipped_examples;
// Linux by nature: systemd, signals, /proc, sh scripts. The rest runs
// on Windows too.
#[cfg(target_os = "linux")]
mod systemd_notify;
// Named to sort last: libtest starts tests in name order, so the chaos test
// starts once every other test has, and has the machine to itself for its
// 40 s of timed faults, as when it was a test binary of its own. Unix only:
// its exec tool is a `sh` script that reads the call.
#[cfg(unix)]
mod under_chaos;
