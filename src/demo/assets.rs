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
    pub interpreter: Interpreter,
    /// How the tool reaches its handler, for the narration.
    pub kind: &'static str,
}

/// What runs a tool's handler.
pub(crate) enum Interpreter {
    /// The in-process http handler.
    None,
    /// Python, whose manifest's command starts with `written` (`"python3"`,
    /// or `"py", "-3"` on Windows); the demo runs the Python it finds
    /// (`os::python`), which is named differently from one machine to
    /// another.
    Python { written: &'static str },
    /// A program looked up on PATH by this name.
    Program(&'static str),
}

/// The examples a user of this platform gets: the Windows zip's copies
/// (packaging/windows/examples/) on Windows, `examples/` elsewhere.
pub(crate) fn tools() -> &'static [ExampleTool] {
    if crate::os::Platform::CURRENT == crate::os::Platform::Windows {
        WINDOWS_TOOLS
    } else {
        TOOLS
    }
}

const WEATHER: ExampleTool = ExampleTool {
    name: "get_weather",
    manifest_file: "weather.toml",
    manifest: include_str!("../../examples/tools/weather.toml"),
    files: &[],
    interpreter: Interpreter::None,
    kind: "http, in-process",
};

const CONVERT_UNITS_FILES: &[(&str, &str)] = &[
    (
        "tools/schemas/convert_units.schema.json",
        include_str!("../../examples/tools/schemas/convert_units.schema.json"),
    ),
    (
        "handlers/convert_units.py",
        include_str!("../../examples/handlers/convert_units.py"),
    ),
];

const ROLL_DICE: ExampleTool = ExampleTool {
    name: "roll_dice",
    manifest_file: "dice.toml",
    manifest: include_str!("../../examples/tools/dice.toml"),
    files: &[(
        "handlers/roll_dice.js",
        include_str!("../../examples/handlers/roll_dice.js"),
    )],
    interpreter: Interpreter::Program("node"),
    kind: "exec, Node.js, role Lanlan only",
};

const TOOLS: &[ExampleTool] = &[
    WEATHER,
    ExampleTool {
        name: "convert_units",
        manifest_file: "convert_units.toml",
        manifest: include_str!("../../examples/tools/convert_units.toml"),
        files: CONVERT_UNITS_FILES,
        interpreter: Interpreter::Python {
            written: "\"python3\"",
        },
        kind: "exec, Python",
    },
    ROLL_DICE,
    ExampleTool {
        name: "disk_usage",
        manifest_file: "shell.toml",
        manifest: include_str!("../../examples/tools/shell.toml"),
        files: &[(
            "handlers/disk_usage.sh",
            include_str!("../../examples/handlers/disk_usage.sh"),
        )],
        interpreter: Interpreter::Program("sh"),
        kind: "exec, POSIX sh",
    },
];

const WINDOWS_TOOLS: &[ExampleTool] = &[
    WEATHER,
    ExampleTool {
        name: "convert_units",
        manifest_file: "convert_units.toml",
        manifest: include_str!("../../packaging/windows/examples/tools/convert_units.toml"),
        files: CONVERT_UNITS_FILES,
        interpreter: Interpreter::Python {
            written: "\"py\", \"-3\"",
        },
        kind: "exec, Python",
    },
    ROLL_DICE,
    ExampleTool {
        name: "disk_usage",
        manifest_file: "shell.toml",
        manifest: include_str!("../../packaging/windows/examples/tools/shell.toml"),
        files: &[(
            "handlers/disk_usage.cmd",
            include_str!("../../packaging/windows/examples/handlers/disk_usage.cmd"),
        )],
        interpreter: Interpreter::Program("cmd"),
        kind: "exec, cmd",
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
