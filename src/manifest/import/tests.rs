//! `[[mcp_import]]` read through the manifest loader, on files in a
//! tempdir: each format, the overrides, and where problems are reported.

use std::path::Path;

use crate::manifest::{
    HttpKind, LoadContext, ManifestFile, McpServerSpec, McpTransport, parse_manifest,
};

fn load(dir: &Path, manifest: &str) -> ManifestFile {
    parse_manifest(&dir.join("m.toml"), manifest, &LoadContext::default())
}

fn server<'a>(f: &'a ManifestFile, name: &str) -> &'a McpServerSpec {
    f.mcp_servers
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no server {name}: {f:#?}"))
}

fn texts(f: &ManifestFile) -> Vec<String> {
    f.diagnostics.iter().map(ToString::to_string).collect()
}

const CLAUDE: &str = r#"{
  "mcpServers": {
    "files": {
      "command": "sh",
      "args": ["-c", "exec cat"],
      "env": {"LEVEL": "3", "DEBUG": true}
    },
    "remote": {"url": "http://mcp.example.com/mcp?key=k3y-in-query"},
    "hosted": {"type": "sse", "url": "https://maps.example.com/sse?key=${MAPS_KEY:-k}"},
    "local": {"type": "http", "url": "http://127.0.0.1:8808/mcp", "headers": {"X-A": "b"}},
    "off": {"command": "sh", "disabled": true}
  },
  "globalShortcut": "Ctrl+Space"
}"#;

#[test]
fn claude_desktop_servers_become_mcp_servers_with_the_usual_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("claude.json"), CLAUDE).unwrap();
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"claude.json\"\n");
    assert!(!f.has_errors(), "{:#?}", texts(&f));
    let names: Vec<&str> = f.mcp_servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["files", "hosted", "local"]);
    let files = server(&f, "files");
    assert_eq!(files.prefix, "files_");
    assert_eq!(files.timeout_seconds, 30.0);
    assert_eq!(files.origin.file, tmp.path().join("claude.json"));
    assert_eq!((files.origin.line, files.origin.col), (3, 5));
    let McpTransport::Stdio { command, env, cwd } = &files.transport else {
        panic!("{files:?}")
    };
    assert_eq!(command[1..], ["-c", "exec cat"]);
    assert_eq!(env["LEVEL"], "3");
    assert_eq!(env["DEBUG"], "true");
    assert_eq!(cwd, &tmp.path().to_path_buf());
    let McpTransport::Http {
        url, headers, kind, ..
    } = &server(&f, "local").transport
    else {
        panic!()
    };
    assert_eq!(url, "http://127.0.0.1:8808/mcp");
    assert_eq!(headers["X-A"], "b");
    // VS Code's "http" is Streamable HTTP with the fallback to SSE.
    assert_eq!(*kind, HttpKind::Detect);
    // An https server anywhere is the user's choice: bridged.
    let McpTransport::Http { url, kind, .. } = &server(&f, "hosted").transport else {
        panic!()
    };
    assert_eq!(url, "https://maps.example.com/sse?key=k");
    assert_eq!(*kind, HttpKind::Sse);
    // Plain http off loopback is reported, not started, and not an error;
    // its query (an API key) is not shown.
    assert_eq!(f.unbridged.len(), 1, "{:#?}", f.unbridged);
    assert_eq!(f.unbridged[0].name, "remote");
    assert!(f.unbridged[0].reason.contains("clear text"));
    let t = texts(&f);
    assert!(
        t.iter()
            .any(|d| d.contains("claude.json:8:5: warning: MCP server `remote` (http http://mcp.example.com/mcp?key=…) is not bridged")),
        "{t:#?}"
    );
}

#[test]
fn overrides_on_our_side_change_prefix_filters_role_timeout_and_concurrency() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("claude.json"), CLAUDE).unwrap();
    let manifest = r#"
[[mcp_import]]
path = "claude.json"
role = "assistant"
timeout_seconds = 12
startup_timeout_seconds = 300

[mcp_import.servers.files]
prefix = "f_"
include = ["read", "list"]
exclude = ["list"]
timeout_seconds = 60
max_concurrency = 2

[mcp_import.servers.local]
enabled = false

[mcp_import.servers.hosted]
enabled = false

[mcp_import.servers.gone]
prefix = "g_"
"#;
    let f = load(tmp.path(), manifest);
    assert!(!f.has_errors(), "{:#?}", texts(&f));
    assert_eq!(f.mcp_servers.len(), 1);
    let s = server(&f, "files");
    assert_eq!(s.prefix, "f_");
    assert_eq!(
        s.include.as_deref(),
        Some(&["read".to_string(), "list".into()][..])
    );
    assert_eq!(s.exclude, ["list"]);
    assert_eq!(s.timeout_seconds, 60.0);
    assert_eq!(s.startup_timeout_seconds, 300.0);
    assert_eq!(s.role.as_deref(), Some("assistant"));
    assert_eq!(s.max_concurrency.map(|n| n.get()), Some(2));
    let t = texts(&f);
    assert!(
        t.iter().any(|d| d.contains(
            "m.toml:21:21: warning: `servers.gone` of this [[mcp_import]] names no server"
        )),
        "{t:#?}"
    );
}

#[test]
fn vscode_jsonc_with_env_and_workspace_variables() {
    let tmp = tempfile::tempdir().unwrap();
    let vs = tmp.path().join("proj/.vscode");
    std::fs::create_dir_all(&vs).unwrap();
    std::fs::write(
        vs.join("mcp.json"),
        r#"// VS Code writes comments
{
  "servers": {
    "gh": {
      "type": "stdio",
      "command": "sh",
      "args": ["${workspaceFolder}/x", "${NEKO_IMPORT_TEST_NOPE:-dflt}"],
      "env": {"TOKEN": "${env:PATH}"}, // trailing comma next
    },
  },
}"#,
    )
    .unwrap();
    let f = load(
        tmp.path(),
        "[[mcp_import]]\npath = \"proj/.vscode/mcp.json\"\n",
    );
    assert!(!f.has_errors(), "{:#?}", texts(&f));
    let McpTransport::Stdio { command, env, cwd } = &server(&f, "gh").transport else {
        panic!()
    };
    let proj = tmp.path().join("proj");
    assert_eq!(command[1], format!("{}/x", proj.display()));
    assert_eq!(command[2], "dflt");
    assert_eq!(env["TOKEN"], std::env::var("PATH").unwrap());
    assert_eq!(cwd, &proj);
}

#[test]
fn an_input_variable_is_an_error_at_its_place_naming_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("mcp.json"),
        "{\"servers\": {\n  \"gh\": {\"command\": \"sh\",\n    \"env\": {\"T\": \"${input:token}\"}}}}",
    )
    .unwrap();
    let f = load(
        tmp.path(),
        "[[tool]]\nname = \"x\"\n\n[[mcp_import]]\npath = \"mcp.json\"\n",
    );
    assert!(f.has_errors());
    assert!(f.mcp_servers.is_empty() && f.tools.is_empty());
    let t = texts(&f);
    let want = format!(
        "{}:3:18: error: `env.T` of MCP server `gh`: `${{input:token}}` is an input that VS Code asks the user for",
        tmp.path().join("mcp.json").display()
    );
    assert!(t.iter().any(|d| d.starts_with(&want)), "{t:#?}");
}

#[test]
fn json_syntax_errors_have_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("c.json"),
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"sh\"}\n    \"b\": {}\n  }\n}\n",
    )
    .unwrap();
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"c.json\"\n");
    let t = texts(&f);
    assert_eq!(t.len(), 1, "{t:#?}");
    assert!(
        t[0].ends_with("c.json:4:5: error: not JSON: expected `,` or `}` after an object member"),
        "{t:#?}"
    );
}

const NEKO: &str = r#"[plugin]
name = "MCP Adapter"
id = "mcp_adapter"

[mcp_servers]

[mcp_servers.filesystem]
transport = "stdio"
command = "sh"
args = ["-c", "exec cat"]
env = { LEVEL = "2" }
enabled = true

[mcp_servers.old]
transport = "sse"
url = "http://127.0.0.1:9000/sse"

[mcp_servers.web]
transport = "streamable-http"
url = "http://localhost:8808/mcp"

[mcp_servers.paused]
transport = "stdio"
command = "sh"
enabled = false

[mcp_adapter]
connect_timeout = 30
tool_timeout = 60
"#;

#[test]
fn neko_mcp_adapter_servers_are_read_each_with_its_transport() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("plugin.toml"), NEKO).unwrap();
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"plugin.toml\"\n");
    assert!(!f.has_errors(), "{:#?}", texts(&f));
    let names: Vec<&str> = f.mcp_servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["filesystem", "old", "web"]);
    // The adapter's own call timeout is ours too.
    assert_eq!(server(&f, "web").timeout_seconds, 60.0);
    assert_eq!(
        (server(&f, "web").origin.line, server(&f, "web").origin.col),
        (18, 14)
    );
    let kind = |name: &str| match &server(&f, name).transport {
        McpTransport::Http { kind, .. } => *kind,
        other => panic!("{other}"),
    };
    assert_eq!(kind("old"), HttpKind::Sse);
    assert_eq!(kind("web"), HttpKind::StreamableHttp);
    assert_eq!(
        server(&f, "old").transport.to_string(),
        "sse http://127.0.0.1:9000/sse"
    );
    assert_eq!(server(&f, "old").origin.line, 14);
    assert!(f.unbridged.is_empty(), "{:#?}", f.unbridged);
}

#[test]
fn a_file_without_a_server_list_or_missing_is_an_error_at_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("x.json"), "{\"other\": 1}").unwrap();
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"x.json\"\n");
    let t = texts(&f);
    assert!(
        t[0].contains(
            "x.json:1:1: error: no MCP server list here: expected an object `mcpServers`"
        ),
        "{t:#?}"
    );
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"nope.json\"\n");
    let t = texts(&f);
    assert!(
        t[0].contains("m.toml:2:8: error: the file \"nope.json\" of this [[mcp_import]]"),
        "{t:#?}"
    );
    assert!(t[0].contains("does not exist"), "{t:#?}");
}

#[test]
fn a_name_that_is_not_ours_is_made_one_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("c.json"),
        "{\"mcpServers\": {\"my server\": {\"command\": \"sh\"}}}",
    )
    .unwrap();
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"c.json\"\n");
    assert!(!f.has_errors(), "{:#?}", texts(&f));
    assert_eq!(server(&f, "my_server").prefix, "my_server_");
    // (On Windows, where `sh` is not found, a warning says so too.)
    assert!(
        texts(&f)
            .iter()
            .any(|t| t.contains("is called `my_server` here")),
        "{:#?}",
        texts(&f)
    );
}

#[test]
fn the_path_may_use_environment_variables_and_an_unset_one_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("c.json"), CLAUDE).unwrap();
    let f = load(
        tmp.path(),
        "[[mcp_import]]\npath = \"${NEKO_IMPORT_TEST_UNSET}/c.json\"\n",
    );
    let t = texts(&f);
    assert!(
        t[0].contains("m.toml:2:8: error: `path` of this [[mcp_import]]: the environment variable `NEKO_IMPORT_TEST_UNSET` is not set"),
        "{t:#?}"
    );
    // A set variable shows expanded in the error about the file: one that
    // cargo sets for tests, or on Windows (whose test executables may run
    // without cargo) one that Windows always sets.
    let var = if cfg!(windows) {
        "SystemRoot"
    } else {
        "CARGO_MANIFEST_DIR"
    };
    let home = std::env::var(var).unwrap();
    let f = load(
        tmp.path(),
        &format!("[[mcp_import]]\npath = \"${{{var}}}/surely-not-here.json\"\n"),
    );
    let t = texts(&f);
    assert!(
        t[0].contains(&format!(
            "({}) does not exist",
            Path::new(&home).join("surely-not-here.json").display()
        )),
        "{t:#?}"
    );
}

#[test]
fn each_way_of_naming_an_http_transport_maps_to_ours() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("c.json"),
        r#"{"mcpServers": {
  "bare": {"url": "http://127.0.0.1:1/mcp"},
  "vscode": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
  "claude_sse": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
  "cline": {"type": "streamableHttp", "url": "http://127.0.0.1:1/mcp"},
  "roo": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp"},
  "langchain": {"transport": "streamable_http", "url": "http://127.0.0.1:1/mcp"}
}}"#,
    )
    .unwrap();
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"c.json\"\n");
    assert!(!f.has_errors(), "{:#?}", texts(&f));
    let kind = |name: &str| match &server(&f, name).transport {
        McpTransport::Http { kind, .. } => *kind,
        other => panic!("{other}"),
    };
    // No type, or VS Code's "http": Streamable HTTP, then SSE on a 4xx,
    // as VS Code does; a name that says Streamable HTTP: that alone.
    assert_eq!(kind("bare"), HttpKind::Detect);
    assert_eq!(kind("vscode"), HttpKind::Detect);
    assert_eq!(kind("claude_sse"), HttpKind::Sse);
    for name in ["cline", "roo", "langchain"] {
        assert_eq!(kind(name), HttpKind::StreamableHttp, "{name}");
    }
    assert!(f.unbridged.is_empty(), "{:#?}", f.unbridged);
}

#[test]
fn what_an_imported_file_says_about_signing_in_is_kept_and_ours_wins() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("c.json"),
        r#"{"mcpServers": {
  "claude_code": {"type": "http", "url": "https://mcp.notion.example/mcp",
                  "oauth": {"clientId": "abc-123", "scopes": "read write", "callbackPort": 8080}},
  "plain": {"type": "http", "url": "https://mcp.linear.example/mcp"},
  "bad": {"type": "http", "url": "https://mcp.bad.example/mcp", "oauth": {"clientId": 7}}
}}"#,
    )
    .unwrap();
    let oauth = |f: &ManifestFile, name: &str| match &server(f, name).transport {
        McpTransport::Http { options, .. } => options.oauth.clone(),
        other => panic!("{other}"),
    };
    let f = load(tmp.path(), "[[mcp_import]]\npath = \"c.json\"\n");
    let t = texts(&f);
    assert_eq!(t.len(), 1, "{t:#?}");
    assert!(
        t[0].ends_with("c.json:5:87: error: `oauth.clientId` of MCP server `bad` must be a non-empty string, found a number"),
        "{t:#?}"
    );
    let f = load(
        tmp.path(),
        "[[mcp_import]]\npath = \"c.json\"\n[mcp_import.servers.plain]\noauth = false\n[mcp_import.servers.bad]\nenabled = false\n",
    );
    assert!(!f.has_errors(), "{:#?}", texts(&f));
    let o = oauth(&f, "claude_code");
    assert!(o.enabled);
    assert_eq!(o.client_id.as_deref(), Some("abc-123"));
    assert_eq!(
        o.scopes,
        Some(vec!["read".to_string(), "write".to_string()])
    );
    assert!(!oauth(&f, "plain").enabled, "the override turns it off");
}
