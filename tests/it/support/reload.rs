//! The reloader and the manifest set alone: manifest text whose
//! descriptions tell versions apart, the workspace's manifest directory as
//! a manifest source, and waiting on watch channels with a deadline.

use std::sync::Arc;

use neko_sidecar::desired::DesiredState;
use neko_sidecar::manifest::LoadContext;
use neko_sidecar::reload::{ManifestSet, ManifestSource};
use tokio::sync::watch;

use super::{WAIT, Workspace, http_tool};

pub const SOURCE: &str = "plugin:test";

/// A valid manifest with one http tool per name; `tag` goes into each
/// description so a test can tell versions apart.
pub fn manifest(names: &[&str], tag: &str) -> String {
    names
        .iter()
        .map(|n| {
            http_tool(
                n,
                &format!("{n} {tag}"),
                &format!("http://127.0.0.1:9/{n}"),
                "",
            )
        })
        .collect()
}

/// A manifest whose third line has an error (a timeout main_server refuses).
pub fn broken(name: &str) -> String {
    format!(
        "[[tool]]\nname = \"{name}\"\ntimeout_seconds = 999\ndescription = \"broken\"\nhandler = {{ type = \"http\", url = \"http://127.0.0.1:9/{name}\" }}\n"
    )
}

impl Workspace {
    /// The manifest directory as the reloader reads it.
    pub fn source(&self) -> ManifestSource {
        ManifestSource {
            source: SOURCE.to_string(),
            dirs: vec![self.tools.clone()],
            context: LoadContext::default(),
        }
    }

    /// A set after its first load.
    pub fn loaded_set(&self) -> ManifestSet {
        let mut set = ManifestSet::new(self.source());
        set.rescan(true);
        set
    }
}

/// Tool name → description, the part of a desired state tests compare.
pub fn tools(d: &DesiredState) -> Vec<(String, String)> {
    d.tools
        .values()
        .map(|t| (t.spec.name.clone(), t.spec.description.clone()))
        .collect()
}

pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Waits until the channel's value satisfies `pred`.
pub async fn wait_for<T: std::fmt::Debug>(
    rx: &mut watch::Receiver<Arc<T>>,
    what: &str,
    pred: impl FnMut(&Arc<T>) -> bool,
) -> Arc<T> {
    let waited = tokio::time::timeout(WAIT, rx.wait_for(pred))
        .await
        .map(|r| r.map(|v| Arc::clone(&v)));
    match waited {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => panic!("the channel closed while waiting for {what}"),
        Err(_) => panic!(
            "timed out waiting for {what}; the value is {:#?}",
            rx.borrow()
        ),
    }
}
