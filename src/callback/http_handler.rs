//! The http handler: POST the callback body, untouched, to the plugin's
//! endpoint over loopback TCP or a unix socket, and read its answer within
//! `max_output_bytes`.
//!
//! Connections are pooled and kept alive: one client for every TCP
//! endpoint, one per distinct unix socket (reqwest binds a client to one
//! socket). Redirects are never followed and no proxy is ever used, so a
//! call cannot leave the machine through the environment's `HTTP_PROXY`.
//! The deadline is the caller's business (`handler::run`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Bytes;
use reqwest::Client;

use super::handler::HandlerError;
use crate::manifest::HttpHandler;

/// How much of a non-2xx answer is quoted back, as main_server quotes.
const STATUS_BODY_CHARS: usize = 200;
/// Idle pooled connections are closed after this.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// The pooled clients, shared by every call.
#[derive(Debug)]
pub struct HttpClients {
    tcp: Client,
    /// Created on first use; a few entries at most (one per socket named in
    /// the manifests).
    unix: Mutex<HashMap<PathBuf, Client>>,
}

impl HttpClients {
    pub fn new() -> Result<Self, reqwest::Error> {
        Ok(Self {
            tcp: builder().build()?,
            unix: Mutex::new(HashMap::new()),
        })
    }

    fn for_socket(&self, socket: &Path) -> Result<Client, reqwest::Error> {
        let mut map = self.unix.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(socket) {
            return Ok(c.clone());
        }
        let c = builder().unix_socket(socket.to_path_buf()).build()?;
        map.insert(socket.to_path_buf(), c.clone());
        Ok(c)
    }
}

fn builder() -> reqwest::ClientBuilder {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_idle_timeout(POOL_IDLE)
}

/// Where a handler is, for messages.
fn target(h: &HttpHandler) -> String {
    match &h.unix_socket {
        Some(s) => format!("{} (unix socket {})", h.url, s.display()),
        None => h.url.clone(),
    }
}

/// POSTs `body` and returns the 2xx answer's body.
pub async fn call(
    clients: &HttpClients,
    h: &HttpHandler,
    body: Bytes,
    max_output_bytes: usize,
) -> Result<Vec<u8>, HandlerError> {
    let client = match &h.unix_socket {
        Some(s) => clients.for_socket(s).map_err(|e| HandlerError::Failed {
            detail: format!("cannot set up a client for {}: {}", target(h), chain(&e)),
        })?,
        None => clients.tcp.clone(),
    };
    let mut resp = client
        .post(&h.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| {
            let cause = root_cause(&e);
            if out_of_descriptors(&cause) {
                // The sidecar's own limit, not the plugin: say so, or the
                // operator goes looking for a plugin that is running fine.
                HandlerError::Failed {
                    detail: format!(
                        "the sidecar has no file descriptor left to reach {} ({cause}): raise its open-files limit (LimitNOFILE)",
                        target(h)
                    ),
                }
            } else if e.is_connect() {
                HandlerError::Unreachable {
                    target: target(h),
                    detail: cause,
                }
            } else {
                HandlerError::Failed {
                    detail: format!("{}: {}", target(h), chain(&e)),
                }
            }
        })?;
    let status = resp.status();
    if !status.is_success() {
        // Only the start is quoted; a little more is read so a multi-byte
        // character at the cut is not lost.
        let start = read_bounded(&mut resp, STATUS_BODY_CHARS * 4)
            .await
            .map_or_else(|_| Vec::new(), |(b, _)| b);
        let text: String = String::from_utf8_lossy(&start)
            .chars()
            .take(STATUS_BODY_CHARS)
            .collect();
        return Err(HandlerError::Status {
            target: target(h),
            status: status.as_u16(),
            body_start: text.trim().to_string(),
        });
    }
    if resp
        .content_length()
        .is_some_and(|n| n > max_output_bytes as u64)
    {
        return Err(HandlerError::OutputTooLarge {
            limit: max_output_bytes,
        });
    }
    match read_bounded(&mut resp, max_output_bytes).await {
        Ok((b, false)) => Ok(b),
        Ok((_, true)) => Err(HandlerError::OutputTooLarge {
            limit: max_output_bytes,
        }),
        Err(e) => Err(HandlerError::Failed {
            detail: format!("reading the answer of {}: {}", target(h), chain(&e)),
        }),
    }
}

/// EMFILE/ENFILE, as the OS words them in the innermost cause.
fn out_of_descriptors(cause: &str) -> bool {
    cause.contains("Too many open files")
}

/// Reads at most `limit` bytes; the flag says there was more.
async fn read_bounded(
    resp: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if buf.len() + chunk.len() > limit {
            let room = limit - buf.len();
            buf.extend_from_slice(&chunk[..room]);
            return Ok((buf, true));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((buf, false))
}

/// The innermost cause ("Connection refused (os error 111)"), which says
/// more than reqwest's outer "error sending request".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e;
    while let Some(next) = cur.source() {
        let s = next.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = next;
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_is_told_apart_from_a_plugin_that_is_down() {
        assert!(out_of_descriptors("Too many open files (os error 24)"));
        assert!(!out_of_descriptors("Connection refused (os error 111)"));
    }
}
