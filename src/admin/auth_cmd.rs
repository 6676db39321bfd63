//! `neko-sidecar auth login|logout|list`: the OAuth sign-ins of the
//! running sidecar's MCP servers, through its admin endpoints (the daemon
//! holds the sign-ins; the redirect comes back to its listener).
//!
//! `login` prints the sign-in link and opens a browser where there is one;
//! on a machine without one (a server, a container) the user opens the
//! link elsewhere and pastes back the address the browser ended on
//! (`http://127.0.0.1:PORT/oauth/callback?code=…&state=…`), which is
//! handed to the daemon as the browser would have. `list` shows each
//! server's state and expiry, never a token; without a running sidecar it
//! reads what the sign-ins file holds.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use super::client::{AdminClient, ClientError, admin_url};
use crate::mcp::oauth::SignIn;

/// What `login` and `logout` print, and whether they succeeded.
pub(crate) struct AuthReport {
    pub text: String,
    pub ok: bool,
}

/// `auth login NAME`.
pub(crate) async fn login(
    config: &Path,
    admin: Option<&str>,
    name: &str,
    open_browser: bool,
) -> Result<AuthReport, ClientError> {
    let base = admin_url(config, admin)?;
    let client = AdminClient::new(&base)?;
    let url = format!("{base}/oauth/login/{name}");
    let (code, location, body) = client.get_no_redirect(&url).await?;
    let Some(link) = location.filter(|_| code == 303) else {
        return Ok(AuthReport {
            text: format!("cannot sign in to {name}: {}\n", page_text(&body)),
            ok: false,
        });
    };
    println!("Sign in to {name} at this address (it is valid for 10 minutes):\n\n  {link}\n");
    if open_browser && crate::os::open_browser(&link) {
        println!("A browser was opened. When it shows \"Signed in to {name}\", you are done.");
    }
    println!(
        "Without a browser here: open the address on any machine, sign in, and paste below the address the browser ended on (it starts with {base}/oauth/callback; the page itself may fail to load there)."
    );
    // The pasted address, or the daemon seeing the sign-in by itself (a
    // browser on this machine reached its listener).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(1);
    std::thread::spawn(move || {
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).is_ok() {
            let _ = tx.blocking_send(line);
        }
    });
    // stdin ended without a line: the browser alone can finish.
    let pasted = async { rx.recv().await.filter(|l| !l.trim().is_empty()) };
    tokio::select! {
        Some(line) = pasted => finish_pasted(&client, &base, name, line.trim()).await,
        r = wait_signed_in(&client, name) => r,
    }
}

/// Hands a pasted final address to the daemon's callback.
async fn finish_pasted(
    client: &AdminClient,
    base: &str,
    name: &str,
    pasted: &str,
) -> Result<AuthReport, ClientError> {
    let query = match url::Url::parse(pasted) {
        Ok(u) if u.path().ends_with("/oauth/callback") => u.query().unwrap_or_default().to_string(),
        _ => {
            return Ok(AuthReport {
                text: format!(
                    "that is not the address of the sign-in's end ({base}/oauth/callback?code=…&state=…): run `neko-sidecar auth login {name}` again\n"
                ),
                ok: false,
            });
        }
    };
    crate::logging::keep_out(std::slice::from_ref(&query));
    let (code, _, body) = client
        .get_no_redirect(&format!("{base}/oauth/callback?{query}"))
        .await?;
    Ok(AuthReport {
        text: format!("{}\n", page_text(&body)),
        ok: code == 200,
    })
}

/// Polls the daemon's status until `name` is signed in.
async fn wait_signed_in(client: &AdminClient, name: &str) -> Result<AuthReport, ClientError> {
    loop {
        // A person is signing in: once a second is often enough, and this
        // is a command, not the daemon.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (_, view) = client.status().await?;
        if view
            .mcp_servers
            .iter()
            .any(|s| s.name == name && s.sign_in.as_ref().is_some_and(|x| x.state == "signed_in"))
        {
            return Ok(AuthReport {
                text: format!("Signed in to {name}.\n"),
                ok: true,
            });
        }
    }
}

/// `auth logout NAME`.
pub(crate) async fn logout(
    config: &Path,
    admin: Option<&str>,
    name: &str,
) -> Result<AuthReport, ClientError> {
    let base = admin_url(config, admin)?;
    let client = AdminClient::new(&base)?;
    let (code, body) = client.post(&format!("{base}/oauth/logout/{name}")).await?;
    Ok(AuthReport {
        text: format!("{name}: {}\n", body.trim()),
        ok: code == 200,
    })
}

/// `auth list`: from the running sidecar, else from the sign-ins file.
pub(crate) async fn list(config: &Path, admin: Option<&str>) -> Result<AuthReport, ClientError> {
    let from_daemon = match admin_url(config, admin) {
        Ok(base) => match AdminClient::new(&base)?.status().await {
            Ok((_, view)) => Some(
                view.mcp_servers
                    .into_iter()
                    .filter_map(|s| s.sign_in.map(|x| (s.name, x)))
                    .collect::<Vec<_>>(),
            ),
            Err(ClientError::Unreachable { .. }) => None,
            Err(e) => return Err(e),
        },
        Err(_) => None,
    };
    let (rows, whence) = match from_daemon {
        Some(rows) => (rows, "the running sidecar"),
        None => {
            let store = crate::mcp::oauth::store::Store::open();
            let hub = crate::mcp::oauth::OAuth::new(store);
            (
                hub.stored().into_iter().collect(),
                "the sign-ins file (the sidecar is not running)",
            )
        }
    };
    let mut text = String::new();
    if rows.is_empty() {
        text.push_str(&format!("no MCP server signs in with OAuth ({whence})\n"));
    }
    for (name, s) in &rows {
        text.push_str(&format!("{name}: {}\n", describe(s)));
    }
    Ok(AuthReport { text, ok: true })
}

/// One server's sign-in in words.
pub(crate) fn describe(s: &SignIn) -> String {
    match s.state.as_str() {
        "signed_in" => {
            let until = s
                .expires_at
                .map(|at| super::time::rfc3339(UNIX_EPOCH + Duration::from_secs(at)));
            format!(
                "signed in{}{}",
                until
                    .map(|u| format!(", access token valid until {u}"))
                    .unwrap_or_default(),
                if s.refreshable {
                    ", renewed by its refresh token"
                } else {
                    ""
                }
            )
        }
        "refused" => format!(
            "cannot sign in as configured: {}",
            s.reason.as_deref().unwrap_or("no reason given")
        ),
        _ => format!(
            "needs sign-in{}{}",
            s.link
                .as_ref()
                .map(|l| format!(" at {l}"))
                .unwrap_or_else(
                    || " (`neko-sidecar auth login NAME` while the sidecar runs)".into()
                ),
            s.reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
    }
}

/// The sentence of one of the sign-in pages (`oauth_routes::page`).
fn page_text(body: &str) -> String {
    let pick = |tag: &str| {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        body.split_once(&open)
            .and_then(|(_, rest)| rest.split_once(&close))
            .map(|(t, _)| unescape(t))
    };
    match (pick("h1"), pick("p")) {
        (Some(h), Some(p)) => format!("{h}: {p}"),
        _ => body.trim().chars().take(300).collect(),
    }
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
