//! `neko-sidecar demo`, run as a user runs it: the real binary, checked on
//! the outcome of each step (from its `--report`), not on its wording.

use std::process::Command;

use serde_json::Value as Json;

use crate::support::{BIN, have};

#[test]
fn the_demo_tells_the_whole_story_and_every_step_holds() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(["demo", "--report"])
        .arg(&report)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    // The bound for a fresh clone; the demo itself takes about a second.
    assert!(
        started.elapsed().as_secs() < 30,
        "took {:?}",
        started.elapsed()
    );

    let report: Json = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["ok"], true, "{report:#}");
    let steps: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["ok"], true, "step failed: {s:#}");
            s["step"].as_str().unwrap()
        })
        .collect();

    // Tools whose interpreter is missing are skipped (and said so); the
    // in-process http tool always runs. On Windows the shell example is
    // the zip's batch file, run by cmd, which every Windows has.
    let mut expected_tools = vec!["get_weather"];
    let shell = if cfg!(windows) { "cmd" } else { "sh" };
    for (tool, program) in [
        ("convert_units", "python3"),
        ("roll_dice", "node"),
        ("disk_usage", shell),
    ] {
        let found = if program == "python3" {
            neko_sidecar::os::python().is_some()
        } else {
            have(program)
        };
        if found {
            expected_tools.push(tool);
        } else {
            assert!(stdout.contains(&format!("skipping {tool}")), "{stdout}");
        }
    }
    // The stand-in MCP server runs in the demo's process: its three tools
    // are always there, and the model calls two.
    let registered = &report["steps"][0];
    assert_eq!(registered["step"], "registered");
    assert_eq!(registered["detail"]["tools"], expected_tools.len() + 3);
    for (_, names) in registered["detail"]["by_role"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].clone(), r[1].clone()))
    {
        let names: Vec<&str> = names
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        assert!(
            ["mcp_add", "mcp_echo", "mcp_image"]
                .iter()
                .all(|t| names.contains(t)),
            "{names:?}"
        );
    }

    let mut want = vec!["registered".to_string()];
    want.extend(expected_tools.iter().map(|t| format!("call:{t}")));
    want.push("call:mcp_add".to_string());
    want.push("call:mcp_image".to_string());
    want.extend(
        [
            "failure",
            "validation",
            "restored",
            "schema_updated",
            "call:get_weather:unit",
            "unregistered",
        ]
        .map(String::from),
    );
    assert_eq!(steps, want);
    // The failing call shows the exact text the model reads, reason and all.
    let failure = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "failure")
        .unwrap();
    let text = failure["detail"]["model_text"].as_str().unwrap();
    assert!(
        text.contains("unknown city") && text.contains("Atlantis"),
        "{text}"
    );
    assert!(
        stdout.contains(&format!("the model reads (is_error): {text}")),
        "{stdout}"
    );
    let last = report["steps"].as_array().unwrap().last().unwrap();
    assert_eq!(last["detail"]["left"], 0);
}
