//! The admin side of the daemon: `/status`, `/readyz`, `/metrics`, the log
//! volume of an outage, and the `status` and `call` commands.

mod cli;
mod inspector;
mod local_attacks;
mod logs;
mod metrics;
mod readyz;
mod status;
