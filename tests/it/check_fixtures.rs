//! End-to-end tests of `neko-sidecar check`: the real binary, run on fixture
//! deployments, with its exact output.
//!
//! Each directory `tests/fixtures/check/<case>/` is one deployment:
//!
//! - `agent.toml`: the config (absent in `config_file_missing`); its
//!   `manifest_dirs` point into the case directory, usually at `tools/`;
//! - the manifests and whatever files they name;
//! - `expected.txt`: the exact stdout, paths relative to the case directory
//!   (absolute ones, resolved for spawning, start with `$CASE`);
//! - `expected_exit`: the exit code, `0` (valid, warnings allowed) or `1`;
//! - `args` (optional): extra arguments of `check`, one per line (e.g. `-v`).
//!
//! The binary runs with the case directory as its working directory and
//! `--config agent.toml`, so every printed path is relative and the same on
//! every machine. Stderr must stay empty: `check` prints to stdout only.
//!
//! Cases that cannot be static files (an unreadable manifest) and the
//! repository's own `agent.toml.example` have hand-written tests at the end.
//!
//! After an intended change of a message, `BLESS=1 cargo test --test it
//! check_fixtures::` rewrites `expected.txt` and `expected_exit` from the actual
//! run; review `git diff tests/fixtures` before committing.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{BIN, repo};

fn fixtures_root() -> PathBuf {
    repo().join("tests/fixtures/check")
}

/// Runs `neko-sidecar check ARGS --config agent.toml` in `dir`.
/// `path` replaces the child's PATH when given.
fn run_check(dir: &Path, args: &[&str], path: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir)
        .arg("check")
        .args(args)
        .env_remove("NEKO_SIDECAR_CONFIG");
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"))
}

/// A line diff (longest common subsequence) of two texts, for failures:
/// `-` lines are expected but missing, `+` lines are printed but unexpected.
fn line_diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    // lcs[i][j]: length of the LCS of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "  {}", a[i]);
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "- {}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "+ {}", b[j]);
            j += 1;
        }
    }
    if expected.ends_with('\n') != actual.ends_with('\n') {
        out.push_str("(the texts differ in their final newline)\n");
    }
    out
}

/// Asserts the exact stdout, an empty stderr and the exit code of a run.
fn assert_output(what: &str, out: &Output, expected: &str, expected_exit: i32) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    if stdout == expected && stderr.is_empty() && code == Some(expected_exit) {
        return;
    }
    let code = code.map_or("none: killed by a signal".to_string(), |c| c.to_string());
    panic!(
        "\n`check` output differs for {what}\n\
         --- expected stdout (exit {expected_exit}):\n{expected}\
         --- actual stdout (exit {code}):\n{stdout}\
         --- actual stderr:\n{stderr}\
         --- diff (- expected, + actual):\n{}",
        line_diff(expected, &stdout)
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Runs one fixture case and compares with its expected files.
fn check_fixture(case: &str) {
    let dir = fixtures_root().join(case);
    assert!(dir.is_dir(), "no fixture directory {}", dir.display());
    let args_text = std::fs::read_to_string(dir.join("args")).unwrap_or_default();
    let mut args: Vec<&str> = args_text.lines().filter(|l| !l.is_empty()).collect();
    args.extend(["--config", "agent.toml"]);
    let mut out = run_check(&dir, &args, None);
    // What is resolved for spawning (an exec program, a unix socket) prints
    // absolute; the case directory becomes `$CASE` so fixtures fit any checkout.
    // Where a program was looked for is this machine's PATH: `$PATH`.
    let case_dir = dir.display().to_string();
    let path_dirs: Vec<String> =
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.display().to_string())
            .collect();
    out.stdout = String::from_utf8_lossy(&out.stdout)
        .replace(&case_dir, "$CASE")
        .replace(
            &format!("(looked in {})", path_dirs.join(", ")),
            "(looked in $PATH)",
        )
        .into_bytes();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(dir.join("expected.txt"), &out.stdout).unwrap();
        let code = out.status.code().expect("killed by a signal");
        std::fs::write(dir.join("expected_exit"), format!("{code}\n")).unwrap();
        return;
    }
    let expected = read(&dir.join("expected.txt"));
    let exit_text = read(&dir.join("expected_exit"));
    let exit: i32 = exit_text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{case}/expected_exit is not a number: {exit_text:?}"));
    assert!(
        exit == 0 || exit == 1,
        "{case}/expected_exit must be 0 or 1"
    );
    // A valid deployment ends with `: ok`, an invalid one with `: failed`.
    let last = expected.lines().last().unwrap_or_default();
    assert_eq!(
        last.contains(": ok"),
        exit == 0,
        "{case}: the summary line {last:?} disagrees with expected_exit {exit}"
    );
    assert_output(&format!("fixture `{case}`"), &out, &expected, exit);
}

macro_rules! fixtures {
    ($($case:ident),* $(,)?) => {
        /// Every fixture case with a test, to find directories without one.
        const FIXTURES: &[&str] = &[$(stringify!($case)),*];
        $(
            #[test]
            fn $case() {
                check_fixture(stringify!($case));
            }
        )*
    };
}

fixtures! {
    // Tool names.
    name_invalid_characters,
    name_dot_segment,
    name_length,
    name_with_dot_warns,
    name_missing_or_not_a_string,
    // Descriptions.
    description_missing,
    description_empty,
    // Parameters, inline or from a file.
    parameters_not_a_table,
    parameters_invalid_schema,
    parameters_root_not_object,
    parameters_root_type_missing,
    parameters_unknown_draft,
    parameters_pattern_not_a_regex,
    parameters_datetime,
    parameters_and_parameters_file,
    parameters_file_relative_to_manifest,
    parameters_file_missing,
    parameters_file_not_json,
    parameters_file_invalid_schema,
    parameters_default,
    parameters_explicit_default,
    // Timeout, role, validate_arguments, max_concurrency.
    timeout_seconds_range,
    role_empty_string,
    validate_arguments_not_a_boolean,
    max_concurrency_range,
    // Handlers.
    handler_missing,
    handler_not_a_table,
    handler_type_unknown_or_missing,
    http_url_not_loopback,
    http_remote_allowed,
    http_https_refused,
    http_url_not_http,
    http_url_missing,
    http_unix_socket,
    exec_command_missing_or_empty,
    exec_program_missing,
    exec_program_not_executable,
    exec_program_relative_to_cwd,
    exec_bare_program_not_on_path,
    exec_cwd_not_a_directory,
    exec_nul_bytes,
    exec_env_values_must_be_strings,
    exec_inherit_env_and_url_secrets,
    // MCP servers.
    mcp_server_valid,
    mcp_server_transport_errors,
    mcp_server_transport_key,
    mcp_import_formats,
    mcp_import_errors,
    mcp_server_env_var_unset,
    mcp_server_fields,
    mcp_server_oauth,
    mcp_server_duplicate_names,
    // Unknown keys and duplicate names.
    unknown_keys_suggest_the_closest,
    duplicate_names_across_files,
    duplicate_names_in_one_file,
    // Whole files and directories.
    manifest_not_utf8,
    manifest_empty,
    manifest_toml_syntax_error,
    manifest_without_tools,
    manifest_dir_missing,
    manifest_dir_not_a_directory,
    manifest_dir_without_manifests,
    scan_skips_hidden_and_backup_files,
    // Several problems at once.
    several_errors_in_one_file,
    errors_do_not_hide_other_files,
    // The agent config.
    config_file_missing,
    config_not_utf8,
    config_toml_syntax_error,
    config_source_missing,
    config_source_empty,
    config_source_builtin,
    config_source_not_a_string,
    config_source_without_plugin_prefix_warns,
    config_manifest_dirs_empty,
    config_manifest_dirs_not_strings,
    config_manifest_dirs_default,
    config_callback_listen_not_loopback,
    config_callback_listen_not_an_address,
    config_callback_listen_loopback_forms,
    config_callback_listen_ipv6,
    config_duration_invalid,
    config_duration_units,
    config_backoff_initial_above_max,
    config_max_in_flight_range,
    config_max_in_flight_zero,
    config_conflict_policy_invalid,
    config_log_invalid,
    config_unknown_keys,
    config_and_manifest_errors_together,
    config_main_server_url_https,
    config_main_server_url_invalid,
    config_main_server_url_query,
    config_byte_limits_range,
    config_section_not_a_table,
}

#[test]
fn every_fixture_directory_has_a_test() {
    let dirs: Vec<String> = std::fs::read_dir(fixtures_root())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    let mut untested: Vec<&String> = dirs
        .iter()
        .filter(|d| !FIXTURES.contains(&d.as_str()))
        .collect();
    untested.sort();
    let missing: Vec<&&str> = FIXTURES
        .iter()
        .filter(|c| !dirs.iter().any(|d| d == *c))
        .collect();
    assert!(
        untested.is_empty() && missing.is_empty(),
        "fixture directories without a test (add them to fixtures!): {untested:?}; \
         tests without a fixture directory: {missing:?}"
    );
}

/// Without `parameters`, a tool takes `{"type":"object","properties":{}}`,
/// exactly as if it were written out: same fingerprint, same output.
#[test]
fn parameters_default_equals_the_written_out_default() {
    let root = fixtures_root();
    let args = ["-v", "--config", "agent.toml"];
    let implicit = run_check(&root.join("parameters_default"), &args, None);
    let explicit = run_check(&root.join("parameters_explicit_default"), &args, None);
    assert!(implicit.status.success() && explicit.status.success());
    assert_output(
        "a tool without `parameters`",
        &implicit,
        &String::from_utf8_lossy(&explicit.stdout),
        0,
    );
}

const SOURCE_LINE: &str = "source tag \"plugin:check-fixtures\": it marks this sidecar's registrations, so no other sidecar may use it\n";

const VALID_TOOL: &str = r#"[[tool]]
name = "weather"
description = "A valid tool next to the unreadable file."
handler = { type = "http", url = "http://127.0.0.1:9876/tool" }
"#;

/// An unreadable manifest is an error naming the OS reason, and does not
/// stop the other files. `chmod 000` makes a file unreadable, except for root
/// (tests run as root in some containers): there a symlink to
/// `/proc/self/mem` stands in, a regular file whose first page cannot be read
/// (EIO), so the same code path is exercised with another reason.
#[test]
fn manifest_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("agent.toml"),
        "source = \"plugin:check-fixtures\"\nmanifest_dirs = [\"tools\"]\n",
    )
    .unwrap();
    std::fs::create_dir(dir.join("tools")).unwrap();
    std::fs::write(dir.join("tools/ok.toml"), VALID_TOOL).unwrap();
    let secret = dir.join("tools/secret.toml");
    std::fs::write(&secret, VALID_TOOL.replace("weather", "secret")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    let reason = if std::fs::read(&secret).is_ok() {
        // Privileged: permissions do not stop reads.
        std::fs::remove_file(&secret).unwrap();
        std::os::unix::fs::symlink("/proc/self/mem", &secret).unwrap();
        "Input/output error (os error 5)"
    } else {
        "Permission denied (os error 13)"
    };
    let expected = format!(
        "tools/secret.toml: error: cannot read the manifest: {reason}\n\
         {SOURCE_LINE}\
         1 tool in 2 files: failed with 1 error and 0 warnings\n"
    );
    let out = run_check(dir, &["--config", "agent.toml"], None);
    assert_output("an unreadable manifest", &out, &expected, 1);
}

/// Whether `program` is found in `path` the way execvp looks it up.
fn on_path(program: &str, path: &std::ffi::OsStr) -> bool {
    std::env::split_paths(path).any(|d| {
        std::fs::metadata(d.join(program))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The `LINE:COL` of `"program"` as the first element of a `command` array
/// in an example manifest, where a not-on-PATH warning points.
fn program_position(manifest: &Path, program: &str) -> String {
    let text = read(manifest);
    let needle = format!("command = [\"{program}\"");
    for (i, line) in text.lines().enumerate() {
        if let Some(at) = line.find(&needle) {
            let col = line[..at + "command = [".len()].chars().count() + 1;
            return format!("{}:{col}", i + 1);
        }
    }
    panic!("{} has no {needle}", manifest.display());
}

/// The example config of the repository, with the example manifests, checks
/// clean: 4 tools and 1 MCP server in 5 files. Its exec handlers use python3, node and sh by
/// bare name; each one missing from `path` is a warning (not an error).
fn expected_example_output(path: &std::ffi::OsStr) -> (String, usize) {
    let root = repo();
    let mut out = String::new();
    let mut warnings = 0;
    for (file, program, what) in [
        (
            "convert_units.toml",
            "python3",
            "the handler of tool `convert_units`",
        ),
        ("dice.toml", "node", "the handler of tool `roll_dice`"),
        ("shell.toml", "sh", "the handler of tool `disk_usage`"),
        ("weather_mcp.toml", "python3", "MCP server `weather_mcp`"),
    ] {
        if on_path(program, path) {
            continue;
        }
        warnings += 1;
        let rel = format!("examples/tools/{file}");
        let dirs: Vec<String> = std::env::split_paths(path)
            .map(|d| d.display().to_string())
            .collect();
        let _ = writeln!(
            out,
            "{rel}:{}: warning: the program `{program}` of {what} is not found on PATH (looked in {}); calls of this tool will fail until it is installed",
            program_position(&root.join(&rel), program),
            dirs.join(", ")
        );
    }
    out.push_str("source tag \"plugin:neko-sidecar-examples\": it marks this sidecar's registrations, so no other sidecar may use it\n");
    match warnings {
        0 => out.push_str("4 tools and 1 MCP server in 5 files: ok\n"),
        1 => out.push_str("4 tools and 1 MCP server in 5 files: ok (1 warning)\n"),
        n => {
            let _ = writeln!(
                out,
                "4 tools and 1 MCP server in 5 files: ok ({n} warnings)"
            );
        }
    }
    (out, warnings)
}

#[test]
fn example_config_checks_ok() {
    let root = repo();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let (expected, _) = expected_example_output(&path);
    let out = run_check(root, &["--config", "agent.toml.example"], None);
    assert_output("agent.toml.example with this PATH", &out, &expected, 0);
}

/// The same with an empty PATH: every interpreter is missing, which is four
/// warnings and still exit 0.
#[test]
fn example_config_warns_for_each_missing_interpreter() {
    let root = repo();
    let empty = tempfile::tempdir().unwrap();
    let (expected, warnings) = expected_example_output(empty.path().as_os_str());
    assert_eq!(warnings, 4);
    let out = run_check(
        root,
        &["--config", "agent.toml.example"],
        Some(empty.path()),
    );
    assert_output("agent.toml.example with an empty PATH", &out, &expected, 0);
}

#[test]
fn line_diff_marks_missing_and_extra_lines() {
    assert_eq!(line_diff("a\nb\nc\n", "a\nx\nc\n"), "  a\n- b\n+ x\n  c\n");
    assert_eq!(
        line_diff("a\n", "a"),
        "  a\n(the texts differ in their final newline)\n"
    );
}

/// The Debian package's `/etc/neko-sidecar/agent.toml` is the example
/// config with the package's manifest directory and identity token file:
/// the two must not drift.
#[test]
fn the_packaged_config_is_the_example_with_the_packages_manifest_dir() {
    let read = |p: &str| std::fs::read_to_string(repo().join(p)).unwrap();
    // From the first key's comment on: the header says how each is used.
    let body = |text: &str| -> Vec<String> {
        let start = text.find("# Required.").expect("the `source` comment");
        text[start..]
            .lines()
            .map(|l| {
                if l.starts_with("manifest_dirs = ") {
                    "manifest_dirs".into()
                } else if l.trim_start_matches("# ").starts_with("token_file = ") {
                    // The package's is set (systemd's RuntimeDirectory).
                    "token_file".into()
                } else {
                    l.to_string()
                }
            })
            .collect()
    };
    let (example, packaged) = (read("agent.toml.example"), read("packaging/agent.toml"));
    assert_eq!(body(&example), body(&packaged));
    assert!(
        packaged
            .lines()
            .any(|l| l == r#"manifest_dirs = ["tools.d"]"#)
    );
    assert!(
        packaged
            .lines()
            .any(|l| l == r#"token_file = "/run/neko-sidecar/admin.token""#)
    );
}
