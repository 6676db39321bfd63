//! systemd's notify protocol where there is no systemd (every platform but
//! Linux): nothing can be sent, and saying so is the answer.

use std::io;
use std::path::Path;
use std::time::Duration;

use super::{Feature, Platform};

#[derive(Debug)]
pub(super) enum NotifySocket {}

impl NotifySocket {
    pub(super) fn connect(_path: &Path) -> io::Result<Self> {
        let why = Platform::CURRENT
            .lacks(Feature::SystemdNotify)
            .unwrap_or_default();
        Err(io::Error::new(io::ErrorKind::Unsupported, why))
    }

    pub(super) fn send(&self, _msg: &[u8]) -> io::Result<usize> {
        match *self {}
    }
}

pub(super) fn systemd_watchdog() -> Option<Duration> {
    None
}

pub(super) fn monotonic_usec() -> io::Result<u64> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CLOCK_MONOTONIC is for systemd, which is on Linux only",
    ))
}
