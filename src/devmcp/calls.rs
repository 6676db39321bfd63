//! What the stand-in's stateless tools answer: `echo`, `add`, `image`,
//! `images`, `mixed`, `fail`, `rpc_error` and the optional tools, each a
//! function from the call's arguments to a `CallToolResult` (or, for
//! `rpc_error`, the JSON-RPC error it stands for), plus the small PNG and WAV
//! files they carry.
//!
//! The tools that need the server's state (`hang`, `stats`, `pid`,
//! `toggle`) are in `handler`. Bad arguments are a tool error
//! (`isError: true`), as MCP asks, so that a model could correct itself;
//! only `rpc_error` and an unknown tool are JSON-RPC errors.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Resource};
use serde_json::{Number, Value, json};

use crate::picture::Picture;

/// The message of `rpc_error`'s JSON-RPC error.
pub const RPC_ERROR_MESSAGE: &str = "rpc_error always fails: this is the stand-in's JSON-RPC error";

/// Side of the square images, in pixels.
const SIDE: u32 = 16;

/// The colours of `images`, one per image (so they differ), and `image`'s first.
const COLOURS: [[u8; 3]; 5] = [
    [220, 40, 40],
    [40, 160, 60],
    [40, 80, 220],
    [230, 200, 40],
    [150, 60, 180],
];

/// The most `echo` answers with `repeat` (bytes): more than a handler's
/// default `max_output_bytes` (8 MiB), bounded all the same.
const MAX_ECHO_BYTES: usize = 16 * 1024 * 1024;

pub(crate) fn echo(args: &JsonObject) -> CallToolResult {
    let repeat = args.get("repeat").and_then(Value::as_u64).unwrap_or(1);
    match args.get("text").and_then(Value::as_str) {
        Some(text) if (text.len() as u64).saturating_mul(repeat) > MAX_ECHO_BYTES as u64 => {
            tool_error("`text` repeated `repeat` times would be more than 16 MiB")
        }
        Some(text) => {
            CallToolResult::success(vec![ContentBlock::text(text.repeat(repeat as usize))])
        }
        None => tool_error("`text` must be given, as a string"),
    }
}

pub(crate) fn add(args: &JsonObject) -> CallToolResult {
    let (Some(a), Some(b)) = (number(args, "a"), number(args, "b")) else {
        return tool_error("`a` and `b` must both be given, as numbers");
    };
    // Integers stay integers (2 + 3 = 5, not 5.0); anything else is a float.
    let sum = match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x.checked_add(y).map(Number::from),
        _ => None,
    }
    .or_else(|| Number::from_f64(a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN)));
    let Some(sum) = sum else {
        return tool_error("the sum is not a finite number");
    };
    let mut result =
        CallToolResult::success(vec![ContentBlock::text(format!("{a} + {b} = {sum}"))]);
    result.structured_content = Some(json!({ "sum": sum }));
    result
}

pub(crate) fn image(args: &JsonObject) -> CallToolResult {
    let flag = |k: &str| args.get(k).and_then(Value::as_bool) == Some(true);
    if flag("bomb") {
        // A hostile server's answer: a JPEG of a few hundred bytes whose
        // header claims 65500x65500 pixels (12.9 GB decoded).
        let bomb =
            crate::contract::images::decompression_bomb(crate::picture::Format::Jpeg, 65500, 65500);
        let picture = ContentBlock::image(STANDARD.encode(bomb), "image/jpeg");
        return CallToolResult::success(vec![picture, ContentBlock::text("a very large picture")]);
    }
    // A file read from disk is a picture of some size: its base64 repeated
    // as text would cost the model tens of KiB.
    let mut data = if flag("repeat_in_structured_content") {
        photo_b64()
    } else {
        png_b64(COLOURS[0])
    };
    if flag("bad_crc") {
        let png = STANDARD.decode(&data).unwrap_or_default();
        let bad = crate::contract::images::with_chunk(&png, b"tEXt", b"Software\0an editor", true);
        data = STANDARD.encode(bad);
    }
    let picture = ContentBlock::image(data.clone(), "image/png");
    let mut result = CallToolResult::success(vec![picture, ContentBlock::text("a 16x16 square")]);
    if flag("repeat_in_structured_content") {
        result.structured_content = Some(json!({"content": [
            {"type": "image", "data": data, "mimeType": "image/png"}
        ]}));
    }
    result
}

pub(crate) fn images(args: &JsonObject) -> CallToolResult {
    let count = args.get("count").and_then(Value::as_u64);
    match count.and_then(|c| usize::try_from(c).ok()) {
        Some(n) if n <= COLOURS.len() => CallToolResult::success(
            COLOURS[..n]
                .iter()
                .map(|&c| ContentBlock::image(png_b64(c), "image/png"))
                .collect(),
        ),
        _ => tool_error("`count` must be an integer from 0 to 5"),
    }
}

pub(crate) fn mixed() -> CallToolResult {
    CallToolResult::success(vec![
        ContentBlock::text("one content of each kind follows"),
        ContentBlock::audio(STANDARD.encode(wav()), "audio/wav"),
        ContentBlock::resource_link(
            Resource::new("file:///srv/report.pdf", "report.pdf").with_mime_type("application/pdf"),
        ),
        ContentBlock::embedded_text("mem://note", "a note"),
    ])
}

pub(crate) fn fail(args: &JsonObject) -> CallToolResult {
    match args.get("message").and_then(Value::as_str) {
        Some(message) => tool_error(message),
        None => tool_error("`message` must be given, as a string"),
    }
}

pub(crate) fn rpc_error() -> ErrorData {
    ErrorData::invalid_params(RPC_ERROR_MESSAGE, None)
}

/// What the tools that exist only to be listed (`--long-name`, `--bad-schema`) answer.
pub(crate) fn listed_only(name: &str) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(format!(
        "{name} exists to be listed; calling it does nothing"
    ))])
}

fn number<'a>(args: &'a JsonObject, key: &str) -> Option<&'a Number> {
    match args.get(key) {
        Some(Value::Number(n)) => Some(n),
        _ => None,
    }
}

fn tool_error(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// A real 160x120 PNG with grain, as a photo read from a file (about
/// 50 KiB of base64), in base64.
fn photo_b64() -> String {
    let mut seed = 11u32;
    let img = Picture::from_fn(160, 120, |x, y| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        [(x + (seed >> 24)) as u8, (y * 2) as u8, (seed >> 16) as u8]
    });
    // As `png_b64`: encoding into a Vec cannot fail.
    STANDARD.encode(img.to_png().unwrap_or_default())
}

/// A real 16x16 PNG of one colour, in base64.
pub(crate) fn png_b64(colour: [u8; 3]) -> String {
    let img = Picture::from_fn(SIDE, SIDE, |_, _| colour);
    // Encoding a small in-memory image as PNG into a Vec cannot fail; if it
    // ever did, the client would get an empty image, which its checks report.
    STANDARD.encode(img.to_png().unwrap_or_default())
}

/// A valid WAV file: 8 kHz, 8-bit mono PCM, eight samples of silence.
fn wav() -> Vec<u8> {
    const SAMPLES: u32 = 8;
    const RATE: u32 = 8000;
    let mut out = Vec::with_capacity(44 + SAMPLES as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + SAMPLES).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes()); // size of the fmt chunk
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // one channel
    out.extend_from_slice(&RATE.to_le_bytes());
    out.extend_from_slice(&RATE.to_le_bytes()); // bytes per second
    out.extend_from_slice(&1u16.to_le_bytes()); // bytes per frame
    out.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    out.extend_from_slice(b"data");
    out.extend_from_slice(&SAMPLES.to_le_bytes());
    out.extend(std::iter::repeat_n(0x80u8, SAMPLES as usize)); // 8-bit silence
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> JsonObject {
        match v {
            Value::Object(m) => m,
            _ => JsonObject::new(),
        }
    }

    fn text_of(r: &CallToolResult, i: usize) -> &str {
        r.content[i].as_text().map_or("", |t| t.text.as_str())
    }

    #[test]
    fn add_keeps_integers_and_says_the_sum() {
        let r = add(&args(json!({"a": 2, "b": 3})));
        assert_eq!(r.structured_content, Some(json!({"sum": 5})));
        assert_eq!(text_of(&r, 0), "2 + 3 = 5");
        let r = add(&args(json!({"a": 1.5, "b": 2})));
        assert_eq!(r.structured_content, Some(json!({"sum": 3.5})));
        assert_eq!(text_of(&r, 0), "1.5 + 2 = 3.5");
        let r = add(&args(json!({"a": "1", "b": 2})));
        assert_eq!(r.is_error, Some(true));
    }

    #[test]
    fn images_are_real_pngs_of_different_colours() {
        let r = images(&args(json!({"count": 5})));
        assert_eq!(r.content.len(), 5);
        let mut data = Vec::new();
        for c in &r.content {
            let img = c.as_image().expect("an image");
            assert_eq!(img.mime_type, "image/png");
            let bytes = STANDARD.decode(&img.data).expect("base64");
            let decoded = Picture::decode(&bytes, crate::picture::Format::Png, 256).expect("a PNG");
            assert_eq!((decoded.width(), decoded.height()), (16, 16));
            data.push(img.data.clone());
        }
        data.dedup();
        assert_eq!(data.len(), 5, "every image differs");
        assert!(images(&args(json!({"count": 0}))).content.is_empty());
        for bad in [
            json!({"count": 6}),
            json!({"count": -1}),
            json!({"count": 2.5}),
            json!({}),
        ] {
            assert_eq!(images(&args(bad.clone())).is_error, Some(true), "{bad}");
        }
    }

    #[test]
    fn mixed_has_one_content_of_each_kind() {
        let r = mixed();
        let kinds: Vec<Value> = r
            .content
            .iter()
            .map(|c| serde_json::to_value(c).map_or(Value::Null, |v| v["type"].clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                json!("text"),
                json!("audio"),
                json!("resource_link"),
                json!("resource")
            ]
        );
        let audio = r.content[1].as_audio().expect("audio");
        assert!(
            STANDARD
                .decode(&audio.data)
                .is_ok_and(|b| b.starts_with(b"RIFF"))
        );
        let link = r.content[2].as_resource_link().expect("link");
        assert_eq!(
            (link.uri.as_str(), link.name.as_str()),
            ("file:///srv/report.pdf", "report.pdf")
        );
        assert_eq!(link.mime_type.as_deref(), Some("application/pdf"));
        let note = r.content[3].as_resource().expect("embedded");
        assert_eq!(note.get_text(), "a note");
    }

    #[test]
    fn fail_is_a_tool_error_with_the_message() {
        let r = fail(&args(json!({"message": "boom"})));
        assert_eq!(r.is_error, Some(true));
        assert_eq!(text_of(&r, 0), "boom");
    }
}
