//! The example handlers in `examples/handlers/`, called through the real
//! callback server as a plugin author would wire them. Python and Node
//! examples are skipped, saying so, when the interpreter is missing.

use std::path::PathBuf;

use serde_json::json;

use crate::support::callback::*;
use crate::support::{repo, skip_without, weather_http_server};

fn handlers_dir() -> PathBuf {
    repo().join("examples/handlers")
}

fn weather_tool(handler: &str) -> String {
    format!(
        "[[tool]]\nname = \"weather\"\ndescription = \"Weather of a city\"\nhandler = {handler}\nparameters = {{ type = \"object\", properties = {{ city = {{ type = \"string\" }} }}, required = [\"city\"] }}\n"
    )
}

async fn check_weather(sc: &Sidecar) {
    let out = success(&sc.call("weather", json!({"city": "Tokyo"})).await);
    assert_eq!(
        out,
        json!({"city": "Tokyo", "temp_c": 22, "weather": "sunny"})
    );
    // A failure carries its message in `output`, the only part main_server
    // shows the model; `error` repeats it for the logs.
    let (_, body) = sc.call("weather", json!({"city": "Paris"})).await;
    assert_eq!(body["is_error"], true);
    let message = body["output"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        message.contains("unknown city") && message.contains("known cities"),
        "{body}"
    );
    assert_eq!(body["output"], json!({ "error": message }), "{body}");
    assert_eq!(body["error"], message, "{body}");
}

async fn exec_example(interpreter: &str, file: &str) {
    if skip_without(interpreter, &format!("examples/handlers/{file}")) {
        return;
    }
    let script = handlers_dir().join(file);
    let handler = format!(
        "{{ type = \"exec\", command = [\"{interpreter}\", \"{}\"] }}",
        script.display()
    );
    let sc = Sidecar::start(&state(&handlers_dir(), &weather_tool(&handler))).await;
    check_weather(&sc).await;
}

#[tokio::test]
async fn the_python_exec_example_answers() {
    exec_example("python3", "weather_exec.py").await;
}

/// Windows' Python reads piped stdin in the ANSI code page (GBK on a
/// Chinese Windows, cp1252 on an English one), not UTF-8, so a handler that
/// read `sys.stdin` as text got a city typed in Chinese or Japanese as
/// mojibake. `PYTHONIOENCODING=gbk` gives Linux's Python the same stdin;
/// the examples read the bytes and decode them as JSON's UTF-8.
#[tokio::test]
async fn the_python_exec_examples_read_the_call_as_utf8_whatever_the_code_page() {
    if skip_without(
        "python3",
        "examples/handlers/weather_exec.py with a GBK stdin",
    ) {
        return;
    }
    for (script, flags) in [
        ("weather_exec.py", &[][..]),
        ("weather_mcp.py", &["--exec"][..]),
    ] {
        let mut command = vec![
            "python3".to_string(),
            handlers_dir().join(script).display().to_string(),
        ];
        command.extend(flags.iter().map(|f| f.to_string()));
        let handler = format!(
            "{{ type = \"exec\", command = {command:?}, env = {{ PYTHONIOENCODING = \"gbk\" }} }}"
        );
        let sc = Sidecar::start(&state(&handlers_dir(), &weather_tool(&handler))).await;
        let (_, body) = sc.call("weather", json!({"city": "東京"})).await;
        let message = body["output"]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{script}: {body}"));
        assert!(message.contains("'東京'"), "{script}: {message}");
    }
}

#[tokio::test]
async fn the_node_exec_example_answers() {
    exec_example("node", "weather_exec.js").await;
}

// The example is a `sh` script: Unix only.
#[cfg(unix)]
#[tokio::test]
async fn the_sh_exec_example_answers() {
    let toml = format!(
        "[[tool]]\nname = \"disk_usage\"\ndescription = \"Disk usage\"\nhandler = {{ type = \"exec\", command = [\"{}\"] }}\n",
        handlers_dir().join("disk_usage.sh").display()
    );
    let sc = Sidecar::start(&state(&handlers_dir(), &toml)).await;
    let out = success(&sc.call("disk_usage", json!({})).await);
    assert!(out.as_str().unwrap().contains(" used of "), "{out}");
}

// The Windows zip's counterpart of the `sh` script, a batch file run by
// cmd: Windows only (under Wine here).
#[cfg(windows)]
#[tokio::test]
async fn the_cmd_exec_example_answers() {
    let dir = crate::support::repo().join("packaging/windows/examples/handlers");
    // Relative to the manifest's folder, the handler's default cwd.
    let toml = "[[tool]]\nname = \"disk_usage\"\ndescription = \"Disk usage\"\nhandler = { type = \"exec\", command = [\"cmd\", \"/d\", \"/c\", \"disk_usage.cmd\"] }\n";
    let sc = Sidecar::start(&state(&dir, toml)).await;
    let out = success(&sc.call("disk_usage", json!({})).await);
    let text = out.as_str().unwrap_or_else(|| panic!("{out}"));
    assert!(
        text.contains(" GB free (") && text.contains(" bytes) on "),
        "{out}"
    );
}

#[tokio::test]
async fn the_python_http_example_answers() {
    if skip_without("python3", "examples/handlers/weather_http.py") {
        return;
    }
    let (mut server, addr) = weather_http_server(&handlers_dir().join("weather_http.py")).await;
    let handler = format!("{{ type = \"http\", url = \"http://{addr}/weather\" }}");
    let sc = Sidecar::start(&state(&handlers_dir(), &weather_tool(&handler))).await;
    check_weather(&sc).await;
    server.kill().await.unwrap();
}
