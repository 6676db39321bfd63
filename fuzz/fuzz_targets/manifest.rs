//! Fuzz target `manifest`: arbitrary bytes as a tool manifest.
//!
//! `parse_manifest` must never panic; every diagnostic must point inside the
//! text and come in reading order; a file with an error yields no tools, and
//! a file without one yields at least one tool, each keeping the rules a
//! `ToolSpec` promises. Bytes that are not UTF-8 are decoded lossily (the
//! loader refuses them before parsing, so only text is worth exploring).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use neko_sidecar::manifest::{LoadContext, parse_manifest, valid_name};
use neko_sidecar_fuzz::{assert_positions_within, assert_reading_order};

/// A folder that does not exist, so relative `parameters_file`, `cwd` and
/// program paths name nothing on this machine.
const PATH: &str = "/nonexistent/neko-sidecar-fuzz/tools/fuzz.toml";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new(PATH);
    // The first byte also picks the one setting that changes judgement.
    let ctx = LoadContext {
        allow_remote_handlers: data.first().is_some_and(|b| b & 1 == 1),
    };
    let file = parse_manifest(path, &text, &ctx);

    assert_positions_within(path, &text, &file.diagnostics);
    assert_reading_order(path, &file.diagnostics);
    if file.has_errors() {
        assert!(file.tools.is_empty(), "a file with errors yielded tools");
        return;
    }
    assert!(
        !file.tools.is_empty(),
        "a file without errors yielded no tool: {:?}",
        file.diagnostics
    );
    for t in &file.tools {
        assert!(valid_name(&t.name), "tool name {:?}", t.name);
        assert!(!t.description.trim().is_empty(), "empty description");
        assert!(
            t.timeout_seconds > 0.0 && t.timeout_seconds <= 300.0,
            "timeout {}",
            t.timeout_seconds
        );
        assert_ne!(t.role.as_deref(), Some(""), "empty role");
        assert_eq!(
            t.parameters.get("type").and_then(|v| v.as_str()),
            Some("object"),
            "parameters root {}",
            t.parameters
        );
        assert!(t.max_concurrency.is_none_or(|n| n.get() <= 10_000));
        assert!(t.origin.line >= 1 && t.origin.col >= 1);
    }
});
