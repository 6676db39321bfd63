//! The callback server, where main_server calls our tools: its own rules,
//! its HTTP/1.1, exec and http handlers, and the example handlers.

mod examples;
// `sh` scripts, and /proc to see a process gone.
#[cfg(target_os = "linux")]
mod exec;
mod http;
mod local_attacks;
mod server;
mod tree;
mod wire;
