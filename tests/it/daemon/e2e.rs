//! End to end (issue 5): the stand-in main_server calls a tool as the model
//! would → the daemon (in-process) → each example handler of `examples/`
//! (copies of `examples/tools` and `examples/handlers` in a tempdir, the
//! weather http handler on a free port) → back to what the model sees:
//! get_weather (Tokyo; an unknown city as a tool error), convert_units
//! (100 °C in °F), roll_dice (only for role Lanlan; totals in bounds),
//! disk_usage (plain text), arguments the schema refuses and arguments that
//! were not JSON (`_raw`), both answered without running the handler.
//! Parts needing python3 or node print `SKIPPED: ...` when it is missing.

use std::path::{Path, PathBuf};

use neko_sidecar::callback::Outcome;
use neko_sidecar::devserver::{DevServerHandle, InvokeAnswer, InvokeError, InvokeRequest};
use serde_json::{Value, json};
use tokio::process::Child;

use crate::support::daemon::{InProcess, our_names};
use crate::support::{
    Workspace, call, dev_server, have, invoke, repo, skip_without, try_invoke, wait_stand_in,
    weather_http_server,
};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The examples running: the stand-in, the daemon, the weather handler.
struct Examples {
    h: DevServerHandle,
    d: InProcess,
    /// Created by the witness tool's handler, and only by it.
    witness: PathBuf,
    _weather: Option<Child>,
    _ws: Workspace,
}

/// A tool whose handler leaves a file behind, to prove whether it ran.
fn witness_manifest(witness: &Path) -> String {
    format!(
        r#"[[tool]]
name = "witness"
description = "Leaves a file behind when its handler runs."
handler = {{ type = "exec", command = ["sh", "-c", "touch \"$WITNESS\"; cat >/dev/null; echo ran"], env = {{ WITNESS = "{}" }} }}

[tool.parameters]
type = "object"
required = ["n"]
properties = {{ n = {{ type = "integer" }} }}
"#,
        witness.display()
    )
}

impl Examples {
    async fn start() -> Self {
        let examples = repo().join("examples");
        let ws = Workspace::new();
        copy_dir(&examples.join("tools"), &ws.tools);
        // The MCP example needs the Python `mcp` SDK, which CI does not
        // install; the MCP handler is tested against the stand-in MCP server
        // (tests/it/mcp) and measured with the SDK by bench/mcp.sh.
        std::fs::remove_file(ws.tool_path("weather_mcp.toml")).unwrap();
        // The manifests' relative commands (`../handlers/x`) find these.
        let handlers = ws.root.join("handlers");
        copy_dir(&examples.join("handlers"), &handlers);
        let weather = match have("python3") {
            true => {
                let (child, addr) = weather_http_server(&handlers.join("weather_http.py")).await;
                let path = ws.tool_path("weather.toml");
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(text.contains("127.0.0.1:9876"), "{text}");
                std::fs::write(&path, text.replace("127.0.0.1:9876", &addr)).unwrap();
                Some(child)
            }
            false => None,
        };
        let witness = ws.root.join("witness-ran");
        ws.write_tool("witness.toml", &witness_manifest(&witness));

        let h = dev_server().await;
        let d = InProcess::start(&ws.write_config(&ws.agent(&h.url()))).await;
        let expected: Vec<&str> = [
            ("get_weather", have("python3")),
            ("convert_units", have("python3")),
            ("disk_usage", true),
            ("witness", true),
        ]
        .into_iter()
        .filter_map(|(n, ok)| ok.then_some(n))
        .collect();
        let lanlan_too = have("node");
        wait_stand_in(&h, "the examples registered", |h| {
            let snap = h.registry_snapshot();
            let mine = our_names(&snap, "Lanlan");
            expected
                .iter()
                .all(|n| our_names(&snap, "小八").iter().any(|m| m == n))
                && (!lanlan_too || mine.iter().any(|m| m == "roll_dice"))
        })
        .await;
        Examples {
            h,
            d,
            witness,
            _weather: weather,
            _ws: ws,
        }
    }

    async fn call(&self, name: &str, role: Option<&str>, arguments: Value) -> InvokeAnswer {
        let req = InvokeRequest {
            role: role.map(str::to_owned),
            ..call(name, arguments)
        };
        invoke(&self.h, req).await
    }

    async fn try_call(&self, req: InvokeRequest) -> Result<InvokeAnswer, InvokeError> {
        try_invoke(&self.h, req).await
    }

    fn outcomes(&self, tool: &str) -> Vec<(Outcome, u64)> {
        let stats = self.d.daemon().callback.stats();
        let mut v: Vec<(Outcome, u64)> = stats.tools[tool]
            .outcomes
            .iter()
            .copied()
            .filter(|(_, n)| *n > 0)
            .collect();
        v.sort_by_key(|(o, _)| o.label());
        v
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_weather_over_http_answers_tokyo_and_reports_an_unknown_city() {
    if skip_without("python3", "get_weather") {
        return;
    }
    let ex = Examples::start().await;
    let tokyo = ex.call("get_weather", None, json!({"city": "Tokyo"})).await;
    assert!(!tokyo.is_error, "{tokyo:?}");
    assert_eq!(
        tokyo.output,
        json!({"city": "Tokyo", "temp_c": 22, "weather": "sunny"})
    );

    let nowhere = ex
        .call("get_weather", None, json!({"city": "Atlantis"}))
        .await;
    assert!(nowhere.is_error, "{nowhere:?}");
    assert_eq!(
        nowhere.error,
        Some(json!(
            "unknown city 'Atlantis'; known cities: Tokyo, Osaka, Sapporo"
        ))
    );
    assert_eq!(
        ex.outcomes("get_weather"),
        [(Outcome::Ok, 1), (Outcome::ToolError, 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convert_units_in_python_turns_100_c_into_212_f() {
    if skip_without("python3", "convert_units") {
        return;
    }
    let ex = Examples::start().await;
    let a = ex
        .call(
            "convert_units",
            None,
            json!({"value": 100, "from": "c", "to": "f"}),
        )
        .await;
    assert!(!a.is_error, "{a:?}");
    assert_eq!(a.output["unit"], "f");
    assert_eq!(a.output["value"].as_f64(), Some(212.0), "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roll_dice_in_node_is_only_lanlans_and_totals_within_bounds() {
    if skip_without("node", "roll_dice") {
        return;
    }
    let ex = Examples::start().await;
    let a = ex
        .call("roll_dice", Some("Lanlan"), json!({"count": 3, "sides": 6}))
        .await;
    assert!(!a.is_error, "{a:?}");
    assert_eq!(a.role, "Lanlan");
    let rolls: Vec<i64> = a.output["rolls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_i64().unwrap())
        .collect();
    assert_eq!(rolls.len(), 3);
    assert!(rolls.iter().all(|r| (1..=6).contains(r)), "{rolls:?}");
    let total = a.output["total"].as_i64().unwrap();
    assert_eq!(total, rolls.iter().sum::<i64>());
    assert!((3..=18).contains(&total));

    let other = ex
        .try_call(InvokeRequest {
            name: "roll_dice".into(),
            arguments: Some(json!({"count": 1, "sides": 6})),
            role: Some("小八".into()),
            ..Default::default()
        })
        .await;
    assert_eq!(
        other.unwrap_err(),
        InvokeError::UnknownTool {
            role: "小八".into(),
            name: "roll_dice".into()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_usage_in_sh_answers_a_line_of_text() {
    let ex = Examples::start().await;
    let a = ex.call("disk_usage", None, json!({})).await;
    assert!(!a.is_error, "{a:?}");
    let text = a.output.as_str().unwrap_or_else(|| panic!("{a:?}"));
    // "4.0G used of 20G (20%), 16G free, on /"
    let (used, rest) = text.split_once(" used of ").expect(text);
    let (total, rest) = rest.split_once(" (").expect(text);
    let (pct, rest) = rest.split_once("%), ").expect(text);
    let (free, mount) = rest.split_once(" free, on ").expect(text);
    assert!(
        !used.is_empty() && !total.is_empty() && !free.is_empty(),
        "{text}"
    );
    assert!(pct.parse::<u8>().is_ok_and(|p| p <= 100), "{text}");
    assert!(mount.starts_with('/'), "{text}");
    assert!(!text.ends_with('\n'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_the_schema_refuses_are_answered_without_running_the_handler() {
    let ex = Examples::start().await;
    let bad = ex.call("witness", None, json!({"n": "three"})).await;
    assert!(bad.is_error, "{bad:?}");
    assert_eq!(bad.output["code"], "INVALID_ARGUMENTS");
    let msg = bad.error.as_ref().and_then(Value::as_str).unwrap();
    assert!(
        msg.starts_with(
            "the arguments do not match the parameters of `witness`, so it was not run:"
        ) && msg.contains("/n"),
        "{msg}"
    );
    assert!(!ex.witness.exists(), "the handler ran");

    // The witness works: a valid call runs it.
    let good = ex.call("witness", None, json!({"n": 3})).await;
    assert_eq!(good.output, json!("ran"), "{good:?}");
    assert!(ex.witness.exists());
    assert_eq!(
        ex.outcomes("witness"),
        [(Outcome::InvalidArguments, 1), (Outcome::Ok, 1)]
    );

    if skip_without("python3", "convert_units validation") {
        return;
    }
    let a = ex
        .call(
            "convert_units",
            None,
            json!({"value": "hot", "from": "c", "to": "kelvin"}),
        )
        .await;
    assert!(a.is_error, "{a:?}");
    assert_eq!(a.output["code"], "INVALID_ARGUMENTS");
    let pointers: Vec<&str> = a.output["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pointer"].as_str().unwrap())
        .collect();
    assert!(
        pointers.contains(&"/value") && pointers.contains(&"/to"),
        "{pointers:?}"
    );
    assert_eq!(
        ex.outcomes("convert_units"),
        [(Outcome::InvalidArguments, 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_were_not_json_arrive_as_raw_and_are_answered_without_running_the_handler() {
    let ex = Examples::start().await;
    let a = ex
        .try_call(InvokeRequest {
            name: "witness".into(),
            raw_arguments: Some("n equals three".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(a.is_error, "{a:?}");
    assert_eq!(a.output["code"], "INVALID_ARGUMENTS");
    let msg = a.error.as_ref().and_then(Value::as_str).unwrap();
    assert!(
        msg.starts_with("the arguments were not valid JSON, so `witness` was not run")
            && msg.contains("n equals three"),
        "{msg}"
    );
    assert!(!ex.witness.exists(), "the handler ran");

    if skip_without("python3", "get_weather with _raw") {
        return;
    }
    let w = ex
        .try_call(InvokeRequest {
            name: "get_weather".into(),
            raw_arguments: Some("{city: Tokyo".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(w.is_error, "{w:?}");
    assert_eq!(w.output["code"], "INVALID_ARGUMENTS");
    assert_eq!(ex.outcomes("get_weather"), [(Outcome::InvalidArguments, 1)]);
}
