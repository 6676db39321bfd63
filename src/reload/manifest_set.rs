//! The manifest set: every manifest file's last good version, and the
//! desired state they make together, kept current by rescans.
//!
//! A rescan lists the manifest directories, re-reads the files whose bytes
//! (or schema files) changed, and accepts or refuses each new version as a
//! whole. A refused version (invalid, or declaring a tool another file
//! already has) leaves the file's last good tools in the desired state; a
//! deleted file drops its tools. This module does file I/O through the
//! loaders but never logs, watches or publishes: it returns what changed and
//! what to report, and the reloader does the rest.
//!
//! Duplicates across files: a tool name belongs to the file that has it in
//! the desired state now. Another file's version that declares it is refused
//! (that file keeps its last good version), so an edit can never move a
//! registered tool to another file by accident, and which file wins does
//! not depend on path order once running. Moving a tool between files works
//! in one reload (both files change together) or in two steps in either
//! order, because files in error are re-read at every rescan. At the first
//! load nobody owns anything yet, so the first file in scan order (the order
//! `check` reports) wins, and the later file is refused as a whole.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::content::{self, ContentHash};
use super::health::{FileHealth, FileReport, ManifestHealth};
use crate::config::AgentConfig;
use crate::desired::{DesiredState, declared_twice, same_spec, same_state, server_declared_twice};
use crate::diag::{Diagnostic, plural};
use crate::manifest::{self, LoadContext, ManifestFile, McpServerSpec, ToolSpec};

/// Where manifests come from and how they are judged: the parts of the
/// agent config that a manifest reload uses.
#[derive(Debug, Clone)]
pub struct ManifestSource {
    /// The registration source tag (part of every fingerprint).
    pub source: String,
    pub dirs: Vec<PathBuf>,
    pub context: LoadContext,
}

impl ManifestSource {
    pub(crate) fn from_config(cfg: &AgentConfig) -> Self {
        Self {
            source: cfg.source.clone(),
            dirs: cfg.manifest_dirs.clone(),
            context: LoadContext {
                allow_remote_handlers: cfg.handlers.allow_remote,
                ..LoadContext::default()
            },
        }
    }
}

/// What one rescan did.
#[derive(Debug, Clone, Default)]
pub struct Rescan {
    /// The desired state was replaced (some tool or spec field changed).
    pub changed: bool,
    /// Problems seen for the first time (or again, on a forced reload): to
    /// log. The same bad content rescanned reports nothing.
    pub problems: Vec<Diagnostic>,
    /// What happened to files, one sentence each: to log at info level.
    pub notes: Vec<String>,
}

/// What the set remembers of one file.
#[derive(Debug)]
struct FileRecord {
    /// Index in `ManifestSource::dirs`, so that the file's tools survive
    /// while its directory cannot be read.
    dir: usize,
    /// Of the latest version read; `None` when it could not be read.
    hash: Option<ContentHash>,
    /// The last good version's tools; empty when there never was one.
    good: Vec<ToolSpec>,
    /// The last good version's MCP servers (a valid manifest declares at
    /// least one tool or one server).
    good_mcp: Vec<McpServerSpec>,
    health: FileHealth,
    diagnostics: Vec<Diagnostic>,
    since: SystemTime,
}

/// A file's new version waiting to be accepted or refused.
struct Candidate {
    path: PathBuf,
    dir: usize,
    hash: Option<ContentHash>,
    loaded: ManifestFile,
}

/// The manifests of one sidecar and the desired state they yield.
#[derive(Debug)]
pub struct ManifestSet {
    source: ManifestSource,
    files: BTreeMap<PathBuf, FileRecord>,
    /// Scan order of the last rescan (directory order, then path).
    order: Vec<PathBuf>,
    directories: Vec<Diagnostic>,
    desired: Arc<DesiredState>,
    rescans: u64,
    /// What the latest read of each listed file found its schema files to
    /// be, so an unchanged file is hashed without being parsed.
    inputs: BTreeMap<PathBuf, content::SchemaInputs>,
}

impl ManifestSet {
    /// An empty set; the first `rescan` loads everything.
    pub fn new(source: ManifestSource) -> Self {
        let desired = Arc::new(DesiredState {
            source: source.source.clone(),
            ..DesiredState::default()
        });
        Self {
            source,
            files: BTreeMap::new(),
            order: Vec::new(),
            directories: Vec::new(),
            desired,
            rescans: 0,
            inputs: BTreeMap::new(),
        }
    }

    pub(crate) fn source(&self) -> &ManifestSource {
        &self.source
    }

    /// The current desired state.
    pub fn desired(&self) -> Arc<DesiredState> {
        Arc::clone(&self.desired)
    }

    pub fn health(&self) -> ManifestHealth {
        let files = self
            .order
            .iter()
            .filter_map(|p| self.files.get(p).map(|r| (p, r)))
            .map(|(path, r)| FileReport {
                path: path.clone(),
                health: r.health,
                since: r.since,
                tools: r.good.iter().map(|t| t.name.clone()).collect(),
                mcp_servers: r.good_mcp.iter().map(|m| m.name.clone()).collect(),
                diagnostics: r.diagnostics.clone(),
            })
            .collect();
        ManifestHealth {
            files,
            directories: self.directories.clone(),
            tools: self.desired.len(),
            rescans: self.rescans,
        }
    }

    /// Re-reads the directories and applies every changed file. `force`
    /// re-reads every file even when its bytes are unchanged (SIGHUP), and
    /// reports standing problems again.
    pub fn rescan(&mut self, force: bool) -> Rescan {
        let now = SystemTime::now();
        let mut out = Rescan::default();
        self.rescans += 1;

        let (listed, unreadable, directories) = self.list();
        for d in &directories {
            if force || !self.directories.contains(d) {
                out.problems.push(d.clone());
            }
        }
        self.directories = directories;

        // Files gone from a readable directory drop their tools.
        let gone: Vec<PathBuf> = self
            .files
            .iter()
            .filter(|(p, r)| !unreadable.contains(&r.dir) && !listed.iter().any(|(l, _)| l == *p))
            .map(|(p, _)| p.clone())
            .collect();
        let removed = !gone.is_empty();
        for path in gone {
            if let Some(r) = self.files.remove(&path) {
                out.notes.push(match r.good.len() {
                    0 => format!("{}: removed", path.display()),
                    _ => format!(
                        "{}: removed; its tools are dropped: {}",
                        path.display(),
                        names(&r.good)
                    ),
                });
            }
        }

        // Retained files of unreadable directories keep their place.
        let mut order: Vec<PathBuf> = Vec::new();
        for (i, _) in self.source.dirs.iter().enumerate() {
            if unreadable.contains(&i) {
                order.extend(
                    self.files
                        .iter()
                        .filter(|(_, r)| r.dir == i)
                        .map(|(p, _)| p.clone()),
                );
            } else {
                order.extend(
                    listed
                        .iter()
                        .filter(|(_, d)| *d == i)
                        .map(|(p, _)| p.clone()),
                );
            }
        }

        self.inputs
            .retain(|p, _| listed.iter().any(|(l, _)| l == p));
        let candidates: Vec<Candidate> = listed
            .into_iter()
            .filter_map(|(path, dir)| self.read_if_changed(path, dir, force))
            .collect();
        // The desired state is made of the files' good tools in scan order:
        // with no file re-read or gone and the same order, it is the same,
        // and the periodic rescan of an idle daemon stops here.
        let same_files = candidates.is_empty() && !removed && self.order == order;
        self.order = order;
        if same_files {
            return out;
        }
        self.apply(candidates, force, now, &mut out);

        let next = self.assemble();
        if !same_state(&self.desired, &next) {
            self.desired = Arc::new(next);
            out.changed = true;
        }
        out
    }

    /// Every listed manifest (scan order, first directory wins a path listed
    /// twice), the directories that could not be read, and directory
    /// diagnostics.
    fn list(&self) -> (Vec<(PathBuf, usize)>, BTreeSet<usize>, Vec<Diagnostic>) {
        let mut listed: Vec<(PathBuf, usize)> = Vec::new();
        let mut unreadable = BTreeSet::new();
        let mut diags = Vec::new();
        for (i, dir) in self.source.dirs.iter().enumerate() {
            let (paths, d) = manifest::scan::manifest_files(std::slice::from_ref(dir));
            if d.iter().any(Diagnostic::is_error) {
                unreadable.insert(i);
            }
            diags.extend(d);
            for p in paths {
                if !listed.iter().any(|(l, _)| *l == p) {
                    listed.push((p, i));
                }
            }
        }
        (listed, unreadable, diags)
    }

    /// The file's new version, unless its bytes are those of a version
    /// already accepted. Files in error are always re-read: their validity
    /// can depend on the outside world (an exec handler's program appearing
    /// in PATH, a handler's working directory being created).
    fn read_if_changed(&mut self, path: PathBuf, dir: usize, force: bool) -> Option<Candidate> {
        match content::read(&path, self.inputs.get(&path)) {
            Ok(read) => {
                self.inputs.insert(path.clone(), read.inputs);
                let record = self.files.get(&path);
                let unchanged =
                    record.is_some_and(|r| r.hash == Some(read.hash) && r.health == FileHealth::Ok);
                if unchanged && !force {
                    return None;
                }
                let loaded = match String::from_utf8(read.bytes) {
                    Ok(text) => manifest::parse_manifest(&path, &text, &self.source.context),
                    // The loader locates the bad byte; let it read the file.
                    Err(_) => manifest::load_file(&path, &self.source.context),
                };
                Some(Candidate {
                    path,
                    dir,
                    hash: Some(read.hash),
                    loaded,
                })
            }
            // Listed, then gone: a delete (and maybe re-create) in
            // progress, whose event brings another rescan. Nothing to say
            // about it yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            // Unreadable (permissions, I/O): an error; the last good
            // version stays in use.
            Err(e) => {
                let why = Diagnostic::error(&path, None, format!("cannot read the manifest: {e}"));
                let loaded = ManifestFile::failed(&path, why);
                Some(Candidate {
                    path,
                    dir,
                    hash: None,
                    loaded,
                })
            }
        }
    }

    /// Accepts the valid candidates that conflict with no other file,
    /// repeating while acceptances free names, and refuses the rest.
    fn apply(
        &mut self,
        candidates: Vec<Candidate>,
        force: bool,
        now: SystemTime,
        out: &mut Rescan,
    ) {
        let mut pending: Vec<Candidate> = Vec::new();
        for c in candidates {
            if c.loaded.has_errors() {
                let diags = c.loaded.diagnostics.clone();
                self.refuse(c, diags, force, now, out);
            } else {
                pending.push(c);
            }
        }
        loop {
            let before = pending.len();
            let mut still = Vec::new();
            for c in pending {
                if self.conflicts(&c).is_empty() {
                    self.accept(c, force, now, out);
                } else {
                    still.push(c);
                }
            }
            pending = still;
            if pending.len() == before {
                break;
            }
        }
        for c in pending {
            let mut diags = self.conflicts(&c);
            diags.extend(c.loaded.diagnostics.iter().cloned());
            self.refuse(c, diags, force, now, out);
        }
    }

    /// Why a valid candidate cannot be accepted now: a name declared twice
    /// in it, or owned by another file's current tools.
    fn conflicts(&self, c: &Candidate) -> Vec<Diagnostic> {
        let mut diags = Vec::new();
        for (i, spec) in c.loaded.tools.iter().enumerate() {
            if let Some(first) = c.loaded.tools[..i].iter().find(|t| t.name == spec.name) {
                diags.push(declared_twice(spec, first));
                continue;
            }
            let owner = self
                .files
                .iter()
                .filter(|(p, _)| **p != c.path)
                .find_map(|(_, r)| r.good.iter().find(|t| t.name == spec.name));
            if let Some(owner) = owner {
                diags.push(Diagnostic::error(
                    &c.path,
                    Some(spec.origin.position()),
                    format!(
                        "tool `{}` is already declared at {}, which keeps it; tool names must be unique within one sidecar",
                        spec.name, owner.origin
                    ),
                ));
            }
        }
        for (i, spec) in c.loaded.mcp_servers.iter().enumerate() {
            if let Some(first) = c.loaded.mcp_servers[..i]
                .iter()
                .find(|m| m.name == spec.name)
            {
                diags.push(server_declared_twice(spec, first));
                continue;
            }
            let owner = self
                .files
                .iter()
                .filter(|(p, _)| **p != c.path)
                .find_map(|(_, r)| r.good_mcp.iter().find(|m| m.name == spec.name));
            if let Some(owner) = owner {
                diags.push(Diagnostic::error(
                    &c.path,
                    Some(spec.origin.position()),
                    format!(
                        "MCP server `{}` is already declared at {}, which keeps it; MCP server names must be unique within one sidecar",
                        spec.name, owner.origin
                    ),
                ));
            }
        }
        diags
    }

    fn accept(&mut self, c: Candidate, force: bool, now: SystemTime, out: &mut Rescan) {
        let warnings = c.loaded.diagnostics;
        let tools = c.loaded.tools;
        let good_mcp = c.loaded.mcp_servers;
        let path = c.path;
        let previous = self.files.get(&path);
        let change = match previous {
            None => Some("loaded"),
            Some(r) if r.health == FileHealth::Error => Some("fixed; now in use with"),
            Some(r) if r.hash != c.hash => Some("reloaded,"),
            Some(_) => None,
        };
        if let Some(change) = change {
            let what = format!(
                "{}: {change} {}",
                path.display(),
                contents(&tools, &good_mcp)
            );
            out.notes.push(what);
        }
        if force || previous.is_none_or(|r| r.diagnostics != warnings) {
            out.problems.extend(warnings.iter().cloned());
        }
        let since = match previous {
            Some(r) if r.health == FileHealth::Ok => r.since,
            _ => now,
        };
        self.files.insert(
            path,
            FileRecord {
                dir: c.dir,
                hash: c.hash,
                good: tools,
                good_mcp,
                health: FileHealth::Ok,
                diagnostics: warnings,
                since,
            },
        );
    }

    fn refuse(
        &mut self,
        c: Candidate,
        diags: Vec<Diagnostic>,
        force: bool,
        now: SystemTime,
        out: &mut Rescan,
    ) {
        let previous = self.files.remove(&c.path);
        let fresh = previous
            .as_ref()
            .is_none_or(|r| r.health == FileHealth::Ok || r.diagnostics != diags);
        if fresh || force {
            out.problems.extend(diags.iter().cloned());
        }
        let (good, good_mcp, since) = match previous {
            Some(r) if !fresh => (r.good, r.good_mcp, r.since),
            Some(r) => (r.good, r.good_mcp, now),
            None => (Vec::new(), Vec::new(), now),
        };
        if fresh {
            out.notes.push(if good.is_empty() && good_mcp.is_empty() {
                format!(
                    "{}: not used until its errors are fixed (it has no earlier good version)",
                    c.path.display()
                )
            } else {
                format!(
                    "{}: this version is not used; the last good version stays in use with {}",
                    c.path.display(),
                    contents(&good, &good_mcp)
                )
            });
        }
        self.files.insert(
            c.path,
            FileRecord {
                dir: c.dir,
                hash: c.hash,
                good,
                good_mcp,
                health: FileHealth::Error,
                diagnostics: diags,
                since,
            },
        );
    }

    /// The desired state of the files' current tools. Unchanged tools keep
    /// their `Arc<ToolSpec>`, so consumers can tell them apart cheaply.
    fn assemble(&self) -> DesiredState {
        let files: Vec<ManifestFile> = self
            .order
            .iter()
            .filter_map(|p| self.files.get(p).map(|r| (p, r)))
            .map(|(path, r)| ManifestFile {
                path: path.clone(),
                tools: r.good.clone(),
                mcp_servers: r.good_mcp.clone(),
                diagnostics: Vec::new(),
            })
            .collect();
        // Conflicts were refused above, so assembly finds no duplicate.
        let (mut next, _) = DesiredState::assemble(&self.source.source, &files);
        for (name, tool) in next.tools.iter_mut() {
            if let Some(old) = self.desired.tools.get(name) {
                if old.fingerprint == tool.fingerprint && same_spec(&old.spec, &tool.spec) {
                    *tool = old.clone();
                }
            }
        }
        for (name, server) in next.mcp_servers.iter_mut() {
            if let Some(old) = self.desired.mcp_servers.get(name) {
                if old == server {
                    *server = Arc::clone(old);
                }
            }
        }
        next
    }
}

/// "2 tools: a, b" and/or "MCP server files", for the file notes.
fn contents(tools: &[ToolSpec], servers: &[McpServerSpec]) -> String {
    let mut parts = Vec::new();
    if !tools.is_empty() || servers.is_empty() {
        parts.push(format!("{}: {}", plural(tools.len(), "tool"), names(tools)));
    }
    if !servers.is_empty() {
        let list: Vec<&str> = servers.iter().map(|m| m.name.as_str()).collect();
        parts.push(format!(
            "{}: {}",
            plural(servers.len(), "MCP server"),
            list.join(", ")
        ));
    }
    parts.join("; ")
}

fn names(tools: &[ToolSpec]) -> String {
    tools
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
