//! Remote MCP servers that need OAuth (issue 45), against a real protected
//! MCP server and authorization server built with the official Python
//! SDK's auth support (`tests/fixtures/mcp/oauth_server.py`), the sidecar
//! as the real binary (its own state directory), the stand-in main_server
//! in the test, and the test playing the browser: it follows the sign-in
//! link to the authorization server and its redirect to the admin
//! listener's `/oauth/callback`.
//!
//! First contact → needs sign-in with a link → signed in → tools
//! registered and called; the access token expired → refreshed; a
//! replayed redirect and a wrong `state` refused; a restart reuses the
//! tokens (the file owner-only); a refused refresh → needs sign-in, the
//! other server untouched, the model told where to sign in; `auth login`
//! with the final address pasted; an issuer that does not match, no S256,
//! no registration and no `client_id` each refused with its reason; a
//! configured client with its secret; and the planted token, code,
//! verifier and client secret on no surface.

use std::path::Path;
use std::process::Stdio;

use neko_sidecar::devserver::DevServerHandle;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::support::daemon::{Sidecar, run_command};
use crate::support::mcp::{DEV_TOOLS, prefixed, stdio_server};
use crate::support::python::PyOAuthServer;
use crate::support::{BIN, WAIT, Workspace, call, dev_server, invoke, refused_port, wait_stand_in};

/// A client that never follows a redirect: the test is the browser.
fn browser() -> reqwest::Client {
    neko_sidecar::tls::plain_http()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

struct Rig {
    h: DevServerHandle,
    ws: Workspace,
    admin: String,
    config: std::path::PathBuf,
    state: std::path::PathBuf,
    sidecar: Option<Sidecar>,
}

impl Rig {
    async fn start(manifest: &str, env: &[(&str, &str)], admin_port: u16) -> Self {
        let h = dev_server().await;
        let ws = Workspace::new();
        ws.write_tool("servers.toml", manifest);
        let mut agent = ws.agent(&h.url());
        agent.admin_listen = format!("127.0.0.1:{admin_port}");
        let config = ws.write_config(&agent);
        let state = ws.root.join("state");
        let mut rig = Self {
            h,
            admin: format!("http://127.0.0.1:{admin_port}"),
            config,
            state,
            sidecar: None,
            ws,
        };
        rig.spawn(env);
        rig
    }

    fn spawn(&mut self, env: &[(&str, &str)]) {
        let mut cmd = run_command(&self.config);
        cmd.arg("--log-level").arg("debug");
        cmd.env("STATE_DIRECTORY", &self.state);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.sidecar = Some(Sidecar::spawn_command(cmd));
    }

    async fn status(&self) -> Value {
        match browser().get(format!("{}/status", self.admin)).send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }

    /// Polls `/status` until server `name` satisfies `pred`.
    async fn wait_server(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let st = self.status().await;
            if let Some(s) = st["mcp_servers"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["name"] == name))
                && pred(s)
            {
                return s.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {name}: {what}; status: {st:#}\nstderr:\n{}",
                self.stderr().join("\n")
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    fn stderr(&self) -> Vec<String> {
        self.sidecar
            .as_ref()
            .map(|s| s.stderr())
            .unwrap_or_default()
    }

    /// Plays the browser from `link` to the authorization server and back:
    /// the redirect's address (not followed).
    async fn consent(&self, link: &str) -> String {
        let b = browser();
        let r = b.get(link).send().await.unwrap();
        assert_eq!(r.status(), 303, "{link}: {:?}", r.text().await);
        let authorize = r.headers()["location"].to_str().unwrap().to_string();
        let u = url::Url::parse(&authorize).unwrap();
        let q: std::collections::BTreeMap<_, _> = u.query_pairs().into_owned().collect();
        assert_eq!(q["code_challenge_method"], "S256", "{authorize}");
        assert_eq!(q["response_type"], "code");
        assert!(
            q["state"].len() >= 16 && q["code_challenge"].len() == 43,
            "{q:?}"
        );
        assert!(q["redirect_uri"].ends_with("/oauth/callback"), "{q:?}");
        let r = b.get(&authorize).send().await.unwrap();
        assert_eq!(r.status(), 302, "{authorize}: {:?}", r.text().await);
        r.headers()["location"].to_str().unwrap().to_string()
    }

    /// The browser arrives at the admin listener with `redirect`.
    async fn arrive(&self, redirect: &str) -> (u16, String) {
        let r = browser().get(redirect).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn sign_in(&self, name: &str) {
        let s = self
            .wait_server(name, "needs sign-in with a link", |s| {
                s["sign_in"]["state"] == "needs_sign_in" && s["sign_in"]["link"].is_string()
            })
            .await;
        let link = s["sign_in"]["link"].as_str().unwrap().to_string();
        assert_eq!(link, format!("{}/oauth/login/{name}", self.admin));
        let redirect = self.consent(&link).await;
        let (code, page) = self.arrive(&redirect).await;
        assert_eq!(code, 200, "{page}");
        assert!(page.contains(&format!("Signed in to {name}")), "{page}");
    }

    async fn surfaces(&self) -> Vec<(String, String)> {
        let b = browser();
        let mut out = Vec::new();
        for path in ["/status", "/metrics", "/", "/ui/status"] {
            let text = b
                .get(format!("{}{path}", self.admin))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            out.push((path.to_string(), text));
        }
        for args in [
            &["status", "--json"][..],
            &["auth", "list"][..],
            &["check", "--probe"][..],
        ] {
            let o = tokio::process::Command::new(BIN)
                .args(args)
                .arg("--config")
                .arg(&self.config)
                .env("STATE_DIRECTORY", &self.state)
                .output()
                .await
                .unwrap();
            out.push((
                args.join(" "),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            ));
        }
        out.push(("the log (debug)".into(), self.stderr().join("\n")));
        out
    }
}

/// No surface shows a token, a code, a verifier or a client secret.
fn nothing_planted(surfaces: &[(String, String)], also: &[String]) {
    for (what, text) in surfaces {
        assert!(
            !text.contains("planted-"),
            "{what} shows a planted secret:\n{text}"
        );
        for s in also {
            assert!(!text.contains(s.as_str()), "{what} shows {s}:\n{text}");
        }
    }
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_needs_oauth_is_signed_in_once_refreshed_and_kept_across_restarts() {
    let py = PyOAuthServer::start(&[]).await;
    let manifest = format!(
        "{}\n{}",
        crate::support::mcp::http_server("notes", &py.url, ""),
        stdio_server("local", &[], "")
    );
    let mut rig = Rig::start(&manifest, &[], refused_port()).await;
    let local = prefixed("local_", &DEV_TOOLS);
    wait_stand_in(&rig.h, "the other server's tools", |h| {
        let snap = h.registry_snapshot();
        local
            .iter()
            .all(|n| snap.roles[0].tools.iter().any(|t| &t.name == n))
    })
    .await;

    // First contact: a 401, discovery, and a link.
    let s = rig
        .wait_server("notes", "needs sign-in", |s| {
            s["sign_in"]["state"] == "needs_sign_in"
        })
        .await;
    assert!(
        s["last_error"]
            .as_str()
            .unwrap()
            .contains("sign in to notes at"),
        "{s:#}"
    );

    // `check --probe` says so too, and how to sign in.
    let o = tokio::process::Command::new(BIN)
        .args(["check", "--probe", "--config"])
        .arg(&rig.config)
        .env("STATE_DIRECTORY", &rig.state)
        .output()
        .await
        .unwrap();
    let probe = String::from_utf8_lossy(&o.stdout);
    assert!(
        probe.contains("needs a sign-in") && probe.contains("neko-sidecar auth login notes"),
        "{probe}"
    );

    // Signed in: its tools registered with the stand-in, and called.
    let link = s["sign_in"]["link"].as_str().unwrap().to_string();
    let redirect = rig.consent(&link).await;
    let (code, page) = rig.arrive(&redirect).await;
    assert_eq!(code, 200, "{page}");
    wait_stand_in(&rig.h, "notes' tools registered", |h| {
        h.registry_snapshot().roles[0]
            .tools
            .iter()
            .any(|t| t.name == "notes_echo")
    })
    .await;
    let a = invoke(&rig.h, call("notes_echo", json!({"text": "signed in"}))).await;
    assert!(!a.is_error && a.model_text.contains("signed in"), "{a:#?}");
    let log = py.log().await;
    assert_eq!(log["exchanges"], 1);
    // Registered once (RFC 7591), at the first 401 or at the first
    // sign-in, whichever knew the admin listener's address first.
    assert_eq!(log["registrations"], 1);
    // RFC 8707: the token is asked for this server.
    assert_eq!(log["resources"][0], py.url.as_str());
    let s = rig
        .wait_server("notes", "signed in", |s| {
            s["sign_in"]["state"] == "signed_in"
        })
        .await;
    assert!(
        s["sign_in"]["expires_at"].is_u64() && s["sign_in"]["refreshable"] == true,
        "{s:#}"
    );

    // The redirect again (a replay), and a state nobody started: refused.
    let (code, page) = rig.arrive(&redirect).await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("used already"), "{page}");
    let (code, page) = rig
        .arrive(&format!("{}/oauth/callback?code=x&state=forged", rig.admin))
        .await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("matches no sign-in"), "{page}");

    // The token file: owner-only, in the state directory.
    let file = rig.state.join("oauth.json");
    assert_eq!(mode_of(&file), 0o600);

    // The access token expires: refreshed, the call goes through.
    py.control("expire").await;
    let a = invoke(&rig.h, call("notes_echo", json!({"text": "after expiry"}))).await;
    assert!(
        !a.is_error && a.model_text.contains("after expiry"),
        "{a:#?}"
    );
    assert_eq!(py.log().await["refreshes"], 1);

    // A restart: the tokens reused, no second sign-in.
    let callback_of = |h: &DevServerHandle| {
        h.registry_snapshot().roles[0]
            .tools
            .iter()
            .find(|t| t.name == "notes_echo")
            .and_then(|t| t.callback_url.clone())
    };
    let before = callback_of(&rig.h);
    rig.sidecar.take().unwrap().kill().await;
    rig.spawn(&[]);
    rig.wait_server("notes", "ready again", |s| s["phase"] == "ready")
        .await;
    wait_stand_in(&rig.h, "notes' tools registered by the new process", |h| {
        callback_of(h).is_some_and(|c| Some(&c) != before.as_ref())
    })
    .await;
    let a = invoke(&rig.h, call("notes_echo", json!({"text": "after restart"}))).await;
    assert!(
        !a.is_error && a.model_text.contains("after restart"),
        "{a:#?}"
    );
    let log = py.log().await;
    assert_eq!(
        (log["exchanges"].as_u64(), log["registrations"].as_u64()),
        (Some(1), Some(1))
    );

    // The refresh refused: needs sign-in, the tools stay, the model is
    // told where; the other server untouched.
    py.control("refuse-refresh").await;
    py.control("expire").await;
    let a = invoke(&rig.h, call("notes_echo", json!({"text": "refused"}))).await;
    assert!(a.is_error, "{a:#?}");
    assert!(
        a.model_text.contains(&format!(
            "sign in to notes at {}/oauth/login/notes",
            rig.admin
        )),
        "{}",
        a.model_text
    );
    rig.wait_server("notes", "needs sign-in again", |s| {
        s["sign_in"]["state"] == "needs_sign_in"
    })
    .await;
    let snap = rig.h.registry_snapshot();
    assert!(
        snap.roles[0].tools.iter().any(|t| t.name == "notes_echo"),
        "kept registered"
    );
    let a = invoke(&rig.h, call("local_echo", json!({"text": "untouched"}))).await;
    assert!(!a.is_error, "{a:#?}");
    let l = rig
        .wait_server("local", "ready", |s| s["phase"] == "ready")
        .await;
    assert_eq!(l["restarts"], 0, "{l:#}");

    // `auth login` with the final address pasted, as on a machine
    // without a browser.
    let mut login = tokio::process::Command::new(BIN)
        .args(["auth", "login", "notes", "--no-browser", "--config"])
        .arg(&rig.config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(login.stdout.take().unwrap()).lines();
    let link = loop {
        let line = tokio::time::timeout(WAIT, out.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(l) = line.trim().strip_prefix("http") {
            break format!("http{l}");
        }
    };
    // The printed link is the authorization server's own.
    assert!(
        link.starts_with(&format!("{}/authorize?", py.base)),
        "{link}"
    );
    let r = browser().get(&link).send().await.unwrap();
    assert_eq!(r.status(), 302);
    let pasted = r.headers()["location"].to_str().unwrap().to_string();
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
    assert!(status.success(), "{rest}");
    assert!(rest.contains("Signed in to notes"), "{rest}");
    rig.wait_server("notes", "ready after the pasted sign-in", |s| {
        s["phase"] == "ready"
    })
    .await;
    let a = invoke(&rig.h, call("notes_echo", json!({"text": "pasted"}))).await;
    assert!(!a.is_error, "{a:#?}");

    // Nothing secret anywhere: tokens, codes, verifiers.
    let log = py.log().await;
    let verifiers: Vec<String> = log["verifiers"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut surfaces = rig.surfaces().await;
    let list = &surfaces.iter().find(|(w, _)| w == "auth list").unwrap().1;
    assert!(
        list.contains("notes: signed in, access token valid until")
            && list.contains("renewed by its refresh token"),
        "{list}"
    );
    surfaces.push(("the model's error".into(), a.model_text.clone()));
    nothing_planted(&surfaces, &verifiers);

    // `auth logout`: revoked and forgotten.
    let o = tokio::process::Command::new(BIN)
        .args(["auth", "logout", "notes", "--config"])
        .arg(&rig.config)
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("refresh token revoked"),
        "{o:?}"
    );
    assert!(py.log().await["revocations"].as_u64() >= Some(1));
    drop(rig.ws);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_cannot_be_signed_in_to_say_why_and_a_configured_client_signs_in() {
    let admin_port = refused_port();
    let mismatch = PyOAuthServer::start(&["--issuer-mismatch"]).await;
    let no_s256 = PyOAuthServer::start(&["--no-s256"]).await;
    let no_reg = PyOAuthServer::start(&["--no-registration"]).await;
    let redirect = format!("http://127.0.0.1:{admin_port}/oauth/callback");
    let configured = PyOAuthServer::start(&[
        "--no-registration",
        "--client-redirect",
        &redirect,
        // Tokens that live 30 s: within a minute of expiry, each is
        // refreshed before it is used, before any 401.
        "--ttl",
        "30",
    ])
    .await;
    let manifest = format!(
        "{}{}{}{}[mcp_server.oauth]\nclient_id = \"configured-client\"\nclient_secret = \"${{NEKO_TEST_OAUTH_SECRET}}\"\n",
        crate::support::mcp::http_server("mismatch", &mismatch.url, ""),
        crate::support::mcp::http_server("nos256", &no_s256.url, ""),
        crate::support::mcp::http_server("noreg", &no_reg.url, ""),
        crate::support::mcp::http_server("configured", &configured.url, ""),
    );
    let rig = Rig::start(
        &manifest,
        &[("NEKO_TEST_OAUTH_SECRET", "planted-client-secret")],
        admin_port,
    )
    .await;
    for (name, why) in [
        ("mismatch", "issuer http://127.0.0.1:9/elsewhere"),
        ("nos256", "does not offer PKCE with S256"),
        ("noreg", "needs a registered client"),
    ] {
        let s = rig
            .wait_server(name, "refused with its reason", |s| {
                s["sign_in"]["state"] == "refused"
            })
            .await;
        let reason = s["sign_in"]["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{name}: {reason}");
        assert!(s["sign_in"]["link"].is_null(), "{s:#}");
    }
    let s = rig
        .wait_server("noreg", "the reason", |s| {
            s["sign_in"]["state"] == "refused"
        })
        .await;
    assert!(
        s["sign_in"]["reason"].as_str().unwrap().contains("oauth"),
        "{s:#}"
    );
    assert_eq!(no_reg.log().await["registrations"], 0);

    rig.sign_in("configured").await;
    wait_stand_in(&rig.h, "the configured client's tools", |h| {
        h.registry_snapshot().roles[0]
            .tools
            .iter()
            .any(|t| t.name == "configured_whoami")
    })
    .await;
    let a = invoke(&rig.h, call("configured_whoami", json!({}))).await;
    assert!(a.model_text.contains("configured-client"), "{a:#?}");
    let log = configured.log().await;
    assert!(
        log["refreshes"].as_u64() >= Some(1),
        "refreshed before expiry: {log:#}"
    );
    nothing_planted(&rig.surfaces().await, &[]);
}

/// The legacy HTTP+SSE transport signs in the same way: its GET answered
/// 401, discovery from its challenge, the token on the GET and the
/// POSTs; an expired token refreshed when the stream is opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_server_that_needs_oauth_is_signed_in_and_called() {
    let py = PyOAuthServer::start(&["--sse"]).await;
    let manifest = crate::support::mcp::http_server("old", &py.url, "transport = \"sse\"");
    let rig = Rig::start(&manifest, &[], refused_port()).await;
    rig.sign_in("old").await;
    wait_stand_in(&rig.h, "old's tools registered", |h| {
        h.registry_snapshot().roles[0]
            .tools
            .iter()
            .any(|t| t.name == "old_echo")
    })
    .await;
    let s = rig
        .wait_server("old", "ready", |s| s["phase"] == "ready")
        .await;
    assert!(
        s["transport"].as_str().unwrap().starts_with("sse "),
        "{s:#}"
    );
    let a = invoke(&rig.h, call("old_echo", json!({"text": "over sse"}))).await;
    assert!(!a.is_error && a.model_text.contains("over sse"), "{a:#?}");
    let a = invoke(&rig.h, call("old_whoami", json!({}))).await;
    assert!(!a.model_text.contains("nobody"), "{a:#?}");
    nothing_planted(&rig.surfaces().await, &[]);
}

/// The legacy transport reads its `401`'s challenge as Streamable HTTP
/// does: the protected resource metadata is found only where the
/// challenge's `resource_metadata` says (its well-known URIs answer 404),
/// and the challenge's `scope` is the one asked for. Its redirect naming
/// another issuer (RFC 9207) is refused at the callback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_server_is_discovered_from_its_challenge() {
    let py = PyOAuthServer::start(&["--sse", "--moved-metadata"]).await;
    let manifest = crate::support::mcp::http_server("moved", &py.url, "transport = \"sse\"");
    let rig = Rig::start(&manifest, &[], refused_port()).await;
    let s = rig
        .wait_server("moved", "needs sign-in with a link", |s| {
            s["sign_in"]["state"] == "needs_sign_in" && s["sign_in"]["link"].is_string()
        })
        .await;
    let paths = py.log().await["resource_metadata_paths"].clone();
    assert_eq!(
        paths[0], "/moved/resource-metadata",
        "discovery did not start from the challenge: {paths:#}"
    );
    let r = browser()
        .get(s["sign_in"]["link"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    let authorize = r.headers()["location"].to_str().unwrap().to_string();
    let q: std::collections::BTreeMap<_, _> = url::Url::parse(&authorize)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    assert_eq!(q["scope"], "moved-scope", "{authorize}");
    // A redirect naming another issuer (RFC 9207) is refused at the
    // callback with the reason, and nothing is exchanged.
    let redirect = rig.consent(s["sign_in"]["link"].as_str().unwrap()).await;
    let mut mixed = url::Url::parse(&redirect).unwrap();
    mixed
        .query_pairs_mut()
        .append_pair("iss", "http://127.0.0.1:9/elsewhere");
    let (code, page) = rig.arrive(mixed.as_str()).await;
    assert_eq!(code, 400, "{page}");
    assert!(
        page.contains("names issuer http://127.0.0.1:9/elsewhere") && page.contains("RFC 9207"),
        "{page}"
    );
    assert_eq!(py.log().await["exchanges"], 0);
    rig.sign_in("moved").await;
    wait_stand_in(&rig.h, "moved's tools registered", |h| {
        h.registry_snapshot().roles[0]
            .tools
            .iter()
            .any(|t| t.name == "moved_echo")
    })
    .await;
    let a = invoke(&rig.h, call("moved_echo", json!({"text": "found"}))).await;
    assert!(!a.is_error && a.model_text.contains("found"), "{a:#?}");
}
