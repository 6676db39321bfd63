//! systemd's end of `NOTIFY_SOCKET`: a datagram socket bound in a tempdir,
//! so no test touches the process environment.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::net::UnixDatagram;

use super::WAIT;

/// The socket and every datagram received on it, in arrival order.
pub struct Manager {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    socket: UnixDatagram,
    pub log: Vec<String>,
}

impl Manager {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        Self {
            _dir: dir,
            path,
            socket,
            log: Vec::new(),
        }
    }

    /// The next datagram, logged, or `None` when none arrives within
    /// `within`.
    pub async fn next(&mut self, within: Duration) -> Option<String> {
        let mut buf = vec![0u8; 4096];
        match tokio::time::timeout(within, self.socket.recv(&mut buf)).await {
            Ok(Ok(n)) => {
                let msg = String::from_utf8(buf[..n].to_vec()).unwrap();
                self.log.push(msg.clone());
                Some(msg)
            }
            Ok(Err(e)) => panic!("recv: {e}"),
            Err(_) => None,
        }
    }

    /// The next datagram, which must come within 5 s.
    pub async fn expect(&mut self) -> String {
        self.next(Duration::from_secs(5))
            .await
            .expect("a notification within 5 s")
    }

    /// Reads until a datagram satisfies `pred`; panics with the log after
    /// `WAIT`.
    pub async fn until(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(m) if pred(&m) => return m,
                Some(_) => {}
                None => panic!("no {what} within {WAIT:?}; received {:#?}", self.log),
            }
        }
    }

    /// Every datagram arriving within `window`.
    pub async fn during(&mut self, window: Duration) -> Vec<String> {
        let end = Instant::now() + window;
        let mut got = Vec::new();
        while let Some(m) = self
            .next(end.saturating_duration_since(Instant::now()))
            .await
        {
            got.push(m);
        }
        got
    }

    /// Position in the log of the first datagram at or after `from` that
    /// satisfies `pred`.
    pub fn position(&self, from: usize, pred: impl Fn(&str) -> bool) -> usize {
        from + self.log[from..]
            .iter()
            .position(|m| pred(m))
            .unwrap_or_else(|| panic!("not in the log after {from}: {:#?}", self.log))
    }
}
