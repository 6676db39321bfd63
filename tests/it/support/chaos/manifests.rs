//! The chaos test's tools: which manifest files hold which tools, the text
//! of each file at each schema generation (and the ways to break it), and
//! what main_server must hold for a generation (description, parameters,
//! timeout, scope).
//!
//! The expected registry entries are built here independently of the
//! sidecar's manifest code, from the same generation number, so a wrong
//! conversion or a stale schema shows up as a difference. Pure: the test
//! writes the text; nothing here touches a file.

use std::collections::BTreeMap;

use neko_sidecar::desired::DesiredState;
use serde_json::{Value as Json, json};

/// Our registrations' source tag.
pub const SOURCE: &str = "plugin:chaos";
/// main_server's timeout for the http tools (the sidecar answers within
/// 2.7 s of it).
pub const HTTP_TIMEOUT_S: u64 = 3;
/// The exec tool's timeout.
pub const EXEC_TIMEOUT_S: u64 = 5;
/// The tool present only in even generations of its file, so the desired
/// set itself changes under chaos.
pub const OPTIONAL_TOOL: &str = "delta_opt";
/// The arguments' `mode`, which tells the echo handler how to behave.
pub const MODES: [&str; 5] = ["ok", "lag", "slow", "fail", "crash"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Http,
    Exec,
}

#[derive(Debug)]
pub struct ToolDef {
    pub name: &'static str,
    pub role: Option<&'static str>,
    pub kind: Kind,
}

#[derive(Debug)]
pub struct FileDef {
    pub name: &'static str,
    pub tools: &'static [ToolDef],
}

const fn http(name: &'static str, role: Option<&'static str>) -> ToolDef {
    ToolDef {
        name,
        role,
        kind: Kind::Http,
    }
}

/// 16 tools in 5 files: 11 global http tools, 4 role-scoped ones, 1 exec.
pub const FILES: &[FileDef] = &[
    FileDef {
        name: "alpha",
        tools: &[
            http("alpha_0", None),
            http("alpha_1", None),
            http("alpha_2", None),
            http("alpha_3", None),
        ],
    },
    FileDef {
        name: "beta",
        tools: &[
            http("beta_0", Some("Lanlan")),
            http("beta_1", Some("Lanlan")),
            http("beta_2", Some("小八")),
            http("beta_3", None),
        ],
    },
    FileDef {
        name: "gamma",
        tools: &[
            http("gamma_0", None),
            http("gamma_1", None),
            ToolDef {
                name: "gamma_exec",
                role: None,
                kind: Kind::Exec,
            },
        ],
    },
    FileDef {
        name: "delta",
        tools: &[http("delta_0", Some("Lanlan")), http(OPTIONAL_TOOL, None)],
    },
    FileDef {
        name: "epsilon",
        tools: &[
            http("eps_0", None),
            http("eps_1", None),
            http("eps_2", None),
        ],
    },
];

/// Every tool of every file, whatever the generation.
pub fn all_tools() -> impl Iterator<Item = &'static ToolDef> {
    FILES.iter().flat_map(|f| f.tools.iter())
}

pub fn tool_def(name: &str) -> &'static ToolDef {
    all_tools()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

/// Whether `tool` is in its file at generation `gen`.
pub fn present(tool: &str, generation: u32) -> bool {
    tool != OPTIONAL_TOOL || generation.is_multiple_of(2)
}

/// How a broken edit is broken: each is an error that makes the whole
/// file refused, so its last good version must stay in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakage {
    /// Not TOML at all.
    Syntax,
    /// `timout_seconds`: an unknown key.
    UnknownKey,
    /// A property of type "strin": the schema fails meta-validation.
    SchemaType,
    /// The schema's root is an array, not an object.
    RootNotObject,
    /// A tool name with a space.
    BadName,
}

impl Breakage {
    pub const ALL: [Breakage; 5] = [
        Breakage::Syntax,
        Breakage::UnknownKey,
        Breakage::SchemaType,
        Breakage::RootNotObject,
        Breakage::BadName,
    ];

    pub fn pick(rng: &mut fastrand::Rng) -> Self {
        Self::ALL[rng.usize(..Self::ALL.len())]
    }
}

fn description(name: &str, generation: u32) -> String {
    format!("{name} echoes its query (schema generation {generation})")
}

/// Whether the daemon's desired state holds `file` at `generation`: its
/// tools of that generation, and none of the others.
pub fn loaded(desired: &DesiredState, file: usize, generation: u32) -> bool {
    FILES[file].tools.iter().all(|t| {
        let held = desired.tools.get(t.name);
        if present(t.name, generation) {
            held.is_some_and(|d| d.spec.description == description(t.name, generation))
        } else {
            held.is_none()
        }
    })
}

fn q_description(generation: u32) -> String {
    format!("what to echo; generation {generation}")
}

/// The text of file `file` at `generation`, broken as asked. `handler_url`
/// is the echo handler's endpoint.
pub fn render(file: usize, generation: u32, handler_url: &str, broken: Option<Breakage>) -> String {
    let mut out = format!("# {} generation {generation}\n", FILES[file].name);
    for (i, t) in FILES[file].tools.iter().enumerate() {
        if !present(t.name, generation) {
            continue;
        }
        let first = i == 0;
        let name = match broken {
            Some(Breakage::BadName) if first => format!("{} broken", t.name),
            _ => t.name.to_owned(),
        };
        out.push_str(&format!(
            "\n[[tool]]\nname = \"{name}\"\ndescription = \"{}\"\n",
            description(t.name, generation)
        ));
        let (timeout, handler) = match t.kind {
            Kind::Http => (
                HTTP_TIMEOUT_S,
                format!("{{ type = \"http\", url = \"{handler_url}\" }}"),
            ),
            Kind::Exec => (
                EXEC_TIMEOUT_S,
                "{ type = \"exec\", command = [\"sh\", \"../handlers/echo.sh\"] }".to_owned(),
            ),
        };
        if broken == Some(Breakage::UnknownKey) && first {
            out.push_str(&format!("timout_seconds = {timeout}\n"));
        } else {
            out.push_str(&format!("timeout_seconds = {timeout}\n"));
        }
        if let Some(role) = t.role {
            out.push_str(&format!("role = \"{role}\"\n"));
        }
        out.push_str(&format!("handler = {handler}\n"));
        let root = match broken {
            Some(Breakage::RootNotObject) if first => "array",
            _ => "object",
        };
        let q_type = match broken {
            Some(Breakage::SchemaType) if first => "strin",
            _ => "string",
        };
        out.push_str(&format!(
            "[tool.parameters]\ntype = \"{root}\"\nrequired = [\"q\"]\n\
             [tool.parameters.properties.q]\ntype = \"{q_type}\"\ndescription = \"{}\"\n\
             [tool.parameters.properties.mode]\ntype = \"string\"\nenum = [{}]\n\
             [tool.parameters.properties.g{generation}]\ntype = \"integer\"\ndescription = \"only generation {generation} has it\"\n",
            q_description(generation),
            MODES.map(|m| format!("\"{m}\"")).join(", ")
        ));
    }
    if broken == Some(Breakage::Syntax) {
        out.push_str("\n[[tool]\nname = \"unterminated\n");
    }
    out
}

/// What main_server must hold for one of our tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub role: Option<&'static str>,
    pub description: String,
    pub parameters: Json,
    pub timeout_seconds: f64,
}

/// The registry entries the good generations `gens` (one per file) imply.
pub fn expected(gens: &[u32]) -> BTreeMap<&'static str, Expected> {
    let mut out = BTreeMap::new();
    for (file, &generation) in FILES.iter().zip(gens) {
        for t in file.tools {
            if !present(t.name, generation) {
                continue;
            }
            let mut properties = serde_json::Map::new();
            properties.insert(
                "q".into(),
                json!({"type": "string", "description": q_description(generation)}),
            );
            properties.insert("mode".into(), json!({"type": "string", "enum": MODES}));
            properties.insert(
                format!("g{generation}"),
                json!({"type": "integer", "description": format!("only generation {generation} has it")}),
            );
            let timeout = match t.kind {
                Kind::Http => HTTP_TIMEOUT_S,
                Kind::Exec => EXEC_TIMEOUT_S,
            };
            out.insert(
                t.name,
                Expected {
                    role: t.role,
                    description: description(t.name, generation),
                    parameters: json!({"type": "object", "required": ["q"], "properties": properties}),
                    timeout_seconds: timeout as f64,
                },
            );
        }
    }
    out
}

/// The exec tool's handler: echoes the tool and call id, or crashes when
/// the arguments ask for it.
pub const ECHO_SCRIPT: &str = r#"input=$(cat)
case "$input" in
  *'"mode":"crash"'*) echo "crashing on purpose" >&2; exit 3 ;;
esac
printf '{"output": {"tool": "%s", "call_id": "%s"}, "is_error": false}' "$NEKO_TOOL_NAME" "$NEKO_CALL_ID"
"#;
