//! The callback server with exec handlers: real `sh` scripts in a tempdir,
//! real process groups, real signals.

use std::path::Path;
use std::time::Duration;

use neko_sidecar::callback::Outcome;
use serde_json::json;

use crate::support::callback::*;
use crate::support::{exec_tool, process_gone, script, wait_until};

/// A tool running `script` (absolute path), no schema.
fn script_tool(name: &str, script: &Path, extra: &str) -> String {
    exec_tool(name, "d", &[script.to_str().unwrap()], extra)
}

async fn run_script(body: &str, extra: &str) -> (tempfile::TempDir, Sidecar) {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "h.sh", body);
    let sc = Sidecar::start(&state(dir.path(), &script_tool("t", &s, extra))).await;
    (dir, sc)
}

#[tokio::test]
async fn the_call_arrives_on_stdin_with_the_tool_and_call_id_in_the_env() {
    let (dir, sc) = run_script(
        r#"body=$(cat)
printf '{"output": {"tool": "%s", "call": "%s", "cwd": "%s", "greeting": "%s", "body": %s}, "is_error": false}' "$NEKO_TOOL_NAME" "$NEKO_CALL_ID" "$(pwd)" "$GREETING" "$body""#,
        "",
    )
    .await;
    let out = success(&sc.call("t", json!({"city": "東京"})).await);
    assert_eq!(out["tool"], "t");
    assert_eq!(out["call"], "call_test_1");
    assert_eq!(
        out["cwd"],
        dir.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(out["body"], call_body("t", json!({"city": "東京"})));
    drop(sc);

    let s = script(dir.path(), "g.sh", r#"printf '%s' "$GREETING""#);
    let toml = script_tool("g", &s, "").replace("] }", "], env = { GREETING = \"hello\" } }");
    let sc = Sidecar::start(&state(dir.path(), &toml)).await;
    assert_eq!(success(&sc.call("g", json!({})).await), "hello");
}

#[tokio::test]
async fn plain_text_and_plain_json_on_stdout_are_wrapped() {
    let (_d, sc) = run_script("echo 'sunny, 22 C'", "").await;
    assert_eq!(success(&sc.call("t", json!({})).await), "sunny, 22 C");
    let (_d, sc) = run_script(r#"echo '{"temp": 22}'"#, "").await;
    assert_eq!(success(&sc.call("t", json!({})).await), json!({"temp": 22}));
}

#[tokio::test]
async fn a_handler_that_never_reads_stdin_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "h.sh", "echo ok");
    let mut big_bodies = settings();
    big_bodies.max_body_bytes = 1 << 20;
    let sc = Sidecar::start_with(&state(dir.path(), &script_tool("t", &s, "")), big_bodies).await;
    // Far more than a pipe holds, so writing it meets a closed pipe.
    let big = "y".repeat(200 * 1024);
    assert_eq!(success(&sc.call("t", json!({ "pad": big })).await), "ok");
}

#[tokio::test]
async fn a_non_zero_exit_reports_the_status_and_the_stderr_tail() {
    let (_d, sc) = run_script(
        "cat >/dev/null\necho 'starting' >&2\necho 'boom: no database at /var/db' >&2\nexit 3",
        "",
    )
    .await;
    let msg = failure(&sc.call("t", json!({})).await, "HANDLER_EXIT");
    assert_eq!(
        msg,
        "the handler exited with status 3; its stderr ended with:\nstarting\nboom: no database at /var/db"
    );
    let (_d, sc) = run_script("echo 'partial'\nkill -9 $$", "").await;
    let msg = failure(&sc.call("t", json!({})).await, "HANDLER_EXIT");
    assert_eq!(
        msg,
        "the handler was killed by signal 9 (SIGKILL); its stdout began with:\npartial"
    );
}

async fn hang_is_stopped_with_its_children(prelude: &str) {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "hang.sh",
        &format!("{prelude}\nsleep 300 &\necho $! > child.pid\necho $$ > self.pid\nwait"),
    );
    let sc = Sidecar::start(&state(
        dir.path(),
        &script_tool("t", &s, "timeout_seconds = 1"),
    ))
    .await;
    let msg = failure(&sc.call("t", json!({})).await, "TOOL_TIMEOUT");
    assert_eq!(
        msg,
        "the handler did not answer within 0.9 s and was stopped"
    );
    let pid = |f: &str| -> u32 {
        std::fs::read_to_string(dir.path().join(f))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (leader, child) = (pid("self.pid"), pid("child.pid"));
    assert!(
        wait_until(Duration::from_secs(10), || process_gone(leader)
            && process_gone(child))
        .await,
        "the handler ({leader}) or its child ({child}) is still running"
    );
    // The leader was reaped by the sidecar: not even a zombie is left.
    assert!(
        wait_until(Duration::from_secs(10), || !Path::new(&format!(
            "/proc/{leader}"
        ))
        .exists())
        .await,
        "the handler {leader} was not reaped"
    );
    assert_eq!(sc.handle.stats().tools["t"].count(Outcome::Timeout), 1);
}

#[tokio::test]
async fn a_hanging_handler_is_stopped_with_its_children() {
    hang_is_stopped_with_its_children("").await;
}

#[tokio::test]
async fn a_handler_that_ignores_sigterm_is_killed_after_the_grace() {
    // An ignored signal stays ignored across exec: `sleep` ignores it too.
    hang_is_stopped_with_its_children("trap '' TERM").await;
}

#[tokio::test]
async fn too_much_stdout_is_refused_and_the_writer_stopped() {
    let (_d, sc) = run_script("cat >/dev/null\nhead -c 100000 /dev/zero | tr '\\0' x", "").await;
    let msg = failure(&sc.call("t", json!({})).await, "OUTPUT_TOO_LARGE");
    assert!(msg.contains("65536 bytes"), "{msg}");
    // A writer that never stops is stopped too.
    let (_d, sc) = run_script("exec yes", "").await;
    failure(&sc.call("t", json!({})).await, "OUTPUT_TOO_LARGE");
}

#[tokio::test]
async fn a_missing_program_is_a_clear_failure() {
    let dir = tempfile::tempdir().unwrap();
    let toml = "[[tool]]\nname = \"t\"\ndescription = \"d\"\nhandler = { type = \"exec\", command = [\"neko-no-such-program\", \"x\"] }\n";
    // A missing program is only a warning at load time.
    let sc = Sidecar::start(&state(dir.path(), toml)).await;
    let msg = failure(&sc.call("t", json!({})).await, "HANDLER_NOT_STARTED");
    assert!(
        msg.starts_with("cannot start `neko-no-such-program`: not found"),
        "{msg}"
    );
}

#[tokio::test]
async fn invalid_arguments_never_start_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "h.sh", "touch ran\necho ok");
    let toml = script_tool("t", &s, "")
        + "parameters = { type = \"object\", properties = { n = { type = \"integer\" } } }\n";
    let sc = Sidecar::start(&state(dir.path(), &toml)).await;
    let msg = failure(
        &sc.call("t", json!({"n": "five"})).await,
        "INVALID_ARGUMENTS",
    );
    assert!(
        msg.contains("- at /n: \"five\" is not of type \"integer\""),
        "{msg}"
    );
    assert!(!dir.path().join("ran").exists());
    assert_eq!(success(&sc.call("t", json!({"n": 5})).await), "ok");
    assert!(dir.path().join("ran").exists());
}

/// The answer came long before the 20 s deadline, and the background job
/// was stopped after it.
async fn answered_promptly_and_job_gone(took: Duration, bg: u32) {
    assert!(
        took < Duration::from_secs(5),
        "answered after {took:?} of 20 s"
    );
    assert!(
        wait_until(Duration::from_secs(10), || process_gone(bg)).await,
        "the background job {bg} is still running"
    );
}

/// Calls a tool whose handler is `sh -c SCRIPT` (a 20 s budget) and whose
/// background `sleep` writes its pid to bg.pid; returns the answer, how
/// long it took, and that pid.
async fn call_with_a_background_job(
    script: &str,
) -> (Sidecar, (u16, serde_json::Value), Duration, u32) {
    let dir = tempfile::tempdir().unwrap();
    let toml = exec_tool("t", "d", &["sh", "-c", script], "timeout_seconds = 20");
    let sc = Sidecar::start(&state(dir.path(), &toml)).await;
    let started = std::time::Instant::now();
    let answer = sc.call("t", json!({})).await;
    let took = started.elapsed();
    let bg = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (sc, answer, took, bg)
}

#[tokio::test]
async fn a_handler_whose_background_job_holds_stdout_is_answered_when_it_exits() {
    // As a new user writes it: the job inherits stdout and keeps the pipe
    // open for 300 s after the handler has answered and exited.
    let (sc, answer, took, bg) = call_with_a_background_job(
        r#"sleep 300 & echo $! > bg.pid; echo '{"output":"hi","is_error":false}'"#,
    )
    .await;
    assert_eq!(success(&answer), "hi");
    answered_promptly_and_job_gone(took, bg).await;
    assert_eq!(sc.handle.stats().tools["t"].count(Outcome::Ok), 1);
}

#[tokio::test]
async fn a_background_job_holding_stdout_that_ignores_sigterm_is_killed() {
    let (_sc, answer, took, bg) =
        call_with_a_background_job(r#"trap '' TERM; sleep 300 & echo $! > bg.pid; echo hi"#).await;
    assert_eq!(success(&answer), "hi");
    answered_promptly_and_job_gone(took, bg).await;
}

#[tokio::test]
async fn a_failing_handler_whose_background_job_holds_stdout_reports_its_exit() {
    let (sc, answer, took, bg) =
        call_with_a_background_job("sleep 300 & echo $! > bg.pid; echo 'no database' >&2; exit 4")
            .await;
    let msg = failure(&answer, "HANDLER_EXIT");
    assert_eq!(
        msg,
        "the handler exited with status 4; its stderr ended with:\nno database"
    );
    answered_promptly_and_job_gone(took, bg).await;
    assert_eq!(sc.handle.stats().tools["t"].count(Outcome::HandlerExit), 1);
}

/// Issue 48: exec handlers inherit the sidecar's whole environment (the
/// variables README tells users to keep MCP keys in among them) unless
/// their manifest says `inherit_env = false` (only their `env`) or names
/// the variables to pass on. The child's own environment is what counts:
/// it is read by the handler (`export -p`, a builtin, as `false` leaves
/// no PATH to find `env` on).
#[tokio::test]
async fn inherit_env_gives_the_handler_only_what_its_manifest_names() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "env.sh", r#"printf '%s' "$(export -p)""#);
    let names = |inherit: &str| {
        let toml = script_tool("e", &s, "").replace(
            "] }",
            &format!("], env = {{ GREETING = \"hello\" }}, inherit_env = {inherit} }}"),
        );
        let dir = dir.path().to_path_buf();
        async move {
            let sc = Sidecar::start(&state(&dir, &toml)).await;
            let out = success(&sc.call("e", json!({})).await);
            let mut names: Vec<String> = out
                .as_str()
                .unwrap()
                .lines()
                .filter_map(|l| l.strip_prefix("export "))
                .map(|l| l.split('=').next().unwrap().to_string())
                // What the shell sets itself.
                .filter(|n| !["PWD", "OLDPWD", "SHLVL", "_"].contains(&n.as_str()))
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(
        names("false").await,
        ["GREETING", "NEKO_CALL_ID", "NEKO_TOOL_NAME"]
    );
    assert_eq!(
        names(r#"["PATH", "NO_SUCH_VARIABLE_48"]"#).await,
        ["GREETING", "NEKO_CALL_ID", "NEKO_TOOL_NAME", "PATH"]
    );
    // The default: the sidecar's environment (this test process's).
    let all = names("true").await;
    assert!(all.contains(&"PATH".to_string()), "{all:?}");
    assert!(all.len() > 4, "{all:?}");
}
