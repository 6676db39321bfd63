//! The sign-ins kept across restarts: one JSON file, `oauth.json`, in the
//! sidecar's state directory (`os::state_dir`), readable by its owner only
//! and replaced atomically at every change (`os::write_private`), so a
//! crash loses nothing and a reader never sees half a file.
//!
//! Each server's entry is bound to the server's URL and to the issuer it
//! signed in with: a manifest that points the name at another server, or a
//! server that moved to another authorization server, does not get the old
//! tokens. Nothing of this file is ever shown; `auth list` shows states
//! and expiries only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::discovery::ServerMetadata;

/// The file's name in the state directory.
pub(crate) const FILE_NAME: &str = "oauth.json";

/// A client the authorization server knows us by.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Client {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The redirect it was registered with: another one (the admin
    /// listener moved) needs another registration.
    pub redirect_uri: String,
    /// Made by dynamic registration (RFC 7591), not configured.
    pub registered: bool,
}

/// What a sign-in gave.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds; `None`: the server did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// One server's entry.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The server's URL (as the manifest gives it): the entry is for it only.
    pub server_url: String,
    /// The resource the tokens are for (RFC 8707).
    pub resource: String,
    pub metadata: ServerMetadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Client>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
}

impl Entry {
    /// Every secret of the entry, to keep out of every text shown.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(c) = &self.client
            && let Some(s) = &c.client_secret
        {
            out.push(s.clone());
        }
        if let Some(t) = &self.tokens {
            out.push(t.access_token.clone());
            out.extend(t.refresh_token.clone());
        }
        out
    }
}

#[derive(Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    servers: BTreeMap<String, Entry>,
}

/// The file, read once and written through.
pub(crate) struct Store {
    path: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, Entry>>,
    /// One write at a time, each of the map as it is then: the last
    /// write is of the last change.
    writing: tokio::sync::Mutex<()>,
}

impl Store {
    /// The store in the state directory, read now (a missing file is
    /// empty; an unreadable one is logged and treated as empty, never
    /// overwritten until a sign-in writes it anew).
    pub(crate) fn open() -> Self {
        match crate::os::state_dir() {
            Ok(dir) => Self::at(dir.join(FILE_NAME)),
            Err(why) => {
                tracing::warn!("sign-ins are kept in memory only: {why}");
                Self {
                    path: None,
                    entries: Mutex::default(),
                    writing: tokio::sync::Mutex::new(()),
                }
            }
        }
    }

    pub(crate) fn at(path: PathBuf) -> Self {
        let entries = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<File>(&bytes) {
                Ok(f) => f.servers,
                Err(e) => {
                    tracing::error!(
                        file = %path.display(),
                        "the sign-ins file cannot be read ({e}): every OAuth server needs a new sign-in"
                    );
                    BTreeMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::error!(file = %path.display(), "the sign-ins file cannot be read ({e})");
                BTreeMap::new()
            }
        };
        for e in entries.values() {
            crate::logging::keep_out(&e.secrets());
        }
        Self {
            path: Some(path),
            entries: Mutex::new(entries),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<Entry> {
        self.lock().get(name).cloned()
    }

    pub(crate) fn all(&self) -> BTreeMap<String, Entry> {
        self.lock().clone()
    }

    /// Sets (or, with `None`, removes) `name`'s entry and writes the file
    /// (on the blocking pool: it is flushed to disk).
    pub(crate) async fn put(&self, name: &str, entry: Option<Entry>) -> Result<(), String> {
        let _one = self.writing.lock().await;
        let bytes = {
            let mut all = self.lock();
            match entry {
                Some(e) => {
                    crate::logging::keep_out(&e.secrets());
                    all.insert(name.to_string(), e);
                }
                None => {
                    all.remove(name);
                }
            }
            let file = File {
                servers: all.clone(),
            };
            serde_json::to_vec_pretty(&file).map_err(|e| e.to_string())?
        };
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        let shown = path.display().to_string();
        tokio::task::spawn_blocking(move || crate::os::write_private(&path, &bytes))
            .await
            .map_err(|e| format!("cannot write the sign-ins file {shown}: {e}"))?
            .map_err(|e| format!("cannot write the sign-ins file {shown}: {e}"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
