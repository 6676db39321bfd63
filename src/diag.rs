//! Diagnostics: located, human-readable problems found in config or manifests.
//!
//! Loaders never stop at the first problem; they push every one they find here
//! and the caller decides what to do (`check` prints them all, `run` refuses a
//! file with errors and keeps its last good version). This module only formats
//! and collects; it never reads files.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// How bad a problem is. Errors make a file (or the config) unusable;
/// warnings are printed but change nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// A 1-based line and column in a text file. Columns count characters, not
/// bytes, so that editors land on the right spot in non-ASCII files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub line: usize,
    pub col: usize,
}

/// One problem, with where it is and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub path: PathBuf,
    /// `None` when the problem is about the file as a whole (unreadable,
    /// missing) rather than a place in it.
    pub position: Option<Position>,
    pub severity: Severity,
    pub message: String,
    /// Where to sort this diagnostic among another file's: a schema file's
    /// problems sort at the `parameters_file` key that named it.
    pub anchor: Option<Position>,
}

impl Diagnostic {
    pub(crate) fn error(
        path: &Path,
        position: Option<Position>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            path: path.to_path_buf(),
            position,
            severity: Severity::Error,
            message: message.into(),
            anchor: None,
        }
    }

    pub(crate) fn warning(
        path: &Path,
        position: Option<Position>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(path, position, message)
        }
    }

    /// Sort this (another file's) diagnostic at `anchor`.
    pub(crate) fn anchored(mut self, anchor: Position) -> Self {
        self.anchor = Some(anchor);
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Logs it at its severity.
    pub(crate) fn log(&self) {
        match self.severity {
            Severity::Error => tracing::error!("{self}"),
            Severity::Warning => tracing::warn!("{self}"),
        }
    }
}

impl fmt::Display for Diagnostic {
    /// `PATH:LINE:COL: error: MESSAGE`, the format compilers use, so editors
    /// and CI annotators can jump to the place.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some(p) => write!(f, "{}:{}:{}: ", self.path.display(), p.line, p.col)?,
            None => write!(f, "{}: ", self.path.display())?,
        }
        write!(f, "{}: {}", self.severity, self.message)
    }
}

/// Maps byte offsets of one text to line/column positions.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    /// Byte offset at which each line starts.
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { starts }
    }

    /// The position of a byte offset in `text` (the same text given to `new`).
    pub(crate) fn position(&self, text: &str, offset: usize) -> Position {
        let offset = offset.min(text.len());
        let line = match self.starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.starts[line];
        // Offsets from the parser are char boundaries; guard anyway so a bad
        // span can never panic the loader.
        let col = text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count())
            + 1;
        Position {
            line: line + 1,
            col,
        }
    }
}

/// A text being diagnosed: its path, its contents and a line index, so that
/// spans turn into `PATH:LINE:COL` in one call.
#[derive(Debug)]
pub(crate) struct SourceText<'a> {
    pub path: &'a Path,
    pub text: &'a str,
    index: LineIndex,
}

impl<'a> SourceText<'a> {
    pub(crate) fn new(path: &'a Path, text: &'a str) -> Self {
        Self {
            path,
            text,
            index: LineIndex::new(text),
        }
    }

    pub(crate) fn position(&self, span: &Range<usize>) -> Position {
        self.index.position(self.text, span.start)
    }

    pub(crate) fn error(&self, span: &Range<usize>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(self.path, Some(self.position(span)), message)
    }

    pub(crate) fn warning(&self, span: &Range<usize>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::warning(self.path, Some(self.position(span)), message)
    }
}

/// Reads a text file that must be UTF-8; `what` names it in messages
/// ("the manifest", "the agent config"). A bad byte is located by line and
/// column like any other problem.
pub(crate) fn read_utf8(path: &Path, what: &str) -> Result<String, Diagnostic> {
    let bytes = std::fs::read(path)
        .map_err(|e| Diagnostic::error(path, None, format!("cannot read {what}: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let prefix = std::str::from_utf8(&bytes[..at]).unwrap_or("");
        let pos = LineIndex::new(prefix).position(prefix, at);
        Diagnostic::error(
            path,
            Some(pos),
            format!(
                "{what} is not valid UTF-8 (byte 0x{:02x}): TOML files must be UTF-8",
                bytes.get(at).copied().unwrap_or(0)
            ),
        )
    })
}

/// Counts of a diagnostic list, for summaries.
pub(crate) fn count(diags: &[Diagnostic]) -> (usize, usize) {
    let errors = diags.iter().filter(|d| d.is_error()).count();
    (errors, diags.len() - errors)
}

/// "2 errors", "1 warning": plural-aware counts for summaries.
pub(crate) fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// An error and each of its causes, joined by ": ", leaving out a cause
/// whose text is already there: reqwest's own message ("error sending
/// request") does not say what happened, its causes do.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// The innermost cause, which names what the OS said ("Connection refused").
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let text = "a = 1\nname = \"東京x\"\n";
        let idx = LineIndex::new(text);
        assert_eq!(idx.position(text, 0), Position { line: 1, col: 1 });
        let x = text.find('x').unwrap();
        // `name = "` is 8 chars, then 2 CJK chars: x is the 11th character.
        assert_eq!(idx.position(text, x), Position { line: 2, col: 11 });
    }

    #[test]
    fn display_uses_compiler_format() {
        let d = Diagnostic::error(
            Path::new("t.toml"),
            Some(Position { line: 3, col: 7 }),
            "bad",
        );
        assert_eq!(d.to_string(), "t.toml:3:7: error: bad");
        let w = Diagnostic::warning(Path::new("t.toml"), None, "meh");
        assert_eq!(w.to_string(), "t.toml: warning: meh");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn an_error_is_shown_with_its_causes() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(with_causes(&e), "outer: inner");
        assert_eq!(root_cause(&e), "inner");
    }
}
