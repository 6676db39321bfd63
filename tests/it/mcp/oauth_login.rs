//! `neko-sidecar auth login NAME` with the final address pasted back, on
//! every platform the suite runs on (Wine included): a small
//! authorization server of the test's own (axum, in the test) in front of
//! the stand-in MCP server over Streamable HTTP, which answers 401 without
//! its bearer token. The full flows against the official Python SDK's
//! `mcp.server.auth` are `oauth.rs` (Unix).

use std::sync::{Arc, Mutex};

use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use neko_sidecar::devmcp::{DevMcp, DevMcpOptions};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use sha2::Digest as _;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::support::daemon::{Sidecar, run_command};
use crate::support::mcp::{DEV_TOOLS, http_server, prefixed, wait_ours};
use crate::support::{BIN, WAIT, Workspace, call, dev_server, invoke, refused_port};

/// The one access token this server issues.
const TOKEN: &str = "portable-access-token-5b1e";

#[derive(Default)]
struct Issued {
    /// The PKCE challenge and redirect of the pending authorization.
    challenge: Option<(String, String)>,
}

type Shared = Arc<(String, Mutex<Issued>)>;

/// The authorization server and the protected MCP server on `listener`.
fn app(base: String) -> Router {
    let state: Shared = Arc::new((base, Mutex::new(Issued::default())));
    let mcp: StreamableHttpService<DevMcp, LocalSessionManager> = StreamableHttpService::new(
        || Ok(DevMcp::new(DevMcpOptions::default())),
        Default::default(),
        StreamableHttpServerConfig::default().disable_allowed_hosts(),
    );
    let protected = Router::new()
        .route_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(state.clone(), bearer));
    Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", get(resource))
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .with_state(state)
        .merge(protected)
}

async fn bearer(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes());
    if ok {
        return next.run(req).await;
    }
    let challenge = format!(
        "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
        s.0
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
    )
        .into_response()
}

async fn resource(State(s): State<Shared>) -> Json<serde_json::Value> {
    Json(json!({"resource": format!("{}/mcp", s.0), "authorization_servers": [s.0]}))
}

async fn metadata(State(s): State<Shared>) -> Json<serde_json::Value> {
    let b = &s.0;
    Json(json!({
        "issuer": b,
        "authorization_endpoint": format!("{b}/authorize"),
        "token_endpoint": format!("{b}/token"),
        "registration_endpoint": format!("{b}/register"),
        "code_challenge_methods_supported": ["S256"],
        "response_types_supported": ["code"],
    }))
}

async fn register() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::CREATED,
        Json(json!({"client_id": "portable-client"})),
    )
}

async fn authorize(
    State(s): State<Shared>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    if q.get("code_challenge_method").map(String::as_str) != Some("S256") {
        return (StatusCode::BAD_REQUEST, "S256 only").into_response();
    }
    let redirect = q["redirect_uri"].clone();
    s.1.lock().unwrap().challenge = Some((q["code_challenge"].clone(), redirect.clone()));
    Redirect::to(&format!(
        "{redirect}?code=portable-code&state={}",
        q["state"]
    ))
    .into_response()
}

async fn token(State(s): State<Shared>, body: String) -> Response {
    let f: std::collections::HashMap<String, String> = url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    let Some((challenge, redirect)) = s.1.lock().unwrap().challenge.take() else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    };
    let verified = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(f["code_verifier"].as_bytes()))
        == challenge;
    if f.get("code").map(String::as_str) != Some("portable-code")
        || !verified
        || f.get("redirect_uri") != Some(&redirect)
        || f.get("client_id").map(String::as_str) != Some("portable-client")
    {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    Json(json!({"access_token": TOKEN, "token_type": "Bearer", "expires_in": 3600})).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_login_takes_the_pasted_final_address_and_the_tools_are_registered() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(axum::serve(listener, app(base.clone())).into_future());

    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool(
        "servers.toml",
        &http_server("guarded", &format!("{base}/mcp"), ""),
    );
    let mut agent = ws.agent(&h.url());
    agent.admin_listen = format!("127.0.0.1:{}", refused_port());
    let config = ws.write_config(&agent);
    let state = ws.root.join("state");
    let mut cmd = run_command(&config);
    cmd.env("STATE_DIRECTORY", &state);
    let _sidecar = Sidecar::spawn_command(cmd);

    // `auth login` waits for the sidecar to have met the 401 (it answers
    // 409 until then): tried until it prints the link.
    let deadline = tokio::time::Instant::now() + WAIT;
    let (mut login, mut out, link) = loop {
        let mut child = tokio::process::Command::new(BIN)
            .args(["auth", "login", "guarded", "--no-browser", "--config"])
            .arg(&config)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut link = None;
        while let Ok(Some(line)) = tokio::time::timeout(WAIT, out.next_line()).await.unwrap() {
            if let Some(l) = line.trim().strip_prefix(&format!("{base}/authorize?")) {
                link = Some(format!("{base}/authorize?{l}"));
                break;
            }
        }
        if let Some(link) = link {
            break (child, out, link);
        }
        let _ = child.wait().await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "auth login never printed the link"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // The browser, elsewhere: the authorization server's redirect is the
    // address to paste.
    let r = neko_sidecar::tls::plain_http()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(&link)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    let pasted = r.headers()["location"].to_str().unwrap().to_string();
    assert!(
        pasted.contains("/oauth/callback?code=portable-code"),
        "{pasted}"
    );
    let mut stdin = login.stdin.take().unwrap();
    stdin
        .write_all(format!("{pasted}\n").as_bytes())
        .await
        .unwrap();
    let mut rest = String::new();
    while let Ok(Some(line)) = tokio::time::timeout(WAIT, out.next_line()).await.unwrap() {
        rest.push_str(&line);
        rest.push('\n');
    }
    let status = login.wait().await.unwrap();
    assert!(
        status.success() && rest.contains("Signed in to guarded"),
        "{rest}"
    );

    wait_ours(&h, &prefixed("guarded_", &DEV_TOOLS)).await;
    let a = invoke(&h, call("guarded_echo", json!({"text": "pasted"}))).await;
    assert!(!a.is_error, "{a:#?}");
    let kept = std::fs::read_to_string(state.join("oauth.json")).unwrap();
    assert!(kept.contains(TOKEN), "the token is kept for the next start");
}
