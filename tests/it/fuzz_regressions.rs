//! One regression test per bug that fuzzing or a property test found, each
//! named after the bug and pinning the exact input that showed it. The fuzz
//! targets are in `fuzz/` (see `fuzz/README.md`); these run in the normal
//! suite so a fixed bug stays fixed without a fuzzer.

use neko_sidecar::contract::envelope::normalise;

/// Found by the `callback` fuzz target: an envelope without `output` keeps
/// its other keys as the output, but `normalise` removed `is_error` with
/// serde_json's order-swapping `remove`, so `{"is_error": false, "temp": 3,
/// "city": "x", "unit": "C"}` reached the model as `{"unit", "temp", "city"}`.
#[test]
fn envelope_rest_keeps_the_handlers_key_order() {
    let body = br#"{"is_error": false, "temp": 3, "city": "x", "unit": "C", "images": []}"#;
    let out = normalise(body).to_json();
    assert_eq!(
        out.to_string(),
        r#"{"output":{"temp":3,"city":"x","unit":"C"},"is_error":false,"images":[]}"#
    );
    let body = br#"{"a": 1, "is_error": true, "b": 2, "error": "no", "c": 3}"#;
    let out = normalise(body).to_json();
    assert_eq!(
        out.to_string(),
        r#"{"output":{"a":1,"b":2,"c":3,"error":"no"},"is_error":true,"error":"no"}"#
    );
}

/// Found by the `never_unregisters_what_is_not_ours` property test: a name
/// we no longer declare, listed with our source in role B and with another
/// plugin's in role C, was removed with one global unregister, which
/// main_server applies to every role whoever registered the name: the
/// other plugin's tool went with ours. Ours must go role by role.
#[test]
fn an_undesired_name_shared_with_another_source_is_unregistered_only_where_ours() {
    use std::time::{Duration, Instant};

    use neko_sidecar::client::{Observed, ObservedTool};
    use neko_sidecar::config::ConflictPolicy;
    use neko_sidecar::desired::DesiredState;
    use neko_sidecar::planner::{Action, Memory, PlanContext, UnregisterReason, plan};

    let tool = |source: &str, url: &str| ObservedTool {
        name: "e".into(),
        description: String::new(),
        source: source.into(),
        callback_url: Some(url.into()),
        is_remote: true,
    };
    let ours = |n: &str| format!("http://127.0.0.1:40001/cb/tok/{n}");
    let observed = Observed {
        tools_by_role: [
            ("B".to_string(), vec![tool("plugin:w", &ours("e"))]),
            (
                "C".to_string(),
                vec![tool("plugin:other", "http://127.0.0.1:50000/e")],
            ),
        ]
        .into(),
    };
    let ctx = PlanContext {
        source: "plugin:w",
        url_for: &ours,
        policy: ConflictPolicy::Yield,
        reclaim_interval: Duration::from_secs(60),
        now: Instant::now(),
    };
    let desired = DesiredState {
        source: "plugin:w".into(),
        tools: Default::default(),
        mcp_servers: Default::default(),
    };
    let p = plan(&desired, Some(&observed), &Memory::new(), &ctx);
    assert_eq!(
        p.actions,
        [Action::Unregister {
            name: "e".into(),
            role: Some("B".into()),
            reason: UnregisterReason::NotDesired,
        }]
    );

    // Held by us alone, one global unregister still does it in one trip.
    let alone = Observed {
        tools_by_role: [
            ("B".to_string(), vec![tool("plugin:w", &ours("e"))]),
            ("C".to_string(), vec![tool("plugin:w", &ours("e"))]),
        ]
        .into(),
    };
    let p = plan(&desired, Some(&alone), &Memory::new(), &ctx);
    assert_eq!(
        p.actions,
        [Action::Unregister {
            name: "e".into(),
            role: None,
            reason: UnregisterReason::NotDesired,
        }]
    );
}

/// Found by the `config` fuzz target: `[log] level = " éé=info"` panicked
/// inside tracing-subscriber (it slices each directive with offsets from
/// its trimmed form, landing inside the `é`), so `check` and the daemon
/// crashed on the config instead of reading it. The same parser read
/// `--log-level` and `RUST_LOG`. Directives are now trimmed before parsing.
#[test]
fn log_level_with_whitespace_before_non_ascii_does_not_panic() {
    use std::path::Path;

    use neko_sidecar::config;
    use neko_sidecar::logging::parse_filter;

    assert!(parse_filter(" éé=info").is_some());
    assert!(parse_filter("warn, ü=debug").is_some());
    assert!(parse_filter(" [é").is_none());
    let (cfg, diags) = config::parse(
        Path::new("agent.toml"),
        "source = \"plugin:w\"\n[log]\nlevel = \" éé=info\"\n",
    );
    assert!(diags.is_empty(), "{diags:?}");
    assert!(cfg.is_some());
    // The fuzzer's own input: several errors, reported, and no panic.
    let text = "source = \"mlugin:x\"\n[log]\nformat = \"xml\"\nlevel = \"n\u{fffd}\u{fffd}-,,,,,,,,,           WWWW\u{fffd}\u{fffd}WWW[handlers]WWWW      \u{fffd} ,mVVVVd\"\n";
    let (cfg, diags) = config::parse(Path::new("agent.toml"), text);
    assert!(cfg.is_none());
    assert!(
        diags.iter().any(|d| d.message.contains("\"xml\"")),
        "{diags:?}"
    );
}

/// Found by reading `config.rs` while writing the `config` target's
/// invariant (the base URL must join to `{base path}/api/tools`), which then
/// failed on this input; the 10-minute run had not produced it. The URL was
/// kept as written, so `url = "http://127.0.0.1:48911/ "` (a trailing space)
/// passed `check`, but every request went to `/%20/api/tools`.
#[test]
fn main_server_url_with_surrounding_spaces_joins_to_the_api_routes() {
    use std::path::Path;

    use neko_sidecar::config;

    for written in [
        "http://127.0.0.1:48911/ ",
        " http://127.0.0.1:48911",
        "http://127.0.0.1:48911\t/",
    ] {
        let text = format!("source = \"plugin:w\"\n[main_server]\nurl = \"{written}\"\n");
        let (cfg, diags) = config::parse(Path::new("agent.toml"), &text);
        let cfg = cfg.unwrap_or_else(|| panic!("{written:?}: {diags:?}"));
        assert_eq!(cfg.main_server.url, "http://127.0.0.1:48911", "{written:?}");
    }
}

/// A `parameters_file` naming a FIFO would block the loader forever (and
/// `/dev/zero` would grow it without end): only regular files are read.
#[test]
fn parameters_file_that_is_a_fifo_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("schema.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: mkfifo is not available");
        return;
    }
    let manifest = dir.path().join("t.toml");
    let text = "[[tool]]\nname = \"t\"\ndescription = \"d\"\nparameters_file = \"schema.json\"\nhandler = { type = \"exec\", command = [\"sh\", \"x\"] }\n";
    let f = neko_sidecar::manifest::parse_manifest(&manifest, text, &Default::default());
    assert!(f.tools.is_empty());
    let errors: Vec<String> = f
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("is not a regular file"), "{}", errors[0]);
}

/// Found by the `jsonc` fuzz target: a bad escape in a string of an
/// imported server list was placed where serde_json's column pointed, which
/// counts bytes from the last line break after reading a whole `\uXXXX`:
/// in `"\u0,…"` before a character of several bytes, inside that character
/// (so its column was wrong), and after an escaped line break, on the wrong
/// line. The place is the backslash of the bad escape.
#[test]
fn a_bad_escape_in_an_imported_list_is_placed_at_its_backslash() {
    use neko_sidecar::manifest::parse_jsonc;
    for (text, at) in [
        ("{\"a\": \"\\u0,\u{fffd}\u{fffd}\"}", 7),
        ("{\"a\": \"x\\\ny\"}", 8),
        ("[\"é\\ud800é\"]", 4),
    ] {
        let e = parse_jsonc(text).unwrap_err();
        assert!(text.is_char_boundary(e.at), "{text:?}: {}", e.at);
        assert_eq!(
            (e.at, &text[e.at..e.at + 1]),
            (at, "\\"),
            "{text:?}: {}",
            e.message
        );
        assert!(
            e.message.starts_with("a bad escape in a string"),
            "{}",
            e.message
        );
    }
}
