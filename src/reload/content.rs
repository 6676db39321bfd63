//! What a manifest's meaning depends on, as bytes: the file itself, the
//! JSON Schema files its tools name with `parameters_file`, and the MCP
//! server lists its `[[mcp_import]]`s name.
//!
//! The periodic rescan compares these hashes to find changed files without
//! trusting file-system events or timestamps (a ConfigMap swap or an `mv`
//! keeps old mtimes). Finding the schema files means parsing the manifest,
//! so the list is remembered with a digest of the bytes it came from
//! ([`SchemaInputs`]): rescanning an unchanged manifest reads and hashes it
//! but parses nothing. This module reads and hashes; it never validates a
//! manifest (a file that is not even TOML simply has no schema inputs).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::config::absolutize;

/// A hash of a manifest's bytes and of every schema file it names.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ContentHash([u8; 32]);

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash(")?;
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// A manifest as read once: the bytes the loader will parse and their hash,
/// so that what is hashed is exactly what is loaded.
#[derive(Debug)]
pub(crate) struct ReadManifest {
    pub bytes: Vec<u8>,
    pub hash: ContentHash,
    /// To pass to the next `read` of the same file.
    pub inputs: SchemaInputs,
}

/// The files (schemas, imported server lists) that a manifest's bytes name,
/// with the digest of those bytes: valid for as long as the manifest's
/// bytes are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SchemaInputs {
    digest: [u8; 32],
    paths: Vec<PathBuf>,
}

impl SchemaInputs {
    /// The files named, to watch beside the manifest directories.
    pub(crate) fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

/// Reads a manifest (following symlinks) and hashes it with its schema files.
/// A schema file that cannot be read hashes as "missing", so its appearance
/// later is a change. `known`, what the previous read of this file found,
/// saves parsing the manifest again when its bytes have not changed.
pub(crate) fn read(path: &Path, known: Option<&SchemaInputs>) -> io::Result<ReadManifest> {
    let bytes = std::fs::read(path)?;
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    let inputs = match known {
        Some(k) if k.digest == digest => k.clone(),
        _ => SchemaInputs {
            digest,
            paths: schema_inputs(path, &String::from_utf8_lossy(&bytes)),
        },
    };
    let mut h = Sha256::new();
    put(&mut h, &bytes);
    for input in &inputs.paths {
        put(&mut h, input.as_os_str().as_encoded_bytes());
        match std::fs::read(input) {
            Ok(schema) => {
                h.update([1]);
                put(&mut h, &schema);
            }
            Err(_) => h.update([0]),
        }
    }
    Ok(ReadManifest {
        bytes,
        hash: ContentHash(h.finalize().into()),
        inputs,
    })
}

/// Length-prefixed, so that moving bytes between two parts changes the hash.
fn put(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The schema files named by `parameters_file` in a manifest's tools and
/// the files named by `path` in its `[[mcp_import]]`s, resolved as the
/// loader resolves them; sorted, without repeats. Text that is not TOML
/// names none.
pub(crate) fn schema_inputs(path: &Path, text: &str) -> Vec<PathBuf> {
    let base = path.parent().unwrap_or(Path::new("."));
    let Ok(doc) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = doc
        .get("tool")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("parameters_file")?.as_str())
        .map(|rel| absolutize(base, rel))
        .chain(
            doc.get("mcp_import")
                .and_then(toml::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| t.get("path")?.as_str())
                .filter_map(|raw| crate::manifest::import::import_path(base, raw).ok()),
        )
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_inputs_resolve_like_the_loader() {
        let text = r#"
[[tool]]
name = "a"
parameters_file = "schemas/a.json"
[[tool]]
name = "b"
parameters_file = "/abs/b.json"
[[tool]]
name = "c"
parameters_file = "schemas/a.json"
[[mcp_import]]
path = "../claude.json"
"#;
        assert_eq!(
            schema_inputs(Path::new("/etc/t/x.toml"), text),
            vec![
                PathBuf::from("/abs/b.json"),
                PathBuf::from("/etc/t/../claude.json"),
                PathBuf::from("/etc/t/schemas/a.json")
            ]
        );
        assert!(schema_inputs(Path::new("/x.toml"), "not [toml").is_empty());
    }

    #[test]
    fn a_schema_change_changes_the_hash_and_nothing_else_does() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path().join("x.toml");
        let s = tmp.path().join("s.json");
        std::fs::write(&m, "[[tool]]\nparameters_file = \"s.json\"\n").unwrap();
        let missing = read(&m, None).unwrap().hash;
        std::fs::write(&s, "{}").unwrap();
        let first = read(&m, None).unwrap().hash;
        assert_ne!(missing, first);
        assert_eq!(read(&m, None).unwrap().hash, first);
        std::fs::write(&s, "{\"type\":\"object\"}").unwrap();
        assert_ne!(read(&m, None).unwrap().hash, first);
    }

    #[test]
    fn remembered_inputs_give_the_same_hash_and_go_stale_with_the_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path().join("x.toml");
        let s = tmp.path().join("s.json");
        let t = tmp.path().join("t.json");
        std::fs::write(&s, "{}").unwrap();
        std::fs::write(&t, "{\"type\":\"object\"}").unwrap();
        std::fs::write(&m, "[[tool]]\nparameters_file = \"s.json\"\n").unwrap();
        let first = read(&m, None).unwrap();
        // Unchanged bytes: the remembered list serves, and a schema edit
        // still shows.
        let again = read(&m, Some(&first.inputs)).unwrap();
        assert_eq!(again.hash, first.hash);
        assert_eq!(again.inputs, first.inputs);
        std::fs::write(&s, "{\"type\":\"object\"}").unwrap();
        let edited = read(&m, Some(&first.inputs)).unwrap();
        assert_ne!(edited.hash, first.hash);
        assert_eq!(edited.hash, read(&m, None).unwrap().hash);
        // New bytes naming another file: the remembered list is not used.
        std::fs::write(&m, "[[tool]]\nparameters_file = \"t.json\"\n").unwrap();
        let moved = read(&m, Some(&first.inputs)).unwrap();
        assert_eq!(moved.inputs.paths, vec![t.clone()]);
        assert_eq!(moved.hash, read(&m, None).unwrap().hash);
    }
}
