//! What a platform lacks is a `check` error at the place that asks for it,
//! naming the platform. The platform is given to the loader, so these run
//! on every host and show every platform's message.

use std::path::Path;

use neko_sidecar::manifest::{LoadContext, parse_manifest};
use neko_sidecar::os::Platform;

const UNIX_SOCKET_TOOL: &str = r#"[[tool]]
name = "weather"
description = "d"
handler = { type = "http", url = "http://localhost/w", unix_socket = "/run/weather.sock" }
"#;

fn diagnostics(platform: Platform, text: &str) -> Vec<String> {
    let ctx = LoadContext {
        platform,
        ..LoadContext::default()
    };
    let f = parse_manifest(Path::new("tools/weather.toml"), text, &ctx);
    f.diagnostics.iter().map(ToString::to_string).collect()
}

#[test]
fn a_unix_socket_handler_on_windows_is_an_error_at_its_place() {
    let d = diagnostics(Platform::Windows, UNIX_SOCKET_TOOL);
    let path = Path::new("tools/weather.toml").display();
    assert_eq!(
        d,
        [format!(
            "{path}:4:70: error: an http handler on a unix socket (`unix_socket`) is available on Linux and other Unix systems only; this is windows: reach the handler over loopback TCP instead, e.g. url = \"http://127.0.0.1:9876/weather\""
        )]
    );
}

#[test]
fn a_unix_socket_handler_is_accepted_where_there_are_unix_sockets() {
    for p in [Platform::Linux, Platform::MacOs, Platform::OtherUnix] {
        assert_eq!(
            diagnostics(p, UNIX_SOCKET_TOOL),
            Vec::<String>::new(),
            "{p}"
        );
    }
}

#[test]
fn the_file_with_the_error_yields_no_tools() {
    let ctx = LoadContext {
        platform: Platform::Windows,
        ..LoadContext::default()
    };
    let f = parse_manifest(Path::new("w.toml"), UNIX_SOCKET_TOOL, &ctx);
    assert!(f.has_errors());
    assert!(f.tools.is_empty());
}

/// A path written for the other kind of system than the host: a Windows
/// one off Windows, a drive-less one on Windows.
/// As TOML strings: a program, a folder, and what the error says.
fn foreign_path() -> (&'static str, &'static str, &'static str) {
    if cfg!(windows) {
        ("/opt/weather/run", "/opt/weather", "it has no drive letter")
    } else {
        (
            r"C:\\plugins\\weather\\run.exe",
            r"C:\\plugins\\weather",
            "it is a Windows path, and this is ",
        )
    }
}

#[test]
fn a_program_path_for_another_platform_is_an_error_that_says_so() {
    let (program, _, why) = foreign_path();
    let text = format!(
        "[[tool]]\nname = \"weather\"\ndescription = \"d\"\nhandler = {{ type = \"exec\", command = [\"{program}\"] }}\n"
    );
    let d = diagnostics(Platform::CURRENT, &text);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0].contains(":4:39: error: the program "), "{}", d[0]);
    assert!(d[0].contains(why), "{}", d[0]);
}

#[test]
fn a_cwd_for_another_platform_is_an_error_that_says_so() {
    let (_, dir, why) = foreign_path();
    let text = format!(
        "[[tool]]\nname = \"weather\"\ndescription = \"d\"\nhandler = {{ type = \"exec\", command = [\"weather\"], cwd = \"{dir}\" }}\n"
    );
    let d = diagnostics(Platform::CURRENT, &text);
    let errors: Vec<&String> = d.iter().filter(|m| m.contains(": error: ")).collect();
    assert_eq!(errors.len(), 1, "{d:#?}");
    assert!(errors[0].contains("`cwd` of "), "{}", errors[0]);
    assert!(errors[0].contains(why), "{}", errors[0]);
}
