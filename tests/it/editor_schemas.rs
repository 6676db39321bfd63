//! The editors' JSON Schemas (`schemas/`, `neko-sidecar schema`) held to the
//! loader, so that they cannot drift from it:
//!
//! - every key the loader allows is a property of the schema at the same
//!   place, and no other: for each table, a key it cannot know is put in,
//!   and `check`'s "allowed keys: ..." list is compared with the schema's;
//! - every example, shipped file and file of a `check` fixture that the
//!   loader accepts passes the schema;
//! - every fixture file the loader refuses for a reason a schema can state
//!   (an unknown or missing key, a wrong type, a value out of range, an
//!   empty string) is refused by the schema too.
//!
//! The schema is never the judge (PATH, the files a manifest names and each
//! `parameters` schema are the loader's alone); it must only never call a
//! good file bad or miss what it can see.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;

use crate::support::{BIN, repo};

/// A key no table of ours will ever have.
const ALIEN: &str = "zz_not_a_key";

fn schema(text: &str) -> Json {
    serde_json::from_str(text).expect("the schema is JSON")
}

fn validator(text: &str) -> jsonschema::Validator {
    jsonschema::validator_for(&schema(text)).expect("the schema compiles")
}

fn toml_json(path: &Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The schema's errors for one file, one line each ("" when it passes).
fn schema_errors(v: &jsonschema::Validator, path: &Path) -> String {
    let doc = toml_json(path);
    v.iter_errors(&doc)
        .map(|e| format!("{}: {e} (at {})\n", path.display(), e.instance_path()))
        .collect()
}

/// The schema node at `pointer` with `$ref`s followed.
fn node<'a>(root: &'a Json, pointer: &str) -> &'a Json {
    let mut n = root
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the schema"));
    while let Some(r) = n.get("$ref").and_then(Json::as_str) {
        n = root
            .pointer(r.trim_start_matches('#'))
            .expect("a local $ref");
    }
    n
}

fn properties(n: &Json) -> BTreeSet<String> {
    n.get("properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Writes a deployment (config, and one manifest when given) into a fresh
/// folder, runs `check` on it and returns the keys its "unknown key
/// `zz_not_a_key`" error allows.
fn allowed_keys(config: &str, manifest: Option<&str>) -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agent.toml"), config).unwrap();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    if let Some(m) = manifest {
        std::fs::write(dir.path().join("tools/m.toml"), m).unwrap();
    }
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["check", "--config", "agent.toml"])
        .env_remove("NEKO_SIDECAR_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains(&format!("unknown key `{ALIEN}`")))
        .unwrap_or_else(|| panic!("check did not refuse `{ALIEN}`:\n{stdout}"));
    let list = line
        .split("allowed keys: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no allowed keys in: {line}"));
    list.split(", ").map(|k| k.trim().to_string()).collect()
}

const CONFIG: &str = "source = \"plugin:schema-test\"\nmanifest_dirs = [\"tools\"]\n";

#[test]
fn every_key_the_config_loader_allows_is_in_the_schema_and_no_other() {
    let root = schema(neko_sidecar::editor_schemas::CONFIG);
    let top = node(&root, "");
    let loader = allowed_keys(&format!("{CONFIG}{ALIEN} = 1\n"), None);
    assert_eq!(loader, properties(top), "the top of the agent config");
    // Every section the schema has (the comparison above holds the list of
    // sections itself to the loader's).
    for section in properties(top) {
        let n = node(&root, &format!("/properties/{section}"));
        if n.get("type").and_then(Json::as_str) != Some("object") {
            continue;
        }
        let loader = allowed_keys(&format!("{CONFIG}[{section}]\n{ALIEN} = 1\n"), None);
        assert_eq!(loader, properties(n), "[{section}] of the agent config");
    }
}

#[test]
fn every_key_the_manifest_loader_allows_is_in_the_schema_and_no_other() {
    let root = schema(neko_sidecar::editor_schemas::MANIFEST);
    let http = r#"handler = { type = "http", url = "http://127.0.0.1:9/x" }"#;
    // (where, the manifest with the alien key in that table, the schema's table)
    let cases: Vec<(&str, String, &Json)> = vec![
        (
            "the manifest",
            format!("{ALIEN} = 1\n[[tool]]\nname = \"t\"\ndescription = \"d\"\n{http}\n"),
            node(&root, ""),
        ),
        (
            "[[tool]]",
            format!("[[tool]]\nname = \"t\"\ndescription = \"d\"\n{ALIEN} = 1\n{http}\n"),
            node(&root, "/definitions/tool"),
        ),
        (
            "an http handler",
            format!(
                "[[tool]]\nname = \"t\"\ndescription = \"d\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/x\", {ALIEN} = 1 }}\n"
            ),
            node(&root, "/definitions/tool/properties/handler/oneOf/0"),
        ),
        (
            "an exec handler",
            format!(
                "[[tool]]\nname = \"t\"\ndescription = \"d\"\nhandler = {{ type = \"exec\", command = [\"true\"], {ALIEN} = 1 }}\n"
            ),
            node(&root, "/definitions/tool/properties/handler/oneOf/1"),
        ),
        (
            "[[mcp_server]]",
            format!(
                "[[mcp_server]]\nname = \"s\"\nurl = \"http://127.0.0.1:9/mcp\"\n{ALIEN} = 1\n"
            ),
            node(&root, "/definitions/mcp_server"),
        ),
        (
            "[mcp_server.oauth]",
            format!(
                "[[mcp_server]]\nname = \"s\"\nurl = \"http://127.0.0.1:9/mcp\"\n[mcp_server.oauth]\n{ALIEN} = 1\n"
            ),
            node(&root, "/definitions/oauth"),
        ),
        (
            "[[mcp_import]]",
            format!("[[mcp_import]]\npath = \"servers.json\"\n{ALIEN} = 1\n"),
            node(&root, "/definitions/mcp_import"),
        ),
        (
            "an [[mcp_import]]'s overrides",
            format!(
                "[[mcp_import]]\npath = \"servers.json\"\n[mcp_import.servers.a]\n{ALIEN} = 1\n"
            ),
            node(&root, "/definitions/mcp_import_override"),
        ),
    ];
    for (what, manifest, table) in cases {
        let loader = allowed_keys(CONFIG, Some(&manifest));
        assert_eq!(loader, properties(table), "{what}");
    }
    // The handler's two kinds are told apart by `type`, as the loader does.
    for (i, kind) in ["http", "exec"].iter().enumerate() {
        let n = node(
            &root,
            &format!("/definitions/tool/properties/handler/oneOf/{i}"),
        );
        assert_eq!(n["properties"]["type"]["const"], *kind);
    }
}

/// The shipped files and examples, each with the schema it follows.
fn shipped() -> Vec<(PathBuf, &'static str)> {
    let r = repo();
    let mut files = vec![
        (
            r.join("agent.toml.example"),
            neko_sidecar::editor_schemas::CONFIG,
        ),
        (
            r.join("packaging/agent.toml"),
            neko_sidecar::editor_schemas::CONFIG,
        ),
        (
            r.join("packaging/windows/agent.toml.example"),
            neko_sidecar::editor_schemas::CONFIG,
        ),
    ];
    for dir in ["examples/tools", "packaging/windows/examples/tools"] {
        for e in std::fs::read_dir(r.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                files.push((p, neko_sidecar::editor_schemas::MANIFEST));
            }
        }
    }
    files
}

#[test]
fn every_example_and_shipped_file_passes_its_schema() {
    let mut errors = String::new();
    for (path, text) in shipped() {
        errors += &schema_errors(&validator(text), &path);
    }
    assert!(errors.is_empty(), "{errors}");
}

/// Each shipped TOML file names its schema on its first line, as taplo
/// reads it, at a path that exists beside it in the repository and in the
/// archives (which keep the repository's layout; the Debian package's
/// config names the installed copy).
#[test]
fn every_example_and_shipped_file_names_its_schema_for_taplo() {
    for (path, text) in shipped() {
        let body = std::fs::read_to_string(&path).unwrap();
        let first = body.lines().next().unwrap_or("");
        let target = first.strip_prefix("#:schema ").unwrap_or_else(|| {
            panic!(
                "{}: the first line is not `#:schema ...`: {first}",
                path.display()
            )
        });
        // Where the file lands in the archives: the Windows copies take the
        // places of the repository's own.
        let lands = match path.strip_prefix(repo().join("packaging/windows")) {
            Ok(rest) => repo().join(rest),
            Err(_) => path.clone(),
        };
        let resolved = match target.strip_prefix("/usr/share/doc/neko-sidecar/") {
            // The Debian package installs `schemas/` there.
            Some(rest) => repo().join(rest),
            None => lands.parent().unwrap().join(target),
        };
        let on_disk = std::fs::read_to_string(&resolved).unwrap_or_else(|e| {
            panic!("{}: {target} ({}): {e}", path.display(), resolved.display())
        });
        assert_eq!(
            on_disk,
            text,
            "{}: {target} is not the schema it follows",
            path.display()
        );
    }
}

/// A message of `check` whose reason a JSON Schema can state.
fn schema_can_say(message: &str) -> bool {
    [
        "unknown key",
        "is missing the required key",
        ", found ",
        "allowed values are",
        "is empty",
        "is the empty string",
        "is not allowed",
        "has both",
        "the manifest is empty",
    ]
    .iter()
    .any(|s| message.contains(s))
}

#[test]
fn the_check_fixtures_get_the_same_verdict_from_the_schema_where_it_can_give_one() {
    let root = repo().join("tests/fixtures/check");
    let config = validator(neko_sidecar::editor_schemas::CONFIG);
    let manifest = validator(neko_sidecar::editor_schemas::MANIFEST);
    let mut problems = String::new();
    let (mut passed, mut refused) = (0, 0);
    for case in std::fs::read_dir(&root).unwrap() {
        let case = case.unwrap().path();
        let Ok(expected) = std::fs::read_to_string(case.join("expected.txt")) else {
            continue;
        };
        // file (relative to the case) -> its error messages
        let mut errors: Vec<(String, String)> = Vec::new();
        for line in expected.lines() {
            if let Some((place, message)) = line.split_once(": error: ") {
                let file = place.split(':').next().unwrap_or("").to_string();
                errors.push((file, message.to_string()));
            }
        }
        for (rel, v) in toml_files(&case) {
            let v = if v { &config } else { &manifest };
            let path = case.join(&rel);
            let mine: Vec<&String> = errors
                .iter()
                .filter(|(f, _)| *f == rel)
                .map(|(_, m)| m)
                .collect();
            if mine.is_empty() {
                let e = schema_errors(v, &path);
                if !e.is_empty() {
                    problems += &format!("accepted by check, refused by the schema:\n{e}");
                }
                passed += 1;
            } else if mine.iter().any(|m| schema_can_say(m)) {
                if schema_errors(v, &path).is_empty() {
                    problems += &format!(
                        "{}: refused by check ({}), accepted by the schema\n",
                        path.display(),
                        mine.iter()
                            .map(|m| m.as_str())
                            .collect::<Vec<_>>()
                            .join("; ")
                    );
                }
                refused += 1;
            }
        }
    }
    assert!(problems.is_empty(), "{problems}");
    // The walk really walked: the fixtures hold dozens of each.
    assert!(
        passed > 40 && refused > 40,
        "{passed} passed, {refused} refused"
    );
}

/// The TOML files of one fixture case that `check` reads as such and that
/// parse as UTF-8 TOML: its `agent.toml`, and the `*.toml` directly in each
/// manifest directory it names (other TOML files, such as an imported
/// `plugin.toml` of N.E.K.O, are not manifests); relative to the case with
/// `/`, and whether each is the agent config.
fn toml_files(case: &Path) -> Vec<(String, bool)> {
    let parses = |p: &Path| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| toml::from_str::<Json>(&t).ok())
    };
    let Some(config) = parses(&case.join("agent.toml")) else {
        return Vec::new();
    };
    let mut out = vec![("agent.toml".to_string(), true)];
    let dirs: Vec<String> = match config.get("manifest_dirs").and_then(Json::as_array) {
        Some(a) => a
            .iter()
            .filter_map(|d| d.as_str().map(str::to_string))
            .collect(),
        None => vec!["tools.d".to_string()],
    };
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(case.join(&dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_file()
                && name.ends_with(".toml")
                && !name.starts_with('.')
                && parses(&p).is_some()
            {
                let rel = format!("{}/{name}", dir.trim_end_matches('/'));
                out.push((rel, false));
            }
        }
    }
    out
}

#[test]
fn the_schema_command_prints_each_schema() {
    for (arg, text) in [
        ("manifest", neko_sidecar::editor_schemas::MANIFEST),
        ("config", neko_sidecar::editor_schemas::CONFIG),
    ] {
        let out = Command::new(BIN).args(["schema", arg]).output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap(), text);
    }
}
