//! The admin side of the daemon: `/status`, `/readyz`, `/metrics`, the log
//! volume of an outage, and the `status` and `call` commands.

mod cli;
// Its tool is a `sh` script (`greet`), so Unix only.
#[cfg(unix)]
mod history;
mod inspector;
mod local_attacks;
mod logs;
mod metrics;
mod readyz;
mod restart;
mod status;
