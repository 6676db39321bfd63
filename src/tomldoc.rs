//! Reading a spanned TOML document while collecting every problem.
//!
//! serde stops at the first error; `check` must report all of them with their
//! line and column. So config and manifests are parsed into toml's spanned
//! document tree (`DeTable`, the raw stage), and this module walks it with
//! typed accessors that push a located diagnostic for every wrong type or
//! unknown key and keep going. It never decides what a value means; the
//! config and manifest modules do.

use std::ops::Range;
use std::time::Duration;

use serde_json::{Map as JsonMap, Number, Value as Json};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::diag::{Diagnostic, SourceText};
use crate::duration;

/// A string with the span it came from.
pub(crate) type SpannedString = (String, Range<usize>);

/// A TOML value with its span.
pub(crate) type Item<'i> = Spanned<DeValue<'i>>;

/// The article-prefixed type name of a value, for messages ("a string").
pub(crate) fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Parses a TOML document, turning a syntax error into a located diagnostic.
pub(crate) fn parse<'i>(src: &SourceText<'i>) -> Result<Spanned<DeTable<'i>>, Diagnostic> {
    DeTable::parse(src.text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        // toml's message is multi-line with its own excerpt; keep the first
        // line, since we print our own location.
        let msg = e.message().lines().next().unwrap_or("invalid TOML").trim();
        src.error(&span, format!("invalid TOML: {msg}"))
    })
}

/// Typed access to one TOML table, recording a diagnostic for each problem.
pub(crate) struct TableReader<'a, 'i> {
    pub src: &'a SourceText<'a>,
    pub table: &'a DeTable<'i>,
    /// Where the table starts, for "missing key" errors.
    pub span: Range<usize>,
    /// How messages name this table, e.g. "[main_server]" or "tool `weather`".
    pub what: String,
    pub diags: &'a mut Vec<Diagnostic>,
}

impl<'a, 'i> TableReader<'a, 'i> {
    pub(crate) fn new(
        src: &'a SourceText<'a>,
        table: &'a DeTable<'i>,
        span: Range<usize>,
        what: impl Into<String>,
        diags: &'a mut Vec<Diagnostic>,
    ) -> Self {
        Self {
            src,
            table,
            span,
            what: what.into(),
            diags,
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a Item<'i>> {
        let table: &'a DeTable<'i> = self.table;
        table
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(_, v)| v)
    }

    pub(crate) fn error(&mut self, span: &Range<usize>, message: impl Into<String>) {
        let d = self.src.error(span, message);
        self.diags.push(d);
    }

    pub(crate) fn warning(&mut self, span: &Range<usize>, message: impl Into<String>) {
        let d = self.src.warning(span, message);
        self.diags.push(d);
    }

    fn wrong_type(&mut self, key: &str, item: &Item<'_>, expected: &str) {
        let found = type_name(item.get_ref());
        let msg = format!("`{key}` in {} must be {expected}, found {found}", self.what);
        self.error(&item.span(), msg);
    }

    /// Reports a missing required key at the start of the table.
    pub(crate) fn missing(&mut self, key: &str, hint: &str) {
        let msg = format!("{} is missing the required key `{key}`: {hint}", self.what);
        let span = self.span.clone();
        self.error(&span, msg);
    }

    pub(crate) fn string(&mut self, key: &str) -> Option<(String, Range<usize>)> {
        let item = self.get(key)?;
        match item.get_ref() {
            DeValue::String(s) => Some((s.to_string(), item.span())),
            _ => {
                self.wrong_type(key, item, "a string");
                None
            }
        }
    }

    pub(crate) fn boolean(&mut self, key: &str) -> Option<(bool, Range<usize>)> {
        let item = self.get(key)?;
        match item.get_ref() {
            DeValue::Boolean(b) => Some((*b, item.span())),
            _ => {
                self.wrong_type(key, item, "a boolean (true or false)");
                None
            }
        }
    }

    pub(crate) fn integer(&mut self, key: &str) -> Option<(i64, Range<usize>)> {
        let item = self.get(key)?;
        match item.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some((n, item.span())),
                Err(_) => {
                    let msg = format!("`{key}` in {} is out of range", self.what);
                    self.error(&item.span(), msg);
                    None
                }
            },
            _ => {
                self.wrong_type(key, item, "an integer");
                None
            }
        }
    }

    /// An integer or a float, as f64.
    pub(crate) fn number(&mut self, key: &str) -> Option<(f64, Range<usize>)> {
        let item = self.get(key)?;
        match number_of(item.get_ref()) {
            Some(n) if n.is_finite() => Some((n, item.span())),
            Some(_) => {
                let msg = format!("`{key}` in {} must be a finite number", self.what);
                self.error(&item.span(), msg);
                None
            }
            None => {
                self.wrong_type(key, item, "a number");
                None
            }
        }
    }

    pub(crate) fn table(&mut self, key: &str) -> Option<(&'a DeTable<'i>, Range<usize>)> {
        let item = self.get(key)?;
        match item.get_ref() {
            DeValue::Table(t) => Some((t, item.span())),
            _ => {
                self.wrong_type(key, item, "a table");
                None
            }
        }
    }

    /// An array of strings; reports each non-string element.
    pub(crate) fn string_array(&mut self, key: &str) -> Option<(Vec<SpannedString>, Range<usize>)> {
        let item = self.get(key)?;
        let DeValue::Array(arr) = item.get_ref() else {
            self.wrong_type(key, item, "an array of strings");
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (i, el) in arr.iter().enumerate() {
            match el.get_ref() {
                DeValue::String(s) => out.push((s.to_string(), el.span())),
                other => {
                    ok = false;
                    let msg = format!(
                        "element {} of `{key}` in {} must be a string, found {}",
                        i + 1,
                        self.what,
                        type_name(other)
                    );
                    self.error(&el.span(), msg);
                }
            }
        }
        ok.then_some((out, item.span()))
    }

    /// A duration string such as "2s".
    pub(crate) fn duration(&mut self, key: &str) -> Option<(Duration, Range<usize>)> {
        let item = self.get(key)?;
        let DeValue::String(s) = item.get_ref() else {
            let msg = format!(
                "`{key}` in {} must be a duration string, found {}: write {}",
                self.what,
                type_name(item.get_ref()),
                duration::ALLOWED
            );
            self.error(&item.span(), msg);
            return None;
        };
        match duration::parse(s) {
            Ok(d) => Some((d, item.span())),
            Err(e) => {
                let msg = format!("`{key}` in {}: {e}", self.what);
                self.error(&item.span(), msg);
                None
            }
        }
    }

    /// Reports every key not in `known`, suggesting the closest known key.
    pub(crate) fn deny_unknown(&mut self, known: &[&str]) {
        let table: &'a DeTable<'i> = self.table;
        for (k, _) in table.iter() {
            let key = k.get_ref().as_ref();
            if known.contains(&key) {
                continue;
            }
            let msg = format!(
                "unknown key `{key}` in {}{}; allowed keys: {}",
                self.what,
                suggest(key, known)
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default(),
                known.join(", ")
            );
            self.error(&k.span(), msg);
        }
    }
}

pub(crate) fn number_of(v: &DeValue<'_>) -> Option<f64> {
    match v {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .map(|n| n as f64),
        DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
        _ => None,
    }
}

/// The closest known word to `word`, when it is close enough to be a typo.
pub(crate) fn suggest<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    // A shortened key ("timeout" for "timeout_seconds") is a typo too.
    if word.len() >= 4 {
        if let Some(k) = known.iter().find(|k| k.starts_with(word)) {
            return Some(k);
        }
    }
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(word, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3) && *d < k.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Converts a TOML value to JSON, for inline JSON Schemas. Datetimes and
/// non-finite floats have no JSON form: each is reported and the conversion
/// fails.
pub(crate) fn to_json(
    src: &SourceText<'_>,
    item: &Item<'_>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Json> {
    match item.get_ref() {
        DeValue::String(s) => Some(Json::String(s.to_string())),
        DeValue::Boolean(b) => Some(Json::Bool(*b)),
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Some(Json::Number(n.into())),
            Err(_) => {
                diags.push(src.error(&item.span(), "integer out of range"));
                None
            }
        },
        DeValue::Float(f) => match f.as_str().parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Some(Json::Number(n)),
            None => {
                diags.push(src.error(
                    &item.span(),
                    "JSON has no infinity or NaN: use a finite number",
                ));
                None
            }
        },
        DeValue::Datetime(_) => {
            diags.push(src.error(
                &item.span(),
                "a TOML datetime has no JSON form: write it as a string",
            ));
            None
        }
        DeValue::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            let mut ok = true;
            for el in a.iter() {
                match to_json(src, el, diags) {
                    Some(v) => out.push(v),
                    None => ok = false,
                }
            }
            ok.then_some(Json::Array(out))
        }
        DeValue::Table(t) => {
            let mut out = JsonMap::new();
            let mut ok = true;
            for (k, v) in t.iter() {
                match to_json(src, v, diags) {
                    Some(j) => {
                        out.insert(k.get_ref().to_string(), j);
                    }
                    None => ok = false,
                }
            }
            ok.then_some(Json::Object(out))
        }
    }
}

/// The span of the value at a JSON pointer inside a TOML value, so schema
/// errors in an inline `parameters` table point at the right line.
/// Falls back to the nearest enclosing value that exists.
pub(crate) fn span_at_pointer(item: &Item<'_>, pointer: &str) -> Range<usize> {
    let mut cur = item;
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        let next = match cur.get_ref() {
            DeValue::Table(t) => t
                .iter()
                .find(|(k, _)| k.get_ref().as_ref() == seg)
                .map(|(_, v)| v),
            DeValue::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => break,
        }
    }
    cur.span()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn suggests_close_keys_only() {
        let known = ["name", "description", "parameters", "timeout_seconds"];
        assert_eq!(suggest("nmae", &known), Some("name"));
        assert_eq!(suggest("timeout", &known), Some("timeout_seconds"));
        assert_eq!(suggest("nam", &known), Some("name"));
        assert_eq!(suggest("timeout_second", &known), Some("timeout_seconds"));
        assert_eq!(suggest("paramters", &known), Some("parameters"));
        assert_eq!(suggest("zzz", &known), None);
    }

    #[test]
    fn reader_reports_every_problem_with_location() {
        let text = "a = 1\nb = \"x\"\nnaem = true\n";
        let path = Path::new("t.toml");
        let src = SourceText::new(path, text);
        let doc = parse(&src).unwrap();
        let mut diags = Vec::new();
        let mut r = TableReader::new(&src, doc.get_ref(), doc.span(), "the file", &mut diags);
        assert!(r.string("a").is_none());
        assert_eq!(r.integer("b"), None);
        r.deny_unknown(&["a", "b", "name"]);
        let lines: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            lines,
            [
                "t.toml:1:5: error: `a` in the file must be a string, found an integer",
                "t.toml:2:5: error: `b` in the file must be an integer, found a string",
                "t.toml:3:1: error: unknown key `naem` in the file (did you mean `name`?); allowed keys: a, b, name",
            ]
        );
    }

    #[test]
    fn pointer_spans_find_nested_values() {
        let text = "[p]\ntype = \"object\"\n[p.properties.city]\ntype = 3\n";
        let src = SourceText::new(Path::new("t.toml"), text);
        let doc = parse(&src).unwrap();
        let p = doc.get_ref().iter().next().unwrap().1;
        let span = span_at_pointer(p, "/properties/city/type");
        assert_eq!(src.position(&span).line, 4);
        // A pointer past what exists falls back to the deepest existing value.
        let span = span_at_pointer(p, "/properties/city/nope");
        assert_eq!(src.position(&span).line, 3);
    }
}
