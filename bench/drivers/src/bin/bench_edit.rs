//! Benchmark 6: manifest edit → the new schema registered, through the real
//! binaries (`neko-sidecar run` against `neko-sidecar dev-server`).
//!
//! The daemon serves `--tools` tools: one in `edited.toml`, the rest in
//! `others.toml`. Each round rewrites `edited.toml` with a new property
//! `v{round}` in the schema and polls the stand-in's `/__dev/registry`
//! (which shows parameters) every `--every-ms` until both roles hold the new
//! schema. Rounds are spaced by a random pause of 2..4 debounce periods, so
//! no two edits fall into one debounce window.
//!
//! Run: `bench_edit [--edits 20] [--debounce-ms 200] [--tools 100] [--every-ms 5]`.
//! Prints `key=value`; timings from `Instant` (monotonic).

use std::time::{Duration, Instant};

use bench_support::*;
use serde_json::Value;

const SOURCE: &str = "plugin:bench-edit";

fn edited_manifest(version: usize) -> String {
    format!(
        "[[tool]]\nname = \"edited\"\ndescription = \"A tool whose schema is being edited.\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/w\" }}\nparameters = {{ type = \"object\", properties = {{ v{version} = {{ type = \"string\" }} }} }}\n"
    )
}

/// Both roles list `edited` with property `v{version}`.
fn has_version(registry: &Value, version: usize) -> bool {
    let key = format!("v{version}");
    let Some(roles) = registry["tools_by_role"].as_object() else {
        return false;
    };
    !roles.is_empty()
        && roles.values().all(|tools| {
            tools.as_array().is_some_and(|ts| {
                ts.iter().any(|t| {
                    t["name"] == "edited" && t["parameters"]["properties"].get(&key).is_some()
                })
            })
        })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let edits: usize = arg_or("edits", 20)?;
    let debounce_ms: u64 = arg_or("debounce-ms", 200)?;
    let tools: usize = arg_or("tools", 100)?;
    let every = Duration::from_millis(arg_or("every-ms", 5)?);
    let c = http();
    let ds = DevServerProc::start().await?;
    let dir = scratch()?;
    let file = dir.path().join("tools.d/edited.toml");
    std::fs::write(&file, edited_manifest(0))?;
    std::fs::write(
        dir.path().join("tools.d/others.toml"),
        http_tools_manifest("other_", tools.saturating_sub(1), "http://127.0.0.1:9/w"),
    )?;
    let _sc = SidecarProc::start(
        dir.path(),
        &AgentSettings {
            source: SOURCE,
            main_server: &ds.url,
            poll_interval: "5s",
            debounce: &format!("{debounce_ms}ms"),
        },
    )?;
    let shows = |version: usize| {
        let fut = ds.get(&c, "/__dev/registry");
        async move { fut.await.is_ok_and(|v| has_version(&v, version)) }
    };
    wait_for(Duration::from_secs(30), every, || shows(0)).await?;
    let all = || {
        let fut = ds.get(&c, "/api/tools");
        async move {
            fut.await
                .is_ok_and(|v| count_source(&v, SOURCE) == 2 * tools)
        }
    };
    wait_for(Duration::from_secs(30), every, all).await?;

    let mut took = Vec::with_capacity(edits);
    for version in 1..=edits {
        let pause = fastrand::u64(2 * debounce_ms..4 * debounce_ms);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let t0 = Instant::now();
        std::fs::write(&file, edited_manifest(version))?;
        wait_for(Duration::from_secs(30), every, || shows(version)).await?;
        took.push(t0.elapsed());
    }
    println!("edits={edits}");
    println!("debounce_ms={debounce_ms}");
    println!("tools={tools}");
    println!("every_ms={}", every.as_millis());
    Summary::of(&took).print("edit");
    Ok(())
}
