//! The server under test of the contract and stand-in tests (the
//! in-process stand-in, or a real main_server named by
//! `NEKO_MAIN_SERVER_URL`), a client that shows redirects, raw HTTP for
//! requests reqwest would not send, and tiny callback servers that play a
//! plugin.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use neko_sidecar::devserver::{DevServerBuilder, DevServerHandle};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{dev_server, dev_server_with};

/// The env var naming a real main_server to run the contract against.
pub const REAL_SERVER_ENV: &str = "NEKO_MAIN_SERVER_URL";

/// The server under test and a client for it.
pub struct Target {
    pub url: String,
    /// Set for the in-process stand-in; `None` against a real server.
    pub handle: Option<DevServerHandle>,
    pub client: reqwest::Client,
}

/// A client that shows redirects instead of following them.
pub fn client() -> reqwest::Client {
    neko_sidecar::tls::plain_http()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// The target of a test that needs no `/__dev/` control.
pub async fn target() -> Target {
    match std::env::var(REAL_SERVER_ENV) {
        Ok(url) if !url.is_empty() => Target {
            url: url.trim_end_matches('/').to_owned(),
            handle: None,
            client: client(),
        },
        _ => {
            let handle = dev_server().await;
            Target {
                url: handle.url(),
                handle: Some(handle),
                client: client(),
            }
        }
    }
}

/// The target of a test that needs `/__dev/` control: `None` (after saying
/// so) when running against a real server.
pub async fn dev_target(test: &str) -> Option<(Target, DevServerHandle)> {
    if std::env::var(REAL_SERVER_ENV).is_ok_and(|u| !u.is_empty()) {
        eprintln!("{test}: skipped against real server: needs /__dev/ control");
        return None;
    }
    let t = target().await;
    let h = t.handle.clone().unwrap();
    Some((t, h))
}

/// Like [`dev_target`], with a stand-in configured by `builder`.
pub async fn dev_target_with(
    test: &str,
    builder: DevServerBuilder,
) -> Option<(Target, DevServerHandle)> {
    if std::env::var(REAL_SERVER_ENV).is_ok_and(|u| !u.is_empty()) {
        eprintln!("{test}: skipped against real server: needs /__dev/ control");
        return None;
    }
    let h = dev_server_with(builder).await;
    let t = Target {
        url: h.url(),
        handle: Some(h.clone()),
        client: client(),
    };
    Some((t, h))
}

/// A name unique to this test and process, so tests against one real
/// server do not step on each other.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", std::process::id())
}

impl Target {
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let res = self
            .client
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        split(res).await
    }

    pub async fn post_raw(
        &self,
        path: &str,
        content_type: Option<&str>,
        body: &'static [u8],
    ) -> (u16, Value) {
        let mut req = self.client.post(format!("{}{path}", self.url)).body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        split(req.send().await.unwrap()).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        split(
            self.client
                .get(format!("{}{path}", self.url))
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// The role names the server has, in its order.
    pub async fn roles(&self) -> Vec<String> {
        let (status, body) = self.get("/api/tools").await;
        assert_eq!(status, 200, "{body}");
        body["tools_by_role"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    /// The tool `name` as `GET /api/tools` lists it for `role`.
    pub async fn listed(&self, role: &str, name: &str) -> Option<Value> {
        let (_, body) = self.get("/api/tools").await;
        body["tools_by_role"][role]
            .as_array()?
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
    }

    pub async fn register(&self, body: Value) -> (u16, Value) {
        self.post("/api/tools/register", &body).await
    }

    /// Registers `name` for `source` at `url` (for every role when `role`
    /// is `None`), answering within `timeout` s; it must be accepted.
    pub async fn register_at(
        &self,
        name: &str,
        url: &str,
        source: &str,
        role: Option<&str>,
        timeout: f64,
    ) {
        let (status, body) = self
            .register(serde_json::json!({"name": name, "callback_url": url, "source": source, "role": role, "timeout_seconds": timeout}))
            .await;
        assert_eq!(status, 200, "{body}");
    }
}

/// Sends `head` (the request line and headers, each line ending in CRLF,
/// without the blank line: `Connection: close` is added) and then `body`
/// over a raw socket to `base_url`, and reads the answer to the end. For
/// requests reqwest would not send as is (a declared length with no body,
/// a chunked body split at chosen places).
///
/// A server may answer before it has read the whole body and close: a
/// write that fails then is expected, and the answer is read all the same.
/// Deadline-bound, so a server that never answers fails the test.
pub async fn raw_http(base_url: &str, head: &str, body: &[&[u8]]) -> (u16, Value) {
    let url = reqwest::Url::parse(base_url).unwrap();
    let addr = format!(
        "{}:{}",
        url.host_str().unwrap(),
        url.port_or_known_default().unwrap()
    );
    let exchange = async {
        let mut sock = TcpStream::connect(addr).await.unwrap();
        let mut out = head.as_bytes().to_vec();
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        let mut wrote = sock.write_all(&out).await;
        for part in body {
            if wrote.is_err() {
                break;
            }
            wrote = sock.write_all(part).await;
        }
        let mut answer = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        // Read until EOF; a reset after the answer arrived ends it too.
        while let Ok(n) = sock.read(&mut buf).await {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        answer
    };
    let answer = tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .expect("the server answers the raw request");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Status and JSON body (`null` for an empty or non-JSON body).
pub async fn split(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    let bytes = res.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A callback server that answers every request with a fixed answer and
/// keeps the bodies it received.
pub struct CallbackServer {
    pub url: String,
    pub received: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CallbackServer {
    pub async fn start(status: u16, content_type: &'static str, body: &'static str) -> Self {
        Self::start_on(
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
            status,
            content_type,
            body,
        )
    }

    pub fn start_on(
        listener: TcpListener,
        status: u16,
        content_type: &'static str,
        body: &'static str,
    ) -> Self {
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let seen = received.clone();
        let app = axum::Router::new().fallback(move |bytes: Bytes| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&bytes).unwrap_or(Value::Null));
                let mut res = axum::response::Response::new(axum::body::Body::from(body));
                *res.status_mut() = StatusCode::from_u16(status).unwrap();
                res.headers_mut()
                    .insert("content-type", content_type.parse().unwrap());
                if (300..400).contains(&status) {
                    res.headers_mut()
                        .insert("location", "http://127.0.0.1:9/elsewhere".parse().unwrap());
                }
                res
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        CallbackServer {
            url: format!("http://127.0.0.1:{port}/tool"),
            received,
            task,
        }
    }

    pub fn received(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }

    /// Stops serving; the port then refuses connections.
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// A server that accepts connections and never answers.
pub async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/tool", l.local_addr().unwrap());
    (url, silent_on(l))
}

/// Accepts connections on `listener` and never answers, until aborted.
pub fn silent_on(listener: TcpListener) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    })
}
