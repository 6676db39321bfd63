//! Binding the callback listener with an accept queue deep enough for a
//! burst of calls, and the descriptors its connections need.
//!
//! main_server opens one connection per call, so a burst of calls is a
//! burst of connection attempts. tokio's `TcpListener::bind` listens with a
//! backlog of 128: past that many connections not yet accepted, the kernel
//! drops the SYN and the caller retries only after a 1 s retransmit, so one
//! call in four of a 1,000-call burst came 1 s late. This module never
//! accepts connections; the callback server does.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The accept queue asked for; the kernel caps it at
/// `net.core.somaxconn` (4096 by default since Linux 5.4).
pub(crate) const BACKLOG: u32 = 4096;

/// The connection bound to use for `configured`: the process's soft limit
/// on open files is first raised to its hard limit (as Go's runtime and
/// most servers do; systemd starts services with a soft limit of 1024),
/// then at most half of it goes to callback connections, so that a full
/// server still has descriptors for the calls' handler connections and
/// pipes. Without this, `accept` would fail at the descriptor limit before
/// the bound was ever reached, and idle connections could lock main_server
/// out after all.
pub(crate) fn connection_bound(configured: usize) -> usize {
    // Windows has no such limit (`os` says so with `None`).
    let files = crate::os::open_files_limit().unwrap_or(u64::MAX);
    let bound = configured
        .min(usize::try_from(files / 2).unwrap_or(usize::MAX))
        .max(1);
    if bound < configured {
        tracing::warn!(
            configured,
            open_files_limit = files,
            bound,
            "[callback] max_connections is above half the open-files limit; holding fewer connections (raise LimitNOFILE)"
        );
    }
    bound
}

/// Binds `addr` (with `SO_REUSEADDR`, as `TcpListener::bind` does) and
/// listens with [`BACKLOG`].
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Regression: with tokio's default backlog (128) the 130th connection
    /// waiting to be accepted got no answer to its SYN for a second.
    #[test]
    fn a_burst_of_connections_waits_in_the_queue_instead_of_being_dropped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Nothing accepts: every connection stays in the accept queue.
        let listener = rt
            .block_on(async { bind("127.0.0.1:0".parse().unwrap()) })
            .unwrap();
        let addr = listener.local_addr().unwrap();
        // The kernel caps the queue at somaxconn: stay under it.
        let cap = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(4096);
        let mut open = Vec::new();
        for i in 0..300.min(cap.saturating_sub(1)) {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(s) => open.push(s),
                Err(e) => panic!("connection {i} was not queued: {e}"),
            }
        }
        drop(listener);
    }
}
