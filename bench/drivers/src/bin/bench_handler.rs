//! A deliberately fast http tool handler for the benchmarks, so that the
//! handler is never what is measured: `POST /w` answers a fixed envelope at
//! once, `POST /slow` answers it after `--slow-ms` (default 1000 ms).
//!
//! Run: `bench_handler --listen 127.0.0.1:PORT [--slow-ms 1000] [--max-seconds 3600]`.
//! It prints `listening on ADDR` once bound, and exits by itself after
//! `--max-seconds` so that a broken run never leaves it behind.

use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use bench_support::{BoxError, arg_or};

const ENVELOPE: &str =
    r#"{"output":{"city":"Tokyo","temp_c":22,"weather":"sunny"},"is_error":false}"#;

fn envelope() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], ENVELOPE)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let listen: String = arg_or("listen", "127.0.0.1:0".to_string())?;
    let slow_ms: u64 = arg_or("slow-ms", 1000)?;
    let max_seconds: u64 = arg_or("max-seconds", 3600)?;
    let app = Router::new()
        .route("/w", post(|| async { envelope() }))
        .route(
            "/slow",
            post(move || async move {
                tokio::time::sleep(Duration::from_millis(slow_ms)).await;
                envelope()
            }),
        );
    // A deep accept queue, so that a burst of connections never waits for
    // a SYN retransmit here (tokio's `bind` listens with a backlog of 128).
    let addr: std::net::SocketAddr = listen.parse()?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(4096)?;
    println!("listening on {}", listener.local_addr()?);
    let serve = axum::serve(listener, app);
    tokio::select! {
        r = serve => r?,
        () = tokio::time::sleep(Duration::from_secs(max_seconds)) => {}
    }
    Ok(())
}
