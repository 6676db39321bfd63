//! A located value tree, the one shape both imported formats are read in:
//! JSON with comments and trailing commas (Claude Desktop, Cursor and VS
//! Code write JSONC), and TOML (N.E.K.O's `plugin.toml`), each value with
//! the byte span it came from, so every problem is reported at its line
//! and column.
//!
//! The JSON reader is written here rather than taken from serde_json,
//! which gives no spans for values and refuses the comments VS Code puts in
//! `.vscode/mcp.json`. It only parses; what the values mean is `entry`'s.
//! It is public for the fuzz target `jsonc` alone, which holds it to
//! serde_json's reading of every strict JSON text (fuzz/README.md).

use std::ops::Range;

use toml::de::DeValue;

/// One value and where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub span: Range<usize>,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Node>),
    /// Keys in file order, each with its own span.
    Object(Vec<(String, Range<usize>, Node)>),
}

impl Node {
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Object(entries) => entries.iter().find(|(k, _, _)| k == key).map(|e| &e.2),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// "a string", "an object"...: for "must be X, found Y" messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }

    /// A TOML value as a node; TOML's dates (which no MCP setting holds)
    /// become their text.
    pub(crate) fn from_toml(v: &DeValue<'_>, span: Range<usize>) -> Node {
        let value = match v {
            DeValue::String(s) => Value::String(s.to_string()),
            DeValue::Integer(_) | DeValue::Float(_) => {
                Value::Number(crate::tomldoc::number_of(v).unwrap_or(f64::NAN))
            }
            DeValue::Boolean(b) => Value::Bool(*b),
            DeValue::Datetime(d) => Value::String(d.to_string()),
            DeValue::Array(a) => Value::Array(
                a.iter()
                    .map(|el| Node::from_toml(el.get_ref(), el.span()))
                    .collect(),
            ),
            DeValue::Table(t) => Value::Object(
                t.iter()
                    .map(|(k, el)| {
                        (
                            k.get_ref().to_string(),
                            k.span(),
                            Node::from_toml(el.get_ref(), el.span()),
                        )
                    })
                    .collect(),
            ),
        };
        Node { span, value }
    }
}

/// Why a text is not JSON, and at which byte.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonError {
    pub at: usize,
    pub message: String,
}

/// Parses JSON as editors of MCP configs write it: `//` and `/* */`
/// comments and trailing commas are allowed (JSONC), nothing else is.
pub fn parse_jsonc(text: &str) -> Result<Node, JsonError> {
    let mut p = Parser { text, pos: 0 };
    let node = p.value(0)?;
    p.skip_blank()?;
    if p.pos < text.len() {
        return Err(p.error("text after the end of the JSON value"));
    }
    Ok(node)
}

/// Deeper than any config; a guard so a hostile file cannot overflow the
/// stack.
const MAX_DEPTH: usize = 128;

struct Parser<'t> {
    text: &'t str,
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> JsonError {
        JsonError {
            at: self.pos,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// Skips white space and comments.
    fn skip_blank(&mut self) -> Result<(), JsonError> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'/') => match self.text.as_bytes().get(self.pos + 1) {
                    Some(b'/') => {
                        let end = self.text[self.pos..]
                            .find('\n')
                            .map_or(self.text.len(), |i| self.pos + i);
                        self.pos = end;
                    }
                    Some(b'*') => match self.text[self.pos + 2..].find("*/") {
                        Some(i) => self.pos += 2 + i + 2,
                        None => return Err(self.error("a /* comment that never ends")),
                    },
                    _ => return Err(self.error("a stray `/`")),
                },
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error("values nested too deep"));
        }
        self.skip_blank()?;
        let start = self.pos;
        let value = match self.peek() {
            None => return Err(self.error("the text ends where a value was expected")),
            Some(b'{') => self.object(depth)?,
            Some(b'[') => self.array(depth)?,
            Some(b'"') => Value::String(self.string()?),
            Some(b't') => self.word("true", Value::Bool(true))?,
            Some(b'f') => self.word("false", Value::Bool(false))?,
            Some(b'n') => self.word("null", Value::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(b'\'') => {
                return Err(
                    self.error("a string in single quotes: JSON strings use \"double quotes\"")
                );
            }
            Some(_) => {
                return Err(self.error(
                    "expected a value (an object, array, string, number, true, false or null)",
                ));
            }
        };
        Ok(Node {
            span: start..self.pos,
            value,
        })
    }

    fn word(&mut self, word: &str, v: Value) -> Result<Value, JsonError> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self
                .error("expected a value (an object, array, string, number, true, false or null)"))
        }
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        let rest = &self.text.as_bytes()[start..];
        let len = rest
            .iter()
            .take_while(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
            .count();
        let lexeme = &self.text[start..start + len];
        // serde_json knows JSON's number grammar; the lexeme alone is parsed.
        match serde_json::from_str::<serde_json::Number>(lexeme) {
            Ok(n) => {
                self.pos += len;
                Ok(Value::Number(n.as_f64().unwrap_or(f64::NAN)))
            }
            Err(_) => Err(self.error(format!("`{lexeme}` is not a JSON number"))),
        }
    }

    fn string(&mut self) -> Result<String, JsonError> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let mut i = start + 1;
        loop {
            match bytes.get(i) {
                None => {
                    return Err(JsonError {
                        at: start,
                        message: "a string that never ends".into(),
                    });
                }
                Some(b'"') => break,
                Some(b'\\') => i += 2,
                Some(b'\n') => {
                    return Err(JsonError {
                        at: i,
                        message: "a line break inside a string (write \\n)".into(),
                    });
                }
                Some(_) => i += 1,
            }
        }
        let lexeme = &self.text[start..=i];
        // serde_json decodes the escapes (\n, \u00e9, surrogate pairs).
        match serde_json::from_str::<String>(lexeme) {
            Ok(s) => {
                self.pos = i + 1;
                Ok(s)
            }
            Err(e) => Err(JsonError {
                at: start + bad_escape_at(lexeme),
                message: format!("a bad escape in a string ({})", reason(&e)),
            }),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_blank()?;
            if self.peek() == Some(b']') {
                self.pos += 1;
                return Ok(Value::Array(items));
            }
            items.push(self.value(depth + 1)?);
            self.skip_blank()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {}
                _ => return Err(self.error("expected `,` or `]` after an array element")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.pos += 1;
        let mut entries: Vec<(String, Range<usize>, Node)> = Vec::new();
        loop {
            self.skip_blank()?;
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(entries));
                }
                Some(b'"') => {}
                _ => return Err(self.error("expected a key in \"double quotes\" or `}`")),
            }
            let key_start = self.pos;
            let key = self.string()?;
            let key_span = key_start..self.pos;
            if entries.iter().any(|(k, _, _)| *k == key) {
                return Err(JsonError {
                    at: key_start,
                    message: format!("the key \"{key}\" appears twice in one object"),
                });
            }
            self.skip_blank()?;
            if self.peek() != Some(b':') {
                return Err(self.error("expected `:` after the key"));
            }
            self.pos += 1;
            let v = self.value(depth + 1)?;
            entries.push((key, key_span, v));
            self.skip_blank()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.error("expected `,` or `}` after an object member")),
            }
        }
    }
}

/// Where in a string's text (its quotes included) serde_json found it bad:
/// the first raw control character, or the backslash of the first escape
/// JSON does not have, or of a surrogate without its pair. serde_json's own
/// column cannot say: it counts bytes from the last line break (an escaped
/// one included) and is taken after a whole `\uXXXX` is read, so it could
/// fall inside a character (found by the fuzz target `jsonc`). Every place
/// this returns is an ASCII byte, so a character boundary.
fn bad_escape_at(lexeme: &str) -> usize {
    let b = lexeme.as_bytes();
    // The backslash of a leading surrogate still waiting for its pair.
    let mut leading: Option<usize> = None;
    let mut i = 1;
    while i + 1 < b.len() {
        match b[i] {
            c if c < 0x20 => return i,
            b'\\' if b.get(i + 1) == Some(&b'u') => {
                let Some(v) = lexeme
                    .get(i + 2..i + 6)
                    .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                    .and_then(|h| u16::from_str_radix(h, 16).ok())
                else {
                    return i;
                };
                match (leading, v) {
                    (Some(_), 0xDC00..=0xDFFF) => leading = None,
                    (Some(at), _) => return at,
                    (None, 0xD800..=0xDBFF) => leading = Some(i),
                    (None, 0xDC00..=0xDFFF) => return i,
                    (None, _) => {}
                }
                i += 6;
            }
            b'\\'
                if matches!(
                    b.get(i + 1),
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
                ) =>
            {
                if let Some(at) = leading {
                    return at;
                }
                i += 2;
            }
            b'\\' => return i,
            _ => {
                if let Some(at) = leading {
                    return at;
                }
                i += 1;
            }
        }
    }
    leading.unwrap_or(0)
}

/// serde_json's message without the place it appends.
fn reason(e: &serde_json::Error) -> String {
    let full = e.to_string();
    full.rsplit_once(" at line ")
        .map_or(full.clone(), |(m, _)| m.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> (usize, String) {
        let e = parse_jsonc(text).unwrap_err();
        (e.at, e.message)
    }

    #[test]
    fn jsonc_comments_and_trailing_commas_are_read() {
        let text = "// servers\n{\n  /* one */ \"a\": [1, \"x\\u00e9\", true, null,],\n}\n";
        let n = parse_jsonc(text).unwrap();
        let a = n.get("a").unwrap();
        assert_eq!(&text[a.span.clone()], "[1, \"x\\u00e9\", true, null,]");
        let Value::Array(items) = &a.value else {
            panic!("{a:?}")
        };
        assert_eq!(items[1].as_str(), Some("xé"));
        assert_eq!(items[0].value, Value::Number(1.0));
    }

    #[test]
    fn errors_say_where_and_what() {
        assert_eq!(at("{\"a\": 1 \"b\": 2}").0, 8);
        assert!(at("{\"a\": 1 \"b\": 2}").1.contains("`,` or `}`"));
        assert!(at("{'a': 1}").1.contains("double quotes"));
        assert!(at("{\"a\": \"x").1.contains("never ends"));
        assert!(at("{\"a\": 1, \"a\": 2}").1.contains("twice"));
        assert!(at("{} x").1.contains("after the end"));
        assert!(at("{\"a\": 01x}").1.contains("not a JSON number"));
        assert!(at("/* open").1.contains("never ends"));
        assert!(at(&"[".repeat(200)).1.contains("too deep"));
    }
}
