//! What the model reads when a call fails: for every failure class of the
//! README's "What the sidecar guarantees the model" table, and for a
//! handler's own failure envelopes that put the reason only in `error`,
//! the text main_server shows the model (`/__dev/invoke`'s `model_text`,
//! built by the same rules as the real server's) names what went wrong.
//!
//! main_server shows the model `output` alone, so a reason that is only in
//! `error` would reach it as `null`. One daemon, in-process, against the
//! stand-in, serves every tool below over real loopback sockets.

use axum::http::StatusCode;
use neko_sidecar::devserver::{DevServerHandle, InvokeAnswer, InvokeRequest};
use serde_json::{Value, json};

use crate::support::daemon::{InProcess, our_names};
use crate::support::{
    WAIT, Workspace, call, dev_server, exec_tool, http_tool, invoke, refused_port,
    register_foreign, script, serve_http, wait_stand_in, wait_until,
};

/// An exec tool running `sh -c SCRIPT`, with extra manifest lines.
fn sh_tool(name: &str, script: &str, extra: &str) -> String {
    exec_tool(name, name, &["sh", "-c", script], extra)
}

/// A plugin endpoint that answers every call with HTTP 500.
async fn failing_plugin() -> String {
    let app = axum::Router::new().fallback(|| async {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "database connection lost",
        )
    });
    format!("http://{}/tool", serve_http(app).await)
}

/// A tool that never answers in time, one call at a time.
fn slow_tool(timeout_seconds: u32) -> String {
    sh_tool(
        "slow",
        "cat >/dev/null; sleep 30",
        &format!("timeout_seconds = {timeout_seconds}\nmax_concurrency = 1"),
    )
}

struct Setup {
    h: DevServerHandle,
    d: InProcess,
    ws: Workspace,
}

impl Setup {
    async fn start() -> Self {
        let h = dev_server().await;
        let ws = Workspace::new();
        let plugin = failing_plugin().await;
        let mut manifest = String::new();
        manifest += &sh_tool(
            "strict",
            "cat >/dev/null; echo ok",
            "[tool.parameters]\ntype = \"object\"\nrequired = [\"city\"]\nproperties.city = { type = \"string\" }\n",
        );
        manifest += &http_tool(
            "unreachable",
            "unreachable",
            &format!("http://127.0.0.1:{}/tool", refused_port()),
            "",
        );
        manifest += &http_tool("http_500", "http_500", &plugin, "");
        manifest += &sh_tool(
            "exits",
            "cat >/dev/null; echo 'disk quota exceeded' >&2; exit 3",
            "",
        );
        manifest += &sh_tool(
            "big",
            "cat >/dev/null; head -c 5000 /dev/zero | tr '\\000' a",
            "",
        );
        manifest += &sh_tool(
            "null_output",
            r#"cat >/dev/null; echo '{"output":null,"is_error":true,"error":"no city named Atlantis"}'"#,
            "",
        );
        manifest += &sh_tool(
            "error_only",
            r#"cat >/dev/null; echo '{"is_error":true,"error":"the API key has expired"}'"#,
            "",
        );
        // A program that exists when the manifest is loaded and is gone
        // by the time of the call.
        let gone = script(&ws.root, "gone.sh", "echo hi");
        ws.write_tool(
            "missing.toml",
            &exec_tool("missing", "missing", &[gone.to_str().unwrap()], ""),
        );
        ws.write_tool("tools.toml", &manifest);
        ws.write_tool("slow.toml", &slow_tool(6));
        let agent = ws.agent(&h.url());
        let config = ws.write_config(&agent);
        // A small answer limit, so that `big` passes it.
        let mut text = std::fs::read_to_string(&config).unwrap();
        text += "\n[handlers]\nmax_output_bytes = 1024\n";
        std::fs::write(&config, text).unwrap();
        let d = InProcess::start(&config).await;
        wait_stand_in(&h, "every tool registered", |h| {
            let snap = h.registry_snapshot();
            our_names(&snap, "小八").len() == 9
        })
        .await;
        std::fs::remove_file(&gone).unwrap();
        Setup { h, d, ws }
    }

    async fn invoke(&self, req: InvokeRequest) -> InvokeAnswer {
        invoke(&self.h, req).await
    }

    async fn call(&self, name: &str, arguments: Value) -> InvokeAnswer {
        invoke(&self.h, call(name, arguments)).await
    }

    /// Registers `name` by hand, with the callback URL of `like` changed by
    /// `edit`: a call main_server makes to a URL the sidecar does not serve.
    async fn register_stale(&self, name: &str, like: &str, edit: impl Fn(&str) -> String) {
        let snap = self.h.registry_snapshot();
        let url = snap
            .tool("小八", like)
            .and_then(|t| t.callback_url.clone())
            .unwrap();
        register_foreign(&self.h.url(), name, "plugin:other", &edit(&url)).await;
    }
}

/// The model reads a failure, and `want` in its text.
#[track_caller]
fn reads(a: &InvokeAnswer, want: &[&str]) {
    assert!(a.is_error, "{a:#?}");
    for w in want {
        assert!(
            a.model_text.contains(w),
            "the model reads {:?}, without {w:?}",
            a.model_text
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_class_reaches_the_model_with_its_reason() {
    let s = Setup::start().await;

    // Arguments that break the schema, and arguments that are not JSON.
    reads(
        &s.call("strict", json!({"city": 7})).await,
        &["/city", "INVALID_ARGUMENTS"],
    );
    let broken = s
        .invoke(InvokeRequest {
            name: "strict".into(),
            raw_arguments: Some("{city: Tokyo".into()),
            ..Default::default()
        })
        .await;
    reads(&broken, &["{city: Tokyo", "INVALID_ARGUMENTS"]);

    // http handlers: refused, and a non-2xx answer.
    reads(
        &s.call("unreachable", json!({})).await,
        &["not reachable", "HANDLER_UNREACHABLE"],
    );
    reads(
        &s.call("http_500", json!({})).await,
        &["500", "database connection lost", "HANDLER_HTTP_ERROR"],
    );

    // An exec handler that exits non-zero, one that cannot start, one that
    // says too much.
    reads(
        &s.call("exits", json!({})).await,
        &["status 3", "disk quota exceeded", "HANDLER_EXIT"],
    );
    reads(
        &s.call("missing", json!({})).await,
        &["cannot start", "HANDLER_NOT_STARTED"],
    );
    reads(
        &s.call("big", json!({})).await,
        &["larger than", "OUTPUT_TOO_LARGE"],
    );

    // No answer in time, and a second call past `max_concurrency` meanwhile.
    // A call past `max_concurrency` waits for a slot until its own
    // deadline: it is refused when the call holding the slot has a later
    // deadline than its own, which a saved edit to a shorter timeout gives.
    let first = s.call("slow", json!({}));
    let second = async {
        let slow_in_flight = || s.d.daemon().callback.stats().tools["slow"].in_flight > 0;
        assert!(
            wait_until(WAIT, slow_in_flight).await,
            "the first call never arrived"
        );
        s.ws.write_tool("slow.toml", &slow_tool(2));
        wait_stand_in(&s.h, "the shorter timeout registered", |h| {
            h.registry_snapshot()
                .tool("小八", "slow")
                .is_some_and(|t| t.timeout_seconds == 2.0)
        })
        .await;
        s.call("slow", json!({})).await
    };
    let (timed_out, refused) = tokio::join!(first, second);
    reads(&timed_out, &["did not answer within", "TOOL_TIMEOUT"]);
    reads(&refused, &["too many concurrent calls", "TOO_MANY_CALLS"]);

    // main_server calling a URL the sidecar does not serve.
    s.register_stale("ghost", "strict", |u| u.replace("/strict", "/ghost"))
        .await;
    reads(
        &s.call("ghost", json!({})).await,
        &["`ghost` is not served", "TOOL_NOT_REGISTERED"],
    );
    s.register_stale("stale", "strict", |u| {
        let (base, tool) = u.rsplit_once('/').unwrap();
        let (prefix, _token) = base.rsplit_once('/').unwrap();
        format!("{prefix}/0123456789abcdef/{tool}")
    })
    .await;
    reads(
        &s.call("stale", json!({})).await,
        &["out of date", "UNKNOWN_CALLBACK_TOKEN"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reason_only_in_error_is_read_by_the_model() {
    let s = Setup::start().await;
    let a = s.call("null_output", json!({})).await;
    reads(&a, &["no city named Atlantis"]);
    assert_eq!(a.output, json!({"error": "no city named Atlantis"}));
    let a = s.call("error_only", json!({})).await;
    reads(&a, &["the API key has expired"]);
    // `error` is kept for the logs, and never what the model reads.
    assert_eq!(a.error, Some(json!("the API key has expired")));
    assert!(!a.error_reaches_model);
}
