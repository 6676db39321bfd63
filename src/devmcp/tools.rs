//! The stand-in's tool catalogue: which tools exist for a set of options
//! (and whether `toggle` has added `extra`), in the order they are listed,
//! with their descriptions and input schemas; and the pure paging of
//! `tools/list`.
//!
//! Nothing here runs a tool (`calls` does) or talks to a client (`handler`
//! does): the catalogue is data, so the paging and the names are unit-tested
//! without a connection.

use std::num::NonZeroUsize;
use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};

/// A tool name of exactly 60 characters: valid by itself (MCP allows 128),
/// too long for main_server's 64 once the sidecar adds a prefix of 5 or more.
pub const LONG_TOOL_NAME: &str = "a_tool_name_that_is_sixty_characters_long_xxxxxxxxxxxxxxxxxx";

/// The tool `toggle` adds and removes.
pub const EXTRA_TOOL: &str = "extra";

/// The tools listed without options, in listing order (for tests and the
/// demo to name them; the catalogue below is checked against it).
pub const TOOLS: [&str; 11] = [
    "echo",
    "add",
    "image",
    "images",
    "mixed",
    "fail",
    "rpc_error",
    "hang",
    "stats",
    "pid",
    "toggle",
];

/// The tool whose input schema is not a valid JSON Schema (`--bad-schema`).
pub const BAD_SCHEMA_TOOL: &str = "bad_schema";

/// A tool named `t<n>` (the hostile fault modes' listings).
pub(crate) fn numbered(n: u64) -> Tool {
    Tool::new(
        format!("t{n}"),
        "A tool of a hostile listing.",
        Arc::new(object(no_arguments())),
    )
}

/// What decides the catalogue besides the fixed tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Catalogue {
    pub(crate) long_name: bool,
    pub(crate) bad_schema: bool,
    /// Whether `toggle` has added `extra` (it starts absent).
    pub(crate) extra: bool,
}

impl Catalogue {
    /// Every tool, in listing order: the fixed ones, then `extra` while it
    /// is present, then the optional ones. `extra` comes after the fixed
    /// tools so that toggling it never moves them between pages.
    pub(crate) fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "echo",
                "Returns the given text unchanged, as one text content.",
                json!({
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "The text to send back."},
                        "repeat": {"type": "integer", "minimum": 1, "description": "Send the text back this many times over (at most 16 MiB in all)."}
                    },
                    "required": ["text"]
                }),
            ),
            tool(
                "add",
                "Adds two numbers and returns the sum both as structured content and as a sentence.",
                json!({
                    "type": "object",
                    "properties": {
                        "a": {"type": "number", "description": "The first addend."},
                        "b": {"type": "number", "description": "The second addend."}
                    },
                    "required": ["a", "b"]
                }),
            )
            .with_raw_output_schema(Arc::new(object(json!({
                "type": "object",
                "properties": {"sum": {"type": "number"}},
                "required": ["sum"]
            })))),
            tool(
                "image",
                "Returns one 16x16 PNG image of a single colour and a text content describing it.",
                json!({
                    "type": "object",
                    "properties": {
                        "bomb": {"type": "boolean",
                            "description": "Return instead a JPEG of a few hundred bytes whose header claims 65500x65500 pixels: a decompression bomb, as a hostile server would."},
                        "bad_crc": {"type": "boolean",
                            "description": "Give the PNG a tEXt chunk with a wrong CRC, as an editor that rewrites metadata can leave it: browsers show it, Pillow refuses it."},
                        "repeat_in_structured_content": {"type": "boolean",
                            "description": "Return a 160x120 picture instead, and put its image content inside structuredContent too, as the filesystem server's read_media_file does."}
                    }
                }),
            ),
            tool(
                "images",
                "Returns `count` 16x16 PNG images, each of a different colour, and no text.",
                json!({
                    "type": "object",
                    "properties": {"count": {
                        "type": "integer", "minimum": 0, "maximum": 5,
                        "description": "How many images to return, from 0 to 5."
                    }},
                    "required": ["count"]
                }),
            ),
            tool(
                "mixed",
                "Returns one content of each other kind: text, audio, a resource link and an embedded text resource.",
                no_arguments(),
            ),
            tool(
                "fail",
                "Fails as a tool: returns isError true with the given message as its text.",
                json!({
                    "type": "object",
                    "properties": {"message": {"type": "string", "description": "The error message to return."}},
                    "required": ["message"]
                }),
            ),
            tool(
                "rpc_error",
                "Always answers with a JSON-RPC error (invalid params) instead of a tool result.",
                no_arguments(),
            ),
            tool(
                "hang",
                "Never answers; it ends only when the call is cancelled, and the cancellation is counted.",
                no_arguments(),
            ),
            tool(
                "stats",
                "Returns the counters since the server started: tool calls, cancelled calls and tools/list requests.",
                no_arguments(),
            )
            .with_raw_output_schema(Arc::new(object(json!({
                "type": "object",
                "properties": {
                    "calls": {"type": "integer"},
                    "cancelled": {"type": "integer"},
                    "list_calls": {"type": "integer"}
                },
                "required": ["calls", "cancelled", "list_calls"]
            })))),
            tool(
                "pid",
                "Returns the process id of the server, to tell one run of it from the next.",
                no_arguments(),
            )
            .with_raw_output_schema(Arc::new(object(json!({
                "type": "object",
                "properties": {"pid": {"type": "integer"}},
                "required": ["pid"]
            })))),
            tool(
                "toggle",
                "Adds the tool `extra` if it is absent and removes it if present, then notifies clients that the tool list changed.",
                no_arguments(),
            ),
        ];
        if self.extra {
            tools.push(tool(
                EXTRA_TOOL,
                "Returns the given text unchanged; it exists only between two calls of `toggle`.",
                json!({
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "The text to send back."},
                        "repeat": {"type": "integer", "minimum": 1, "description": "Send the text back this many times over (at most 16 MiB in all)."}
                    },
                    "required": ["text"]
                }),
            ));
        }
        if self.long_name {
            tools.push(tool(
                LONG_TOOL_NAME,
                "Returns a fixed text; its name is 60 characters long, the most a prefixed name can afford is less.",
                no_arguments(),
            ));
        }
        if self.bad_schema {
            tools.push(tool(
                BAD_SCHEMA_TOOL,
                "Returns a fixed text; its input schema names a type that JSON Schema does not have.",
                json!({"type": "object", "properties": {"x": {"type": "nonsense"}}}),
            ));
        }
        tools
    }
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    Tool::new(name, description, Arc::new(object(schema)))
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}, "required": []})
}

/// The JSON object inside `value` (every schema here is written as one).
fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// One page of `tools`: the page the cursor points at and the cursor of the
/// next one. Without a page size everything is one page. The cursor is the
/// offset of the page's first tool, in decimal; anything else, or an offset
/// past the end, is invalid params (an offset at the end, possible once
/// `extra` is removed between pages, is an empty last page).
pub(crate) fn page(
    tools: Vec<Tool>,
    cursor: Option<&str>,
    page_size: Option<NonZeroUsize>,
) -> Result<(Vec<Tool>, Option<String>), ErrorData> {
    let start = match cursor {
        None => 0,
        Some(text) => match text.parse::<usize>() {
            Ok(offset) if offset <= tools.len() => offset,
            _ => {
                return Err(ErrorData::invalid_params(
                    format!("invalid cursor {text:?}: not one this server handed out"),
                    None,
                ));
            }
        },
    };
    let Some(size) = page_size else {
        return Ok((tools.into_iter().skip(start).collect(), None));
    };
    let end = start.saturating_add(size.get()).min(tools.len());
    let next = (end < tools.len()).then(|| end.to_string());
    Ok((
        tools.into_iter().skip(start).take(end - start).collect(),
        next,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tools: &[Tool]) -> Vec<String> {
        tools.iter().map(|t| t.name.to_string()).collect()
    }

    #[test]
    fn the_fixed_tools_come_in_order_and_the_optional_ones_after_them() {
        let plain = Catalogue {
            long_name: false,
            bad_schema: false,
            extra: false,
        };
        assert_eq!(names(&plain.tools()), TOOLS);
        let all = Catalogue {
            long_name: true,
            bad_schema: true,
            extra: true,
        };
        let mut expected: Vec<&str> = TOOLS.to_vec();
        expected.extend([EXTRA_TOOL, LONG_TOOL_NAME, BAD_SCHEMA_TOOL]);
        assert_eq!(names(&all.tools()), expected);
    }

    #[test]
    fn the_long_name_is_sixty_characters() {
        assert_eq!(LONG_TOOL_NAME.chars().count(), 60);
        assert!(LONG_TOOL_NAME.is_ascii());
    }

    #[test]
    fn every_schema_is_an_object_with_properties() {
        let all = Catalogue {
            long_name: true,
            bad_schema: true,
            extra: true,
        };
        for t in all.tools() {
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                t.name
            );
            assert!(t.input_schema.get("properties").is_some(), "{}", t.name);
            let described = t.description.as_deref().is_some_and(|d| d.ends_with('.'));
            assert!(described, "{} needs a sentence", t.name);
        }
    }

    #[test]
    fn pages_cover_every_tool_once_and_the_last_has_no_cursor() {
        let tools = Catalogue {
            long_name: true,
            bad_schema: false,
            extra: false,
        }
        .tools();
        let all = names(&tools);
        let size = NonZeroUsize::new(5);
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let (items, next) = page(tools.clone(), cursor.as_deref(), size).expect("valid cursor");
            assert!(items.len() <= 5);
            seen.extend(names(&items));
            pages += 1;
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, all);
        assert_eq!(pages, 3, "12 tools in pages of 5");
    }

    #[test]
    fn without_a_page_size_it_is_one_page() {
        let tools = Catalogue {
            long_name: false,
            bad_schema: false,
            extra: false,
        }
        .tools();
        let (items, next) = page(tools, None, None).expect("first page");
        assert_eq!(items.len(), TOOLS.len());
        assert_eq!(next, None);
    }

    #[test]
    fn a_cursor_it_did_not_hand_out_is_invalid_params() {
        let tools = Catalogue {
            long_name: false,
            bad_schema: false,
            extra: false,
        }
        .tools();
        for bad in ["abc", "-1", "12", "1.5", ""] {
            let err = page(tools.clone(), Some(bad), NonZeroUsize::new(3)).expect_err(bad);
            assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{bad}");
        }
        // The end itself is an empty last page, not an error.
        let (items, next) = page(tools, Some("11"), NonZeroUsize::new(3)).expect("end");
        assert!(items.is_empty());
        assert_eq!(next, None);
    }
}
