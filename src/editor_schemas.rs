//! The JSON Schemas of a tool manifest and of the agent config, for editors.
//!
//! Plugin authors write manifests by hand; taplo (and the VS Code extension
//! built on it) validates and completes a TOML file against a JSON Schema
//! named by a `#:schema` comment on its first line. The schemas are files of
//! their own (`schemas/`, shipped in the archives, the Debian package and the
//! N.E.K.O plugin) and embedded here for `neko-sidecar schema`. They are
//! never the judge of a file (the loader is: `check` also looks at PATH, the
//! files a manifest names and each `parameters` schema), and they cannot
//! drift from it: `tests/it/editor_schemas.rs` holds every key the loader
//! allows against the schema's, and every fixture the loader accepts or
//! refuses against the schema's verdict where a schema can give one.

/// The schema of a tool manifest (`[[tool]]`, `[[mcp_server]]`, `[[mcp_import]]`).
pub const MANIFEST: &str = include_str!("../schemas/manifest.schema.json");

/// The schema of the agent config (`--config`).
pub const CONFIG: &str = include_str!("../schemas/agent.schema.json");
