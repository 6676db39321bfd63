//! Keep-last-good per file, tested on the manifest set directly: each test
//! edits a real directory and calls `rescan`, so the outcome of every step
//! is deterministic (no watcher involved).

use std::sync::Arc;

use neko_sidecar::reload::{FileHealth, ManifestSet};

use crate::support::Workspace;
use crate::support::reload::{broken, manifest, pairs, tools};

#[test]
fn the_first_load_takes_every_file_and_an_unchanged_rescan_changes_nothing() {
    let d = Workspace::new();
    d.write_tool("a.toml", &manifest(&["weather", "time"], "v1"));
    d.write_tool("b.toml", &manifest(&["dice"], "v1"));
    let mut set = ManifestSet::new(d.source());
    let first = set.rescan(false);
    assert!(first.changed);
    assert!(first.problems.is_empty(), "{:?}", first.problems);
    assert_eq!(
        tools(&set.desired()),
        pairs(&[
            ("dice", "dice v1"),
            ("time", "time v1"),
            ("weather", "weather v1")
        ])
    );
    let status = set.health();
    assert_eq!(status.summary(), "2 manifest files, 3 tools");
    assert!(!status.has_errors());

    let before = set.desired();
    let again = set.rescan(false);
    assert!(!again.changed);
    assert!(again.problems.is_empty() && again.notes.is_empty());
    assert!(Arc::ptr_eq(&before, &set.desired()));

    // Even a forced reload of the same bytes publishes nothing.
    assert!(!set.rescan(true).changed);
    assert!(Arc::ptr_eq(&before, &set.desired()));
}

#[test]
fn a_broken_edit_keeps_the_last_good_tools_reports_once_and_the_fix_applies() {
    let d = Workspace::new();
    let a = d.write_tool("a.toml", &manifest(&["weather"], "v1"));
    d.write_tool("b.toml", &manifest(&["dice"], "v1"));
    let mut set = d.loaded_set();
    let good = set.desired().tools["weather"].clone();

    // a.toml breaks while b.toml changes: b's change still applies.
    std::fs::write(&a, broken("weather")).unwrap();
    d.write_tool("b.toml", &manifest(&["dice"], "v2"));
    let r = set.rescan(false);
    assert!(r.changed);
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    let shown = r.problems[0].to_string();
    assert!(
        shown.starts_with(&format!("{}:3:", a.display())) && shown.contains("error"),
        "{shown}"
    );
    assert_eq!(
        tools(&set.desired()),
        pairs(&[("dice", "dice v2"), ("weather", "weather v1")])
    );
    // The kept tool is the very same one: the engine sees nothing to do.
    let kept = set.desired().tools["weather"].clone();
    assert!(Arc::ptr_eq(&kept.spec, &good.spec));
    assert_eq!(kept.fingerprint, good.fingerprint);

    let status = set.health();
    let fa = &status.files[0];
    assert_eq!(fa.health, FileHealth::Error);
    assert!(fa.serving_last_good());
    assert_eq!(fa.tools, vec!["weather".to_string()]);
    assert_eq!(fa.diagnostics, r.problems);
    assert_eq!(
        status.summary(),
        "2 manifest files, 2 tools, 1 file in error"
    );

    // The same bad content again: nothing new to report, and "since" holds.
    let again = set.rescan(false);
    assert!(!again.changed);
    assert!(again.problems.is_empty(), "{:?}", again.problems);
    assert_eq!(set.health().files[0].since, fa.since);
    // A forced reload (SIGHUP) shows the standing problem again.
    assert_eq!(set.rescan(true).problems.len(), 1);

    // The fix applies.
    std::fs::write(&a, manifest(&["weather"], "v3")).unwrap();
    let fixed = set.rescan(false);
    assert!(fixed.changed);
    assert!(fixed.problems.is_empty());
    assert!(
        fixed.notes.iter().any(|n| n.contains("fixed")),
        "{:?}",
        fixed.notes
    );
    assert_eq!(set.health().files[0].health, FileHealth::Ok);
    assert_eq!(
        set.desired().tools["weather"].spec.description,
        "weather v3"
    );
}

#[test]
fn a_new_file_that_is_broken_adds_nothing_and_deleting_a_file_drops_its_tools() {
    let d = Workspace::new();
    let a = d.write_tool("a.toml", &manifest(&["weather"], "v1"));
    let mut set = d.loaded_set();
    d.write_tool("b.toml", "[[tool]]\nname = \n");
    let r = set.rescan(false);
    assert!(!r.changed);
    assert_eq!(r.problems.len(), 1);
    let fb = &set.health().files[1];
    assert_eq!(fb.health, FileHealth::Error);
    assert!(!fb.serving_last_good());

    std::fs::remove_file(&a).unwrap();
    let r = set.rescan(false);
    assert!(r.changed);
    assert!(set.desired().is_empty());
    assert_eq!(set.health().files.len(), 1);
}

#[test]
fn a_handler_change_publishes_with_the_same_fingerprint_and_a_schema_change_changes_it() {
    let d = Workspace::new();
    std::fs::write(
        d.tools.join("s.json"),
        r#"{"type":"object","properties":{"city":{"type":"string"}}}"#,
    )
    .unwrap();
    let text = "[[tool]]\nname = \"weather\"\ndescription = \"w\"\nparameters_file = \"s.json\"\nhandler = { type = \"http\", url = \"http://127.0.0.1:9/w\" }\n";
    let a = d.write_tool("a.toml", text);
    let mut set = d.loaded_set();
    let v1 = set.desired().tools["weather"].clone();

    std::fs::write(&a, text.replace("127.0.0.1:9/w", "127.0.0.1:10/w")).unwrap();
    assert!(set.rescan(false).changed);
    let v2 = set.desired().tools["weather"].clone();
    assert_eq!(v2.fingerprint, v1.fingerprint);
    assert_eq!(v2.spec.handler.to_string(), "http http://127.0.0.1:10/w");

    // Only the schema file changes: the hash covers it, the fingerprint
    // follows it, the engine re-registers.
    std::fs::write(
        d.tools.join("s.json"),
        r#"{"type":"object","properties":{"city":{"type":"integer"}}}"#,
    )
    .unwrap();
    assert!(set.rescan(false).changed);
    assert_ne!(set.desired().tools["weather"].fingerprint, v2.fingerprint);
}

#[test]
fn a_newcomer_declaring_a_taken_name_is_refused_and_the_owner_keeps_it() {
    let d = Workspace::new();
    // b.toml sorts after a.toml; z.toml after both. Ownership, not order,
    // decides at reload: z.toml owns `weather` and keeps it.
    d.write_tool("z.toml", &manifest(&["weather"], "z"));
    let b = d.write_tool("b.toml", &manifest(&["dice"], "b1"));
    let mut set = d.loaded_set();

    std::fs::write(&b, manifest(&["dice", "weather"], "b2")).unwrap();
    let r = set.rescan(false);
    assert!(!r.changed);
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    let msg = r.problems[0].to_string();
    assert!(
        msg.starts_with(&format!("{}:", b.display()))
            && msg.contains("tool `weather` is already declared at")
            && msg.contains("z.toml:1:1"),
        "{msg}"
    );
    // b.toml as a whole keeps its last good version (dice b1).
    assert_eq!(
        tools(&set.desired()),
        pairs(&[("dice", "dice b1"), ("weather", "weather z")])
    );
    assert_eq!(set.health().files[0].health, FileHealth::Error);

    // The owner lets go: b.toml's unchanged version is accepted now,
    // because files in error are re-read at every rescan.
    d.write_tool("z.toml", &manifest(&["other"], "z"));
    let r = set.rescan(false);
    assert!(r.changed);
    assert_eq!(
        tools(&set.desired()),
        pairs(&[
            ("dice", "dice b2"),
            ("other", "other z"),
            ("weather", "weather b2")
        ])
    );
    assert!(!set.health().has_errors());
}

#[test]
fn a_tool_moves_between_files_in_one_reload_whatever_their_order() {
    let d = Workspace::new();
    d.write_tool("z.toml", &manifest(&["weather", "time"], "z"));
    d.write_tool("a.toml", &manifest(&["dice"], "a"));
    let mut set = d.loaded_set();
    d.write_tool("z.toml", &manifest(&["time"], "z"));
    d.write_tool("a.toml", &manifest(&["dice", "weather"], "a"));
    let r = set.rescan(false);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(set.desired().tools["weather"].spec.description, "weather a");
}

#[test]
fn at_the_first_load_the_first_file_in_scan_order_wins_and_the_other_is_refused_whole() {
    let d = Workspace::new();
    d.write_tool("a.toml", &manifest(&["weather"], "a"));
    d.write_tool("b.toml", &manifest(&["dice", "weather"], "b"));
    let mut set = ManifestSet::new(d.source());
    let r = set.rescan(true);
    assert_eq!(tools(&set.desired()), pairs(&[("weather", "weather a")]));
    assert_eq!(r.problems.len(), 1);
    assert!(set.health().has_errors());

    // The same name twice within one file is refused too.
    d.write_tool("c.toml", &manifest(&["x", "x"], "c"));
    let r = set.rescan(false);
    assert!(
        r.problems
            .iter()
            .any(|p| p.to_string().contains("tool `x` is declared twice")),
        "{:?}",
        r.problems
    );
    assert!(set.desired().get("x").is_none());
}

#[test]
fn hidden_swap_and_backup_files_are_not_manifests() {
    let d = Workspace::new();
    d.write_tool("a.toml", &manifest(&["weather"], "v1"));
    d.write_tool(".a.toml.swp", "\u{0}binary swap");
    d.write_tool("a.toml~", &manifest(&["backup"], "old"));
    d.write_tool("a.toml.bak", &manifest(&["bak"], "old"));
    d.write_tool(".hidden.toml", &manifest(&["hidden"], "x"));
    d.write_tool("#a.toml#", "junk");
    let mut set = ManifestSet::new(d.source());
    let r = set.rescan(true);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(tools(&set.desired()), pairs(&[("weather", "weather v1")]));
    assert_eq!(set.health().files.len(), 1);
}

#[test]
fn an_unreadable_directory_keeps_its_tools_until_it_is_back() {
    let d = Workspace::new();
    d.write_tool("a.toml", &manifest(&["weather"], "v1"));
    let mut set = d.loaded_set();
    std::fs::remove_dir_all(&d.tools).unwrap();
    let r = set.rescan(false);
    assert!(!r.changed);
    assert_eq!(r.problems.len(), 1);
    assert!(r.problems[0].message.contains("does not exist"));
    assert_eq!(set.desired().len(), 1);
    assert!(set.health().has_errors());
    // Reported once.
    assert!(set.rescan(false).problems.is_empty());

    std::fs::create_dir(&d.tools).unwrap();
    d.write_tool("a.toml", &manifest(&["weather"], "v2"));
    assert!(set.rescan(false).changed);
    assert_eq!(
        set.desired().tools["weather"].spec.description,
        "weather v2"
    );
    assert!(!set.health().has_errors());
}
