//! How `neko-sidecar call` knows it talks to the sidecar of its config, and
//! not to another local process that took the admin port first (which
//! would then get the operator's arguments, and could send them anywhere).
//!
//! At start the daemon makes an identity token (128 random bits) and, when
//! `[admin] token_file` is set, writes it there, readable only by the
//! daemon's user (`os::write_private`). `GET /identity?challenge=HEX`
//! answers `{"proof": HEX}`, SHA-256 of `token:challenge`: whoever can read
//! the file (the sidecar's user, root) can check the answer, and a process
//! that cannot read it cannot make one. The token itself never leaves the
//! process but through that file.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::sample::AdminState;

/// A challenge is 16 to 64 random bytes as hex.
const CHALLENGE_HEX: std::ops::RangeInclusive<usize> = 32..=128;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The proof of knowing `token` for `challenge`.
pub(crate) fn proof(token: &str, challenge: &str) -> String {
    let mut h = Sha256::new();
    h.update(token.as_bytes());
    h.update(b":");
    h.update(challenge.as_bytes());
    hex(&h.finalize())
}

/// A fresh challenge; `None` without system randomness.
pub(crate) fn challenge() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex(&bytes))
}

#[derive(Deserialize)]
pub(super) struct Asked {
    challenge: String,
}

/// `GET /identity?challenge=HEX`.
pub(super) async fn answer(
    State(state): State<Arc<AdminState>>,
    Query(asked): Query<Asked>,
) -> Response {
    let c = &asked.challenge;
    if !CHALLENGE_HEX.contains(&c.len()) || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
        return (
            StatusCode::BAD_REQUEST,
            "the challenge must be 32 to 128 hex digits\n",
        )
            .into_response();
    }
    let Some(token) = state.identity_token.as_deref() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "this sidecar has no identity token (the system gave no randomness)\n",
        )
            .into_response();
    };
    axum::Json(serde_json::json!({ "proof": proof(token, c) })).into_response()
}

/// Writes the identity token to `path`; logged when it cannot be.
pub(crate) fn write_token_file(path: &Path, token: Option<&str>) {
    let Some(token) = token else { return };
    match crate::os::write_private(path, format!("{token}\n").as_bytes()) {
        Ok(()) => tracing::debug!(path = %path.display(), "identity token written"),
        Err(e) => tracing::error!(
            path = %path.display(),
            "cannot write the identity token file ([admin] token_file): {e}; `neko-sidecar call` will refuse to call through this sidecar until it can"
        ),
    }
}

/// Removes the token file at stop (a token of a stopped sidecar proves
/// nothing, and the next start writes a new one).
pub(crate) fn remove_token_file(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// Reads the token of `path` (its first line).
pub(crate) fn read_token_file(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().next().unwrap_or("").trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_depends_on_the_token_and_the_challenge() {
        let a = proof("t1", "c1");
        assert_eq!(a.len(), 64);
        assert_eq!(a, proof("t1", "c1"));
        assert_ne!(a, proof("t2", "c1"));
        assert_ne!(a, proof("t1", "c2"));
        let c = challenge().unwrap();
        assert_eq!(c.len(), 64);
        assert_ne!(c, challenge().unwrap());
    }

    #[test]
    fn the_token_file_is_new_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("admin.token");
        // One left by someone else is replaced, not written into.
        std::fs::write(&p, "old").unwrap();
        write_token_file(&p, Some("abc"));
        assert_eq!(read_token_file(&p).unwrap(), "abc");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        remove_token_file(&p);
        assert!(!p.exists());
    }
}
