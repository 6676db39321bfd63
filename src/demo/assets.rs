//! The example manifests and handlers, embedded in the binary so that
//! `neko-sidecar demo` runs from anywhere, and written into the demo's own
//! folder at start. Only file writing lives here.

use std::path::{Path, PathBuf};

/// One example tool: its manifest, the files it needs, and the interpreter
/// that must be on PATH for it to run.
pub(crate) struct ExampleTool {
    pub name: &'static str,
    pub manifest_file: &'static str,
    pub manifest: &'static str,
    /// Other files, relative to the demo folder.
    pub files: &'static [(&'static str, &'static str)],
    /// `None` for the in-process http handler.
    pub interpreter: Option<&'static str>,
    /// How the tool reaches its handler, for the narration.
    pub kind: &'static str,
}

pub(crate) const TOOLS: &[ExampleTool] = &[
    ExampleTool {
        name: "get_weather",
        manifest_file: "weather.toml",
        manifest: include_str!("../../examples/tools/weather.toml"),
        files: &[],
        interpreter: None,
        kind: "http, in-process",
    },
    ExampleTool {
        name: "convert_units",
        manifest_file: "convert_units.toml",
        manifest: include_str!("../../examples/tools/convert_units.toml"),
        files: &[
            (
                "tools/schemas/convert_units.schema.json",
                include_str!("../../examples/tools/schemas/convert_units.schema.json"),
            ),
            (
                "handlers/convert_units.py",
                include_str!("../../examples/handlers/convert_units.py"),
            ),
        ],
        interpreter: Some("python3"),
        kind: "exec, Python",
    },
    ExampleTool {
        name: "roll_dice",
        manifest_file: "dice.toml",
        manifest: include_str!("../../examples/tools/dice.toml"),
        files: &[(
            "handlers/roll_dice.js",
            include_str!("../../examples/handlers/roll_dice.js"),
        )],
        interpreter: Some("node"),
        kind: "exec, Node.js, role Lanlan only",
    },
    ExampleTool {
        name: "disk_usage",
        manifest_file: "shell.toml",
        manifest: include_str!("../../examples/tools/shell.toml"),
        files: &[(
            "handlers/disk_usage.sh",
            include_str!("../../examples/handlers/disk_usage.sh"),
        )],
        interpreter: Some("sh"),
        kind: "exec, POSIX sh",
    },
];

/// The example http handler's URL in the manifest, replaced by the demo's.
pub(crate) const WEATHER_URL: &str = "http://127.0.0.1:9876/weather";

/// Writes a file, creating its folder.
pub(crate) fn write(root: &Path, rel: &str, text: &str) -> std::io::Result<PathBuf> {
    let path = root.join(rel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, text)?;
    Ok(path)
}
