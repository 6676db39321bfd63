//! What Linux alone has: the transport of systemd's notify protocol
//! (datagrams to `NOTIFY_SOCKET`, abstract names included). Its process
//! trees are in `linux_spawn.rs`.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::time::Duration;

use sd_notify::NotifyState;

/// Where notifications go: the address is resolved once, the socket is
/// unbound and reused for every datagram.
#[derive(Debug)]
pub(super) struct NotifySocket {
    addr: SocketAddr,
    socket: UnixDatagram,
}

/// How long one datagram may block. systemd drains its socket quickly; the
/// bound only keeps a stuck manager from wedging the caller's thread.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

impl NotifySocket {
    pub(super) fn connect(path: &Path) -> io::Result<Self> {
        let addr = socket_addr(path)?;
        let socket = UnixDatagram::unbound()?;
        socket.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(Self { addr, socket })
    }

    pub(super) fn send(&self, msg: &[u8]) -> io::Result<usize> {
        self.socket.send_to_addr(msg, &self.addr)
    }
}

/// A leading `@` names a Linux abstract socket, as in `NOTIFY_SOCKET`.
fn socket_addr(path: &Path) -> io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = path.as_os_str().as_bytes();
    match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(path),
    }
}

pub(super) fn systemd_watchdog() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}

pub(super) fn monotonic_usec() -> io::Result<u64> {
    match NotifyState::monotonic_usec_now()? {
        NotifyState::MonotonicUsec(usec) => Ok(u64::try_from(usec).unwrap_or(0)),
        other => Err(io::Error::other(format!(
            "unexpected clock reading {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstract_names_start_with_an_at_sign() {
        use std::os::linux::net::SocketAddrExt as _;
        let a = socket_addr(Path::new("@neko/notify")).unwrap();
        assert_eq!(a.as_abstract_name(), Some(&b"neko/notify"[..]));
        let p = socket_addr(Path::new("/run/systemd/notify")).unwrap();
        assert_eq!(p.as_pathname(), Some(Path::new("/run/systemd/notify")));
    }
}
