//! `neko-sidecar demo`: the whole story in one process, narrated. It starts
//! the stand-in main_server, the example handlers, the stand-in MCP server
//! (over Streamable HTTP) and the sidecar on free loopback ports with the
//! example manifests (embedded in the binary) and an `[[mcp_server]]`, then
//! shows: the tools registered, MCP tools among them; the model calling each tool (and
//! seeing a picture the sidecar repaired); bad arguments
//! answered by validation; a main_server restart repaired; a manifest edit
//! registered in place; shutdown removing every tool.
//!
//! Each step's outcome is checked, not only printed: the demo exits non-zero
//! when one fails, and `--report` writes the outcomes as JSON for the test
//! that runs it. It uses only the library's public pieces, as a user would.

mod assets;
mod weather;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::daemon::{self, DaemonOptions};
use crate::devserver::{DevServer, DevServerHandle, InvokeRequest};
use crate::manifest::find_in_path;

/// How long any one step may take before it counts as failed.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
const SOURCE: &str = "plugin:neko-sidecar-demo";
const POLL: Duration = Duration::from_millis(250);
const DEBOUNCE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Default)]
pub(crate) struct DemoOptions {
    /// Leave everything up after the story until Ctrl-C.
    pub keep_running: bool,
    /// Write each step's outcome as JSON here.
    pub report: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error("cannot set up the demo: {0}")]
    Setup(String),
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> DemoError + '_ {
    move |e| DemoError::Setup(format!("{what}: {e}"))
}

/// The narration and the checked outcomes.
struct Story {
    started: Instant,
    steps: Vec<Json>,
    ok: bool,
}

impl Story {
    fn new() -> Self {
        println!(
            "neko-sidecar demo: keeping a plugin's tools available to main_server, end to end\n"
        );
        Self {
            started: Instant::now(),
            steps: Vec::new(),
            ok: true,
        }
    }

    fn chapter(&self, n: usize, title: &str) {
        println!("{n}. {title}");
    }

    fn say(&self, text: &str) {
        println!("   {text}");
    }

    /// Records a checked outcome and prints it with its mark.
    fn outcome(&mut self, step: &str, ok: bool, text: &str, detail: Json) {
        self.ok &= ok;
        println!("   {} {text}", if ok { "ok " } else { "FAILED" });
        self.steps
            .push(json!({"step": step, "ok": ok, "detail": detail}));
    }
}

/// Runs the demo; `Ok(true)` when every step did what it should.
pub(crate) async fn run(opts: DemoOptions) -> Result<bool, DemoError> {
    let mut story = Story::new();
    let dir = demo_dir().map_err(setup("cannot create the demo folder"))?;
    let result = tell(&mut story, &dir, &opts).await;
    if !opts.keep_running || result.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result?;
    println!(
        "\n{} in {:.1} s",
        if story.ok {
            "done"
        } else {
            "done, with failures"
        },
        story.started.elapsed().as_secs_f64()
    );
    if let Some(path) = &opts.report {
        let report = json!({"ok": story.ok, "steps": story.steps});
        std::fs::write(path, report.to_string()).map_err(setup("cannot write the report"))?;
    }
    Ok(story.ok)
}

fn demo_dir() -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir =
        std::env::temp_dir().join(format!("neko-sidecar-demo-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

async fn free_listener() -> Result<TcpListener, DemoError> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(setup("cannot bind a loopback port"))
}

/// Which of our tools each role of the stand-in lists.
fn ours_by_role(h: &DevServerHandle) -> Vec<(String, Vec<String>)> {
    let snap = h.registry_snapshot();
    snap.roles
        .iter()
        .map(|r| {
            let names = r
                .tools
                .iter()
                .filter(|t| t.source == SOURCE)
                .map(|t| t.name.clone())
                .collect();
            (r.role.clone(), names)
        })
        .collect()
}

/// Whether every expected tool is listed in every role it belongs to.
fn all_listed(h: &DevServerHandle, expected: &[(&str, Option<&str>)]) -> bool {
    let by_role = ours_by_role(h);
    expected.iter().all(|(name, role)| {
        by_role
            .iter()
            .filter(|(r, _)| role.is_none_or(|want| want == r))
            .all(|(_, names)| names.iter().any(|n| n == name))
    })
}

async fn tell(story: &mut Story, dir: &Path, opts: &DemoOptions) -> Result<(), DemoError> {
    // 1. The stand-in main_server.
    let stand_in = DevServer::builder()
        .start(free_listener().await?)
        .map_err(setup("cannot start the stand-in main_server"))?;
    story.chapter(
        1,
        "The stand-in main_server starts (the same tool API as N.E.K.O's)",
    );
    story.say(&format!(
        "{} with roles {}",
        stand_in.url(),
        stand_in
            .registry_snapshot()
            .roles
            .iter()
            .map(|r| r.role.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));

    // 2. The example handlers and manifests.
    let stop_handlers = CancellationToken::new();
    let weather_addr = weather::serve(free_listener().await?, stop_handlers.clone())
        .map_err(setup("cannot start the example http handler"))?;
    let weather_url = format!("http://{weather_addr}/weather");
    story.chapter(2, "The plugin's tools are described in TOML manifests");
    let mut expected: Vec<(&str, Option<&str>)> = Vec::new();
    for tool in assets::tools() {
        let mut manifest = tool.manifest.replace(assets::WEATHER_URL, &weather_url);
        // Python is `python3`, or on Windows `py -3` (python.org's
        // launcher) or `python`: whichever this machine has runs it.
        let (wanted, written, found) = match tool.interpreter {
            assets::Interpreter::None => (None, "", None),
            assets::Interpreter::Python { written } => {
                (Some("Python"), written, crate::os::python())
            }
            assets::Interpreter::Program(prog) => (
                Some(prog),
                "",
                find_in_path(prog).map(|_| vec![prog.to_string()]),
            ),
        };
        if let Some(prog) = wanted {
            let Some(argv) = found else {
                story.say(&format!(
                    "skipping {}: its handler needs `{prog}`, which is not installed",
                    tool.name
                ));
                continue;
            };
            if !written.is_empty() {
                let quoted: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
                manifest = manifest.replace(
                    &format!("command = [{written},"),
                    &format!("command = [{},", quoted.join(", ")),
                );
            }
        }
        assets::write(dir, &format!("tools/{}", tool.manifest_file), &manifest)
            .map_err(setup("cannot write a manifest"))?;
        for (rel, text) in tool.files {
            assets::write(dir, rel, text).map_err(setup("cannot write a handler"))?;
        }
        let role = (tool.name == "roll_dice").then_some("Lanlan");
        expected.push((tool.name, role));
        story.say(&format!("{:<14} {}", tool.name, tool.kind));
    }
    // An MCP server: the stand-in MCP server, in this process over
    // Streamable HTTP, so the demo needs nothing but this binary.
    let mcp_listener = free_listener().await?;
    let mcp_url = format!(
        "http://{}{}",
        mcp_listener
            .local_addr()
            .map_err(setup("cannot read a port"))?,
        crate::devmcp::HTTP_PATH
    );
    tokio::spawn(crate::devmcp::serve_http(
        mcp_listener,
        crate::devmcp::DevMcpOptions::default(),
        stop_handlers.clone(),
    ));
    assets::write(dir, "tools/mcp.toml", &mcp_manifest(&mcp_url))
        .map_err(setup("cannot write a manifest"))?;
    for name in MCP_TOOLS {
        expected.push((name, None));
        story.say(&format!(
            "{name:<14} a tool of the MCP server at {mcp_url} ([[mcp_server]], prefix `mcp_`)"
        ));
    }
    story.say(&format!("(manifests in {})", dir.join("tools").display()));

    // 3. The sidecar.
    // With --keep-running the admin endpoints get a fixed free port, so that
    // `neko-sidecar status --config …` finds them from the config alone.
    let admin_listen = if opts.keep_running {
        let probe = free_listener().await?;
        let addr = probe.local_addr().map_err(setup("cannot read a port"))?;
        drop(probe);
        addr.to_string()
    } else {
        String::new()
    };
    let config_path = assets::write(
        dir,
        "agent.toml",
        &agent_toml(&stand_in.url(), &admin_listen),
    )
    .map_err(setup("cannot write the agent config"))?;
    let (config, diags) = crate::config::load(&config_path);
    let config = config.ok_or_else(|| {
        DemoError::Setup(
            diags
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    let shutdown = CancellationToken::new();
    let t0 = Instant::now();
    let sidecar = daemon::start(
        config,
        DaemonOptions {
            notifier: None,
            callback_listener: Some(free_listener().await?),
            reloads: None,
        },
        shutdown.clone(),
    )
    .await
    .map_err(setup("cannot start the sidecar"))?;
    let page = if opts.keep_running {
        crate::admin::start_for(&sidecar, &shutdown)
            .await
            .map(|addr| format!("http://{addr}/"))
    } else {
        None
    };
    story.chapter(3, "neko-sidecar starts and registers them");
    story.say(&format!("callback server {}", sidecar.callback.base_url()));
    let ok = stand_in
        .wait_for(STEP_TIMEOUT, |h| all_listed(h, &expected))
        .await;
    let took = t0.elapsed();
    let listed = ours_by_role(&stand_in);
    story.outcome(
        "registered",
        ok,
        &format!(
            "{} tools registered in {} ms",
            expected.len(),
            took.as_millis()
        ),
        json!({"tools": expected.len(), "ms": took.as_millis() as u64, "by_role": listed}),
    );
    for (role, names) in &listed {
        story.say(&format!(
            "main_server lists for {role}: {}",
            names.join(", ")
        ));
    }

    // 4. The model calls each tool.
    story.chapter(
        4,
        "The model calls each tool (what it sends, and the answer it reads)",
    );
    let has = |n: &str| expected.iter().any(|(name, _)| *name == n);
    let mut calls = vec![("get_weather", json!({"city": "Tokyo"}), None)];
    if has("convert_units") {
        calls.push((
            "convert_units",
            json!({"value": 100, "from": "c", "to": "f"}),
            None,
        ));
    }
    if has("roll_dice") {
        calls.push(("roll_dice", json!({"count": 2, "sides": 6}), Some("Lanlan")));
    }
    if has("disk_usage") {
        calls.push(("disk_usage", json!({}), None));
    }
    calls.push(("mcp_add", json!({"a": 2, "b": 3}), None));
    // A picture main_server's Pillow would refuse (a bad CRC in its tEXt
    // chunk): it arrives only because the sidecar repairs it.
    calls.push(("mcp_image", json!({"bad_crc": true}), None));
    for (name, args, role) in calls {
        let answer = call(&stand_in, name, args.clone(), role).await;
        let ok = answer_is_right(name, &answer);
        story.say(&format!("{name} {args}{}", call_note(name)));
        story.outcome(
            &format!("call:{name}"),
            ok,
            &format!("-> {}", show(&answer)),
            answer,
        );
    }

    // 5. Failures the model must understand.
    story.chapter(
        5,
        "Calls that fail: main_server shows the model `output` alone, so the reason is there",
    );
    let unknown = json!({"city": "Atlantis"});
    let answer = call(&stand_in, "get_weather", unknown.clone(), None).await;
    let ok = answer["is_error"] == json!(true) && model_text(&answer).contains("Atlantis");
    story.say(&format!(
        "get_weather {unknown} (the handler answers a failure)"
    ));
    story.outcome("failure", ok, &format!("-> {}", show(&answer)), answer);
    let bad = json!({"city": 7});
    let answer = call(&stand_in, "get_weather", bad.clone(), None).await;
    let ok = answer["is_error"] == json!(true)
        && answer["output"]["code"] == json!("INVALID_ARGUMENTS")
        && model_text(&answer).contains("/city");
    story.say(&format!(
        "get_weather {bad} (breaks the schema: the sidecar answers, the handler never runs)"
    ));
    story.outcome("validation", ok, &format!("-> {}", show(&answer)), answer);

    // 6. main_server restarts.
    story.chapter(
        6,
        "main_server restarts and forgets every tool (nothing tells the plugin)",
    );
    let t0 = Instant::now();
    stand_in.restart();
    let gone = ours_by_role(&stand_in).iter().all(|(_, n)| n.is_empty());
    story.say(&format!(
        "main_server now lists {} of our tools",
        if gone { "none" } else { "some" }
    ));
    let ok = stand_in
        .wait_for(STEP_TIMEOUT, |h| all_listed(h, &expected))
        .await;
    let took = t0.elapsed();
    story.outcome(
        "restored",
        ok && gone,
        &format!(
            "the sidecar noticed and registered all {} again in {} ms (it polls every {} ms), the MCP tools {} among them",
            expected.len(),
            took.as_millis(),
            POLL.as_millis(),
            MCP_TOOLS.join(", ")
        ),
        json!({"ms": took.as_millis() as u64, "poll_ms": POLL.as_millis() as u64}),
    );

    // 7. A manifest edit.
    story.chapter(
        7,
        "The plugin author adds a `unit` parameter to get_weather's manifest",
    );
    let weather = assets::tools()[0]
        .manifest
        .replace(assets::WEATHER_URL, &weather_url);
    let edited = format!(
        "{weather}\n[tool.parameters.properties.unit]\ntype = \"string\"\nenum = [\"celsius\", \"fahrenheit\"]\ndescription = \"Temperature unit\"\n"
    );
    let t0 = Instant::now();
    assets::write(dir, "tools/weather.toml", &edited).map_err(setup("cannot edit the manifest"))?;
    let has_unit = |h: &DevServerHandle| {
        let snap = h.registry_snapshot();
        snap.roles.iter().all(|r| {
            r.tools.iter().any(|t| {
                t.name == "get_weather" && t.parameters["properties"].get("unit").is_some()
            })
        })
    };
    let ok = stand_in.wait_for(STEP_TIMEOUT, has_unit).await;
    let took = t0.elapsed();
    story.outcome(
        "schema_updated",
        ok,
        &format!(
            "the new schema is registered in place {} ms after the save (debounce {} ms)",
            took.as_millis(),
            DEBOUNCE.as_millis()
        ),
        json!({"ms": took.as_millis() as u64}),
    );
    let args = json!({"city": "Osaka", "unit": "fahrenheit"});
    let answer = call(&stand_in, "get_weather", args.clone(), None).await;
    let ok = answer["output"]["temp_f"].is_number();
    story.say(&format!("get_weather {args}"));
    story.outcome(
        "call:get_weather:unit",
        ok,
        &format!("-> {}", show(&answer)),
        answer,
    );

    if opts.keep_running {
        print_try_it(&stand_in, &config_path, page.as_deref());
        let _ = tokio::signal::ctrl_c().await;
        println!();
    }

    // 8. Shutdown.
    story.chapter(
        8,
        &format!(
            "The sidecar stops ({}): it removes its tools in one round trip",
            crate::os::Platform::CURRENT.stop_request()
        ),
    );
    let t0 = Instant::now();
    shutdown.cancel();
    let report = sidecar.wait().await;
    let took = t0.elapsed();
    let left: usize = ours_by_role(&stand_in).iter().map(|(_, n)| n.len()).sum();
    let builtins = stand_in
        .registry_snapshot()
        .roles
        .first()
        .map_or(0, |r| r.tools.len());
    story.outcome(
        "unregistered",
        left == 0 && report.cleared.is_ok(),
        &format!(
            "stopped in {} ms; main_server lists {left} of our tools and its {builtins} built-ins",
            took.as_millis()
        ),
        json!({"ms": took.as_millis() as u64, "left": left}),
    );
    stop_handlers.cancel();
    stand_in.stop_listener().await;
    if opts.keep_running {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

/// The MCP tools the demo offers (of the stand-in MCP server's many).
const MCP_TOOLS: [&str; 3] = ["mcp_echo", "mcp_add", "mcp_image"];

fn mcp_manifest(url: &str) -> String {
    format!(
        r#"# Written by `neko-sidecar demo`: every tool of an MCP server becomes a
# tool of main_server, named prefix + its MCP name, kept registered.
[[mcp_server]]
name = "demo_mcp"
url = "{url}"
prefix = "mcp_"
include = ["echo", "add", "image"]
timeout_seconds = 10
"#
    )
}

fn agent_toml(main_server: &str, admin_listen: &str) -> String {
    format!(
        r#"# Written by `neko-sidecar demo`.
source = "{SOURCE}"
manifest_dirs = ["tools"]

[main_server]
url = "{main_server}"
request_timeout = "2s"

[callback]
listen = "127.0.0.1:0"

[registration]
poll_interval = "{}ms"
backoff_initial = "100ms"
backoff_max = "1s"

[reload]
debounce = "{}ms"
rescan_interval = "5s"

[shutdown]
deadline = "3s"

[admin]
listen = "{admin_listen}"
"#,
        POLL.as_millis(),
        DEBOUNCE.as_millis()
    )
}

async fn call(h: &DevServerHandle, name: &str, args: Json, role: Option<&str>) -> Json {
    let req = InvokeRequest {
        name: name.to_string(),
        arguments: Some(args),
        raw_arguments: None,
        role: role.map(str::to_string),
        sees_images: None,
    };
    match h.invoke(req).await {
        Ok(a) => serde_json::to_value(&a).unwrap_or(Json::Null),
        Err(e) => {
            json!({"model_text": format!("(not called: {e})"), "is_error": true, "output": null})
        }
    }
}

/// The text the model read, from an invoke answer.
fn model_text(a: &Json) -> &str {
    a["model_text"].as_str().unwrap_or_default()
}

/// What the narration adds after a call's arguments.
fn call_note(name: &str) -> &'static str {
    match name {
        "mcp_image" => {
            " (a PNG with a bad CRC in its tEXt chunk: main_server's Pillow drops it, so the sidecar repairs it first)"
        }
        _ => "",
    }
}

/// Whether the model read what the example handler should answer.
fn answer_is_right(name: &str, a: &Json) -> bool {
    if a["is_error"] != json!(false) {
        return false;
    }
    let out = &a["output"];
    match name {
        "get_weather" => out["temp_c"] == json!(22),
        "convert_units" => out["value"]
            .as_f64()
            .is_some_and(|v| (v - 212.0).abs() < 1e-6),
        "roll_dice" => out["total"].as_i64().is_some_and(|t| (2..=12).contains(&t)),
        "disk_usage" => out.as_str().is_some_and(|s| !s.is_empty()),
        // The MCP tool's structuredContent, as the model reads it.
        "mcp_add" => out["sum"].as_f64() == Some(5.0),
        // The picture reached the model, with no warning from main_server.
        "mcp_image" => {
            a["images"].as_array().is_some_and(|i| i.len() == 1)
                && a["warnings"].as_array().is_some_and(Vec::is_empty)
        }
        _ => false,
    }
}

/// One line: exactly the text the model reads (line breaks shown as ⏎),
/// marked when main_server counts the call as failed.
fn show(a: &Json) -> String {
    let text = model_text(a).replace('\n', " ⏎ ");
    let reads = if a["is_error"] == json!(true) {
        format!("the model reads (is_error): {text}")
    } else {
        format!("the model reads: {text}")
    };
    let pictures: Vec<String> = a["images"]
        .as_array()
        .map(|images| {
            images
                .iter()
                .map(|i| {
                    format!(
                        "{} {}x{}",
                        i["mime"].as_str().unwrap_or("?"),
                        i["width"],
                        i["height"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if pictures.is_empty() {
        reads
    } else {
        format!("{reads}, and sees the picture ({})", pictures.join(", "))
    }
}

fn print_try_it(h: &DevServerHandle, config: &Path, page: Option<&str>) {
    let (url, config) = (h.url(), config.display());
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "neko-sidecar".into());
    println!("\nEverything stays up.");
    if let Some(page) = page {
        println!("Open the inspector page in a browser: {page}");
    }
    println!("In another terminal, try:");
    println!("   curl -s {url}/api/tools");
    println!(
        "   curl -s -XPOST {url}/__dev/invoke -H 'content-type: application/json' -d '{{\"name\":\"get_weather\",\"arguments\":{{\"city\":\"Sapporo\"}}}}'"
    );
    println!("   {exe} status --config {config}");
    println!("   {exe} call get_weather --args '{{\"city\":\"Osaka\"}}' --config {config}");
    println!("Press Ctrl-C to stop; the sidecar then removes its tools.\n");
}
