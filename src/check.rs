//! `neko-sidecar check`: load the agent config and every manifest, and report
//! all problems at once, like `nginx -t`.
//!
//! The same loading path as the daemon (config, scan, per-file load, desired
//! state assembly), so a deployment that passes `check` starts. This module
//! renders; it never registers anything.

use std::fmt::Write as _;
use std::path::Path;

use crate::config::{self, AgentConfig};
use crate::desired::DesiredState;
use crate::diag::{self, Diagnostic, plural};
use crate::manifest::{self, ManifestFile};
use crate::reload::ManifestSource;

/// Everything the daemon would load, and every problem found on the way.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub config: Option<AgentConfig>,
    pub files: Vec<ManifestFile>,
    pub desired: Option<DesiredState>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Loads the manifests named by a valid config.
pub(crate) fn load_manifests(
    cfg: &AgentConfig,
) -> (Vec<ManifestFile>, DesiredState, Vec<Diagnostic>) {
    let (paths, mut diags) = manifest::scan::manifest_files(&cfg.manifest_dirs);
    let ctx = ManifestSource::from_config(cfg).context;
    let files: Vec<ManifestFile> = paths.iter().map(|p| manifest::load_file(p, &ctx)).collect();
    for f in &files {
        diags.extend(f.diagnostics.iter().cloned());
    }
    let (desired, dup) = DesiredState::assemble(&cfg.source, &files);
    diags.extend(dup);
    (files, desired, diags)
}

/// Loads the config and every manifest it names. A config with errors still
/// names its manifest directories (bad values fall back to defaults), so the
/// manifests are checked too and every problem is reported in one run.
pub(crate) fn load_all(config_path: &Path) -> Loaded {
    let (config, mut diagnostics) = config::load_partial(config_path);
    let Some(cfg) = config else {
        return Loaded {
            config: None,
            files: Vec::new(),
            desired: None,
            diagnostics,
        };
    };
    let config_ok = !diagnostics.iter().any(Diagnostic::is_error);
    let (files, desired, diags) = load_manifests(&cfg);
    diagnostics.extend(diags);
    Loaded {
        config: config_ok.then_some(cfg),
        files,
        desired: Some(desired),
        diagnostics,
    }
}

/// The text `check` prints, and whether the deployment is valid.
pub(crate) fn render(loaded: &Loaded, verbose: bool) -> (String, bool) {
    let mut out = String::new();
    for d in &loaded.diagnostics {
        let _ = writeln!(out, "{d}");
    }
    let (errors, warnings) = diag::count(&loaded.diagnostics);
    let tools = loaded.desired.as_ref().map_or(0, DesiredState::len);
    let servers = loaded.desired.as_ref().map_or(0, |d| d.mcp_servers.len());
    let files = loaded.files.len();
    if verbose {
        if let Some(desired) = &loaded.desired {
            for t in desired.tools.values() {
                let s = &t.spec;
                let _ = writeln!(
                    out,
                    "tool {:<24} role={:<10} timeout={}s handler={} fingerprint={} ({})",
                    s.name,
                    s.role.as_deref().unwrap_or("*"),
                    s.timeout_seconds,
                    s.handler,
                    t.fingerprint,
                    s.origin
                );
            }
        }
    }
    if let Some(cfg) = &loaded.config {
        let _ = writeln!(
            out,
            "source tag \"{}\": it marks this sidecar's registrations, so no other sidecar may use it",
            cfg.source
        );
    }
    let what = if servers == 0 {
        format!("{} in {}", plural(tools, "tool"), plural(files, "file"))
    } else {
        format!(
            "{} and {} in {}",
            plural(tools, "tool"),
            plural(servers, "MCP server"),
            plural(files, "file")
        )
    };
    let ok = errors == 0;
    if ok {
        if warnings == 0 {
            let _ = writeln!(out, "{what}: ok");
        } else {
            let _ = writeln!(out, "{what}: ok ({})", plural(warnings, "warning"));
        }
    } else {
        let _ = writeln!(
            out,
            "{what}: failed with {} and {}",
            plural(errors, "error"),
            plural(warnings, "warning")
        );
    }
    (out, ok)
}

/// `check --probe`: each MCP server started once, its tools listed and
/// judged as the daemon would; the report, and whether all went well.
pub(crate) async fn probe(desired: &DesiredState) -> (String, bool) {
    let mut out = String::new();
    if desired.mcp_servers.is_empty() {
        let _ = writeln!(out, "probe: no MCP server to probe");
        return (out, true);
    }
    let statuses = crate::mcp::McpServers::probe(desired, probe_wait(desired)).await;
    let mut ok = true;
    for st in &statuses {
        let Some(spec) = desired.mcp_servers.get(&st.name) else {
            continue;
        };
        let at = Some(spec.origin.position());
        if st.protocol.is_none() {
            ok = false;
            let why = st.last_error.as_deref().unwrap_or("no answer in time");
            let d = Diagnostic::error(
                &spec.origin.file,
                at,
                format!(
                    "MCP server `{}` ({}) could not be probed: {why}",
                    st.name, st.transport
                ),
            );
            let _ = writeln!(out, "{d}");
            continue;
        }
        for r in &st.rejected {
            ok = false;
            let d = Diagnostic::error(
                &spec.origin.file,
                at,
                format!(
                    "MCP server `{}`: tool `{}` would not be offered: {}",
                    st.name, r.name, r.reason
                ),
            );
            let _ = writeln!(out, "{d}");
        }
        let _ = writeln!(
            out,
            "MCP server `{}` ({}), protocol {}: {} offered{}{}",
            st.name,
            st.transport,
            st.protocol.as_deref().unwrap_or("?"),
            plural(st.tools.len(), "tool"),
            if st.tools.is_empty() {
                String::new()
            } else {
                format!(": {}", st.tools.join(", "))
            },
            match (st.rejected.len(), st.filtered) {
                (0, 0) => String::new(),
                (r, f) => format!(" ({r} rejected, {f} left out by include/exclude)"),
            }
        );
    }
    let _ = writeln!(
        out,
        "probe of {}: {}",
        plural(statuses.len(), "MCP server"),
        if ok { "ok" } else { "failed" }
    );
    (out, ok)
}

/// How long `check --probe` waits for the servers' first listings: past
/// the longest start one may take (two handshakes, each with its whole
/// `startup_timeout_seconds`, when an older server is started again for
/// `initialize`; then its listing, 20 s at most), so a slow start ends as
/// the session's own success or error, as under `run`, and never as a
/// probe that gave up first.
fn probe_wait(desired: &DesiredState) -> std::time::Duration {
    let longest = desired
        .mcp_servers
        .values()
        .map(|s| s.startup_timeout())
        .max()
        .unwrap_or_default();
    2 * longest + std::time::Duration::from_secs(30)
}
