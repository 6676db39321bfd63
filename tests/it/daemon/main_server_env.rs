//! A config that does not say where main_server is: the sidecar goes where
//! N.E.K.O says, the port its launcher exports as `NEKO_MAIN_SERVER_PORT`
//! (then `MAIN_SERVER_PORT`), which a plugin's process and the sidecar it
//! starts inherit. The reading order itself is `contract`'s unit test.

use crate::support::daemon::*;
use crate::support::{Workspace, dev_server};

/// `agent.toml` of `ws` for the stand-in at `url`, without `[main_server] url`.
fn config_without_url(ws: &Workspace, url: &str) -> std::path::PathBuf {
    let path = ws.write_config(&ws.agent(url));
    let text = std::fs::read_to_string(&path).unwrap();
    let without: String = text
        .lines()
        .filter(|l| !l.starts_with("url = "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(text, without, "the url line was there");
    std::fs::write(&path, without).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_url_the_port_comes_from_nekos_environment() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha"], "v1"));
    let config = config_without_url(&ws, &h.url());
    let mut cmd = run_command(&config);
    // NEKO_ wins over the bare name, which points nowhere useful.
    cmd.env("NEKO_MAIN_SERVER_PORT", h.addr().port().to_string())
        .env("MAIN_SERVER_PORT", "1");
    let mut sidecar = Sidecar::spawn_command(cmd);
    wait_holds(&h, &[("alpha", "v1")]).await;
    sidecar.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_server_port_alone_is_read_too() {
    let h = dev_server().await;
    let ws = Workspace::new();
    ws.write_tool("x.toml", &tools(&["alpha"], "v1"));
    let config = config_without_url(&ws, &h.url());
    let mut cmd = run_command(&config);
    cmd.env_remove("NEKO_MAIN_SERVER_PORT")
        .env("MAIN_SERVER_PORT", h.addr().port().to_string());
    let mut sidecar = Sidecar::spawn_command(cmd);
    wait_holds(&h, &[("alpha", "v1")]).await;
    sidecar.kill().await;
}
