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
    let bound = share(configured, files, 2);
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

/// The admin endpoints' connection bound: [`MAX_CONNECTIONS`](crate::admin::MAX_CONNECTIONS),
/// and at most a sixteenth of the open-files limit, so that the two
/// listeners together hold at most nine sixteenths of it, and the daemon
/// keeps the rest for handlers, manifests and MCP servers whatever
/// connections other local processes open.
pub(crate) fn admin_connection_bound() -> usize {
    let files = crate::os::open_files_limit().unwrap_or(u64::MAX);
    share(crate::admin::MAX_CONNECTIONS, files, 16)
}

/// `configured`, at most `files / part`, at least 1.
fn share(configured: usize, files: u64, part: u64) -> usize {
    configured
        .min(usize::try_from(files / part).unwrap_or(usize::MAX))
        .max(1)
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

    /// The two listeners' bounds leave the daemon most of its descriptors,
    /// at systemd's soft limit (1,024) and at a raised one.
    #[test]
    fn the_listeners_share_of_descriptors_leaves_the_daemon_the_rest() {
        for files in [1024u64, 20_000, 524_288] {
            let callback = share(1_000_000, files, 2) as u64;
            let admin = share(crate::admin::MAX_CONNECTIONS, files, 16) as u64;
            assert!(
                callback + admin <= files * 9 / 16,
                "{files}: {callback} + {admin}"
            );
        }
        assert_eq!(share(1024, 1024, 2), 512);
        assert_eq!(share(crate::admin::MAX_CONNECTIONS, 1024, 16), 64);
        assert_eq!(share(64, 256, 16), 16);
    }

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
