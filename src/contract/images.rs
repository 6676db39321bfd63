//! main_server's image rules (CONTRACT.md, rules 7 and 15): which entries
//! of an envelope's `images` reach the model, and the warnings for the rest.
//!
//! main_server judges every image with Pillow, which is strict where most
//! decoders are lenient: strict base64, the JPEG or PNG magic bytes, a PNG
//! whose every chunk (ancillary ones such as `iCCP` and `tEXt` too) has a
//! right CRC up to its `IEND`, a JPEG that reaches its end-of-image marker,
//! at most 3840x2160 pixels, a full decode, and a `mime` (optional) that
//! matches the bytes. [`judge`] is that check, written once: the stand-in
//! reads answers with it ([`read_images`], main_server's warnings word for
//! word), and the sidecar checks every image it sends with it before it
//! repairs or refuses one (`callback::images`). Pure: no I/O, no logging.

use std::fmt;

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use serde::Serialize;
use serde_json::Value as Json;

use crate::picture::{Format, Picture};

/// Only this many entries of `images` are looked at.
pub(crate) const MAX_IMAGES: usize = 2;
/// The largest `data_b64` accepted, in bytes of base64 text.
pub(crate) const MAX_B64_BYTES: usize = 2 * 1024 * 1024;
/// The largest image accepted, in pixels (3840 x 2160).
pub(crate) const MAX_PIXELS: u64 = 3840 * 2160;
/// How many times [`MAX_PIXELS`] a picture the sidecar scales down to fit
/// may have: a 12-megapixel phone photo is repaired, a header claiming
/// 65500x65500 (a decompression bomb of a few hundred bytes) is refused
/// before anything is decoded. Decoding such a picture and scaling it
/// takes about 250 MB at most (BENCHMARKS.md, "Hostile input").
pub const REPAIR_PIXEL_MULTIPLE: u64 = 2;
/// The most pixels a picture the sidecar decodes may have (16,588,800).
pub const MAX_REPAIR_PIXELS: u64 = REPAIR_PIXEL_MULTIPLE * MAX_PIXELS;
/// Above this much base64, main_server re-encodes an image as JPEG to fit
/// its delivery budget (and drops it when no step of its ladder fits).
pub(crate) const DELIVER_MAX_B64: usize = 500 * 1024;
/// A longer `vision_prompt` is cut to this many characters.
pub(crate) const VISION_PROMPT_CHARS: usize = 2000;

/// main_server's re-encoding ladder: (largest height, JPEG quality), each
/// step tried only when the one before did not fit [`DELIVER_MAX_B64`].
const FIT_LADDER: [(u32, u8); 4] = [(720, 80), (720, 60), (540, 55), (480, 45)];
/// The widest image main_server's ladder keeps.
const FIT_MAX_WIDTH: u32 = 1280;

/// Python's `base64.b64decode(s, validate=True)`: the standard alphabet
/// only, padding required where it is due, stray low bits after the last
/// character tolerated.
const PYTHON_B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// One image main_server accepted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Image {
    /// `image/jpeg` or `image/png`: what the bytes are (after re-encoding).
    pub mime: &'static str,
    pub width: u32,
    pub height: u32,
    /// The base64 passed on (re-encoded when the original was too large).
    #[serde(skip)]
    pub data_b64: String,
    /// Length of `data_b64`, shown instead of the data itself.
    pub data_b64_len: usize,
    /// A non-string prompt becomes `""`; a long one is cut.
    pub vision_prompt: String,
    /// Whether it was re-encoded as JPEG to fit.
    pub reencoded: bool,
}

impl Image {
    /// The text a session that cannot see images gets instead.
    pub(crate) fn describe(&self) -> String {
        let kind = if self.mime == "image/png" {
            "PNG"
        } else {
            "JPEG"
        };
        let mut d = format!("{kind} image, {}x{} pixels", self.width, self.height);
        if !self.vision_prompt.is_empty() {
            d.push_str(": ");
            d.push_str(&self.vision_prompt);
        }
        d
    }
}

/// Why main_server refuses one entry of `images`. `Display` says what is
/// wrong in words a plugin author (or the model) can act on; [`warning`]
/// is the bare sentence main_server itself writes.
///
/// [`warning`]: Flaw::warning
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Flaw {
    NotAnObject,
    /// `data_b64` missing, not a string, or only whitespace.
    NoData,
    TooLarge {
        b64_len: usize,
    },
    NotBase64(String),
    /// The bytes start as neither a JPEG nor a PNG.
    NotAnImage,
    /// A JPEG or PNG that Pillow cannot read: a bad chunk CRC, data cut
    /// short, or a decoding error.
    Broken {
        format: &'static str,
        why: String,
    },
    TooManyPixels {
        width: u32,
        height: u32,
    },
    /// `mime` is given but is not one of the two main_server takes.
    UnsupportedMime(Json),
    MimeMismatch {
        declared: String,
        actual: &'static str,
    },
}

impl Flaw {
    /// main_server's own warning for the entry at `index` (0-based).
    pub(crate) fn warning(&self, index: usize) -> String {
        match self {
            Flaw::NotAnObject => format!("image #{index} is not an object; dropped"),
            Flaw::NoData => format!("image #{index} has empty data_b64; dropped"),
            Flaw::TooLarge { b64_len } => format!(
                "image #{index} is too large ({b64_len} > {MAX_B64_BYTES} base64 bytes); dropped"
            ),
            Flaw::NotBase64(_)
            | Flaw::NotAnImage
            | Flaw::Broken { .. }
            | Flaw::TooManyPixels { .. } => {
                format!("image #{index} has invalid base64 or non-image bytes; dropped")
            }
            Flaw::UnsupportedMime(m) => {
                format!(
                    "image #{index} has unsupported mime {}; dropped",
                    py_repr(m)
                )
            }
            Flaw::MimeMismatch { .. } => {
                format!("image #{index} mime does not match image bytes; dropped")
            }
        }
    }
}

impl fmt::Display for Flaw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Flaw::NotAnObject => f.write_str("it is not an object with a `data_b64`"),
            Flaw::NoData => f.write_str("its `data_b64` is missing, empty or not a string"),
            Flaw::TooLarge { b64_len } => write!(
                f,
                "its `data_b64` is {b64_len} bytes, more than the {MAX_B64_BYTES} main_server takes"
            ),
            Flaw::NotBase64(why) => write!(f, "its `data_b64` is not strict base64 ({why})"),
            Flaw::NotAnImage => f.write_str("its bytes are neither a PNG nor a JPEG"),
            Flaw::Broken { format, why } => write!(f, "the {format} {why}"),
            Flaw::TooManyPixels { width, height } => write!(
                f,
                "it is {width}x{height} pixels, more than the 3840x2160 main_server takes"
            ),
            Flaw::UnsupportedMime(m) => write!(
                f,
                "its `mime` is {m}, but main_server takes only \"image/png\" and \"image/jpeg\""
            ),
            Flaw::MimeMismatch { declared, actual } => {
                write!(f, "its `mime` says {declared} but the bytes are {actual}")
            }
        }
    }
}

/// An entry main_server takes, with what it took from it.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    /// `data_b64` without whitespace.
    pub b64: String,
    pub format: Format,
    pub width: u32,
    pub height: u32,
    /// The decoded picture (main_server decodes it fully to judge it).
    pub picture: Picture,
}

impl Accepted {
    pub(crate) fn mime(&self) -> &'static str {
        mime_of(self.format)
    }
}

/// Judges one entry of `images` exactly as main_server does, in its order:
/// the entry's shape, the base64 size cap, the bytes (strict base64, magic,
/// structure, pixel cap, full decode), then `mime`.
pub(crate) fn judge(entry: &Json) -> Result<Accepted, Flaw> {
    let Json::Object(o) = entry else {
        return Err(Flaw::NotAnObject);
    };
    let Some(Json::String(raw)) = o.get("data_b64") else {
        return Err(Flaw::NoData);
    };
    let b64: String = raw.split_whitespace().collect();
    if b64.is_empty() {
        return Err(Flaw::NoData);
    }
    if b64.len() > MAX_B64_BYTES {
        return Err(Flaw::TooLarge { b64_len: b64.len() });
    }
    let bytes = PYTHON_B64
        .decode(&b64)
        .map_err(|e| Flaw::NotBase64(e.to_string()))?;
    let (format, width, height, picture) = judge_bytes(&bytes)?;
    let actual = mime_of(format);
    match o.get("mime") {
        None | Some(Json::Null) => {}
        Some(Json::String(m)) if m.is_empty() => {}
        Some(Json::String(m)) => match normalise_mime(m) {
            Some(n) if n == actual => {}
            Some(_) => {
                return Err(Flaw::MimeMismatch {
                    declared: m.clone(),
                    actual,
                });
            }
            None => return Err(Flaw::UnsupportedMime(Json::String(m.clone()))),
        },
        Some(other) => return Err(Flaw::UnsupportedMime(other.clone())),
    }
    Ok(Accepted {
        b64,
        format,
        width,
        height,
        picture,
    })
}

/// The bytes of one image as Pillow judges them: the magic, the structure
/// (every PNG chunk's CRC, a JPEG's end marker), the pixel cap, and a full
/// decode. Returns the format, the size and the picture.
pub(crate) fn judge_bytes(bytes: &[u8]) -> Result<(Format, u32, u32, Picture), Flaw> {
    let format = sniff(bytes).ok_or(Flaw::NotAnImage)?;
    let name = format_name(format);
    let broken = |why: String| Flaw::Broken { format: name, why };
    let structure = if format == Format::Png {
        png_structure(bytes)
    } else {
        jpeg_structure(bytes)
    };
    structure.map_err(broken)?;
    let (width, height) =
        Picture::dimensions(bytes, format).map_err(|e| broken(format!("does not decode ({e})")))?;
    if width == 0 || height == 0 || u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(Flaw::TooManyPixels { width, height });
    }
    let picture = Picture::decode(bytes, format, MAX_PIXELS)
        .map_err(|e| broken(format!("does not decode ({e})")))?;
    Ok((format, width, height, picture))
}

/// Walks a PNG's chunks from the signature to `IEND`, checking each one's
/// type and CRC as Pillow does (which, unlike the `png` crate and browsers,
/// does not skip an ancillary chunk with a bad CRC).
fn png_structure(bytes: &[u8]) -> Result<(), String> {
    let mut pos = PNG_MAGIC.len();
    loop {
        let Some(head) = bytes.get(pos..pos + 8) else {
            return Err("ends before its IEND chunk".into());
        };
        let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let kind = &head[4..8];
        let name = String::from_utf8_lossy(kind).into_owned();
        if !kind.iter().all(u8::is_ascii_alphabetic) {
            return Err(format!("has a chunk with an invalid type at byte {pos}"));
        }
        let end = pos + 8 + length;
        let Some(stored) = bytes.get(end..end + 4) else {
            return Err(format!("ends inside its {name} chunk"));
        };
        let mut crc = crc32fast::Hasher::new();
        crc.update(&bytes[pos + 4..end]);
        if crc.finalize().to_be_bytes() != stored {
            return Err(format!("has a bad CRC in its {name} chunk"));
        }
        if kind == b"IEND" {
            return Ok(());
        }
        pos = end + 4;
    }
}

/// Walks a JPEG's markers from SOI to EOI, through every scan's entropy
/// coded data. A JPEG cut short (no EOI) is refused: Pillow's full decode
/// refuses a truncated one, and a missing marker is what truncation leaves.
fn jpeg_structure(bytes: &[u8]) -> Result<(), String> {
    let mut pos = 2;
    loop {
        // Bytes between segments are tolerated (libjpeg only warns).
        while pos < bytes.len() && bytes[pos] != 0xff {
            pos += 1;
        }
        while pos < bytes.len() && bytes[pos] == 0xff {
            pos += 1;
        }
        let Some(&marker) = bytes.get(pos) else {
            return Err("ends before its end-of-image marker".into());
        };
        pos += 1;
        match marker {
            0xd9 => return Ok(()),
            0x01 | 0xd0..=0xd7 => continue,
            _ => {}
        }
        let Some(len) = bytes.get(pos..pos + 2) else {
            return Err("ends before its end-of-image marker".into());
        };
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        if len < 2 {
            return Err(format!("has a segment of length {len} at byte {pos}"));
        }
        pos += len;
        if marker == 0xda {
            // Entropy-coded data: runs to the next marker that is neither
            // a stuffed 0xff00 nor a restart marker.
            while pos + 1 < bytes.len() {
                if bytes[pos] == 0xff && !matches!(bytes[pos + 1], 0x00 | 0xd0..=0xd7 | 0xff) {
                    break;
                }
                pos += 1;
            }
        }
    }
}

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// What the first bytes say the image is.
pub(crate) fn sniff(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(PNG_MAGIC) {
        Some(Format::Png)
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(Format::Jpeg)
    } else {
        None
    }
}

pub(crate) fn mime_of(format: Format) -> &'static str {
    if format == Format::Png {
        "image/png"
    } else {
        "image/jpeg"
    }
}

fn format_name(format: Format) -> &'static str {
    if format == Format::Png { "PNG" } else { "JPEG" }
}

/// main_server's reading of a declared `mime`: case and parameters do not
/// matter (`Image/PNG; charset=binary` is `image/png`); anything but the
/// two types is refused.
fn normalise_mime(mime: &str) -> Option<&'static str> {
    let bare = mime.split(';').next().unwrap_or_default().trim();
    ["image/png", "image/jpeg"]
        .into_iter()
        .find(|m| bare.eq_ignore_ascii_case(m))
}

/// A JSON value written as Python's `repr` writes the value it becomes.
fn py_repr(v: &Json) -> String {
    match v {
        Json::Null => "None".into(),
        Json::Bool(true) => "True".into(),
        Json::Bool(false) => "False".into(),
        Json::Number(n) => n.to_string(),
        Json::String(s) => {
            let quote = if s.contains('\'') && !s.contains('"') {
                '"'
            } else {
                '\''
            };
            let mut out = String::from(quote);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                        out.push_str(&format!("\\x{:02x}", c as u32));
                    }
                    c => out.push(c),
                }
            }
            out.push(quote);
            out
        }
        Json::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Json::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", py_repr(&Json::String(k.clone())), py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The images accepted from one `images` value, and why others were not.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ImageReading {
    pub images: Vec<Image>,
    pub warnings: Vec<String>,
}

/// Applies main_server's rules to an envelope's `images` value, with its
/// warnings word for word.
pub(crate) fn read_images(value: &Json) -> ImageReading {
    let mut out = ImageReading::default();
    let Json::Array(entries) = value else {
        out.warnings
            .push("tool images must be a list; ignored".to_owned());
        return out;
    };
    if entries.len() > MAX_IMAGES {
        out.warnings.push(format!(
            "a tool may return at most {MAX_IMAGES} image(s); {} dropped",
            entries.len() - MAX_IMAGES
        ));
    }
    for (index, entry) in entries.iter().take(MAX_IMAGES).enumerate() {
        let accepted = match judge(entry) {
            Ok(a) => a,
            Err(flaw) => {
                out.warnings.push(flaw.warning(index));
                continue;
            }
        };
        let mut vision_prompt = match entry.get("vision_prompt") {
            Some(Json::String(p)) => p.clone(),
            _ => String::new(),
        };
        let chars = vision_prompt.chars().count();
        if chars > VISION_PROMPT_CHARS {
            out.warnings.push(format!(
                "image #{index} vision_prompt is too long ({chars} > {VISION_PROMPT_CHARS} characters); truncated"
            ));
            vision_prompt = vision_prompt.chars().take(VISION_PROMPT_CHARS).collect();
        }
        let (mime, data_b64, reencoded, (width, height)) = if accepted.b64.len() <= DELIVER_MAX_B64
        {
            let size = (accepted.width, accepted.height);
            (accepted.mime(), accepted.b64, false, size)
        } else {
            let Some((b64, size)) = fit_for_delivery(&accepted.picture) else {
                out.warnings.push(format!(
                    "image #{index} could not be compressed under {DELIVER_MAX_B64} base64 bytes; dropped"
                ));
                continue;
            };
            out.warnings.push(format!(
                "image #{index} was re-encoded to fit the delivery budget"
            ));
            ("image/jpeg", b64, true, size)
        };
        out.images.push(Image {
            mime,
            width,
            height,
            data_b64_len: data_b64.len(),
            data_b64,
            vision_prompt,
            reencoded,
        });
    }
    out
}

/// main_server's ladder: scaled down to 720 pixels high (1280 wide) at
/// JPEG quality 80, then lower heights and qualities, until the base64
/// fits [`DELIVER_MAX_B64`]; `None` when no step does.
fn fit_for_delivery(picture: &Picture) -> Option<(String, (u32, u32))> {
    for (max_h, quality) in FIT_LADDER {
        let scaled = scale_within(picture, FIT_MAX_WIDTH, max_h);
        let b64 = STANDARD.encode(encode_jpeg(&scaled, quality)?);
        if b64.len() <= DELIVER_MAX_B64 {
            return Some((b64, (scaled.width(), scaled.height())));
        }
    }
    None
}

/// `picture` scaled down (never up) to fit `max_w` x `max_h`, keeping its
/// proportions.
pub(crate) fn scale_within(picture: &Picture, max_w: u32, max_h: u32) -> Picture {
    if picture.width() <= max_w && picture.height() <= max_h {
        return picture.clone();
    }
    picture.resize_within(max_w, max_h)
}

/// A JPEG of `picture` (its alpha dropped, as JPEG has none).
pub(crate) fn encode_jpeg(picture: &Picture, quality: u8) -> Option<Vec<u8>> {
    picture.to_jpeg(quality).ok()
}

/// A real PNG of `w` x `h` pixels, as base64: for tests and examples.
pub fn sample_png_b64(w: u32, h: u32) -> String {
    STANDARD.encode(sample_png(w, h))
}

/// A real PNG of `w` x `h` pixels: for tests and examples.
pub fn sample_png(w: u32, h: u32) -> Vec<u8> {
    // Encoding an in-memory RGB picture as PNG cannot fail.
    Picture::from_fn(w, h, |x, y| [x as u8, y as u8, 128])
        .to_png()
        .unwrap_or_default()
}

/// A decompression bomb: a valid `format` picture of a few hundred bytes
/// whose header claims `w` x `h` pixels (a JPEG's data covers one 16x16
/// block, a lenient decoder fills the rest; a PNG's one compressed row of
/// zeros, the rest missing). For tests and the stand-in MCP server.
pub fn decompression_bomb(format: Format, w: u16, h: u16) -> Vec<u8> {
    let small = Picture::from_fn(16, 16, |x, y| [x as u8 * 9, y as u8 * 9, 90]);
    match format {
        Format::Jpeg => {
            let mut jpeg = small.to_jpeg(80).unwrap_or_default();
            // The baseline frame header (SOF0, FF C0): length (2), sample
            // precision (1), then the height and width as 16-bit numbers.
            if let Some(at) = jpeg.windows(2).position(|m| m == [0xff, 0xc0]) {
                jpeg[at + 5..at + 7].copy_from_slice(&h.to_be_bytes());
                jpeg[at + 7..at + 9].copy_from_slice(&w.to_be_bytes());
            }
            jpeg
        }
        Format::Png => {
            let mut png = PNG_MAGIC.to_vec();
            let chunk = |out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]| {
                let mut crc = crc32fast::Hasher::new();
                crc.update(kind);
                crc.update(data);
                out.extend_from_slice(&(data.len() as u32).to_be_bytes());
                out.extend_from_slice(kind);
                out.extend_from_slice(data);
                out.extend_from_slice(&crc.finalize().to_be_bytes());
            };
            let mut ihdr = Vec::new();
            ihdr.extend_from_slice(&u32::from(w).to_be_bytes());
            ihdr.extend_from_slice(&u32::from(h).to_be_bytes());
            // 8-bit RGB, deflate, adaptive filtering, no interlace.
            ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
            chunk(&mut png, b"IHDR", &ihdr);
            // A stored (uncompressed) zlib stream of one filter byte and
            // nothing more: the picture's data stops at once.
            chunk(
                &mut png,
                b"IDAT",
                &[
                    0x78, 0x01, 0x01, 0x01, 0x00, 0xfe, 0xff, 0x00, 0x00, 0x01, 0x00, 0x01,
                ],
            );
            chunk(&mut png, b"IEND", &[]);
            png
        }
    }
}

/// `png` with a `chunk` (4-letter type, data) put right after its `IHDR`,
/// its CRC right or, with `bad_crc`, off by one: what an editor that
/// rewrites metadata leaves behind. For tests and examples.
pub fn with_chunk(png: &[u8], kind: &[u8; 4], data: &[u8], bad_crc: bool) -> Vec<u8> {
    // The signature (8) and IHDR (4 + 4 + 13 + 4) come first in every PNG.
    let at = PNG_MAGIC.len() + 25;
    let mut crc = crc32fast::Hasher::new();
    crc.update(kind);
    crc.update(data);
    let sum = crc.finalize().wrapping_add(u32::from(bad_crc));
    let mut out = png[..at.min(png.len())].to_vec();
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(png.get(at..).unwrap_or_default());
    out
}

/// Every byte base64-encoded the standard way, as main_server wants it.
pub(crate) fn encode_b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes base64 leniently (either alphabet, padding optional): what a
/// repair may read that main_server would not.
pub(crate) fn decode_b64_leniently(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let lenient = GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent);
    GeneralPurpose::new(&base64::alphabet::STANDARD, lenient)
        .decode(text)
        .or_else(|_| GeneralPurpose::new(&base64::alphabet::URL_SAFE, lenient).decode(text))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(bytes: &[u8]) -> Json {
        json!({"data_b64": encode_b64(bytes)})
    }

    fn jpeg(w: u32, h: u32) -> Vec<u8> {
        let png = Picture::decode(&sample_png(w, h), Format::Png, MAX_PIXELS).unwrap();
        encode_jpeg(&png, 90).unwrap()
    }

    #[test]
    fn a_real_png_is_accepted_with_its_size_and_prompt() {
        let b64 = sample_png_b64(4, 3);
        let r = read_images(&json!([{"data_b64": b64, "mime": "image/png", "vision_prompt": 7}]));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let img = &r.images[0];
        assert_eq!((img.mime, img.width, img.height), ("image/png", 4, 3));
        assert_eq!(img.vision_prompt, "", "a non-string prompt becomes empty");
        assert!(!img.reencoded);
        assert_eq!(img.data_b64, b64);
    }

    #[test]
    fn whitespace_is_removed_and_mime_is_optional_and_read_as_main_server_reads_it() {
        let b64 = sample_png_b64(2, 2);
        let spaced = format!("{}\n {}", &b64[..8], &b64[8..]);
        for mime in [json!(null), json!(""), json!("Image/PNG; charset=binary")] {
            let r = read_images(&json!([{"data_b64": spaced, "mime": mime}]));
            assert_eq!(r.images.len(), 1, "{mime}: {:?}", r.warnings);
        }
        let r = read_images(&json!([{"data_b64": encode_b64(&jpeg(3, 3)), "mime": "image/jpeg"}]));
        assert_eq!(r.images[0].mime, "image/jpeg", "{:?}", r.warnings);
    }

    #[test]
    fn fakes_and_mismatches_get_main_servers_warnings() {
        let png = sample_png_b64(2, 2);
        let invalid = "image #0 has invalid base64 or non-image bytes; dropped";
        let cases = [
            (json!("x"), "image #0 is not an object; dropped"),
            (
                json!({"data_b64": 1}),
                "image #0 has empty data_b64; dropped",
            ),
            (
                json!({"data_b64": " \n"}),
                "image #0 has empty data_b64; dropped",
            ),
            (json!({"data_b64": "iVBORw0K"}), invalid),
            (json!({"data_b64": "aGk"}), invalid),
            (json!({"data_b64": "a-_b"}), invalid),
            (
                json!({"data_b64": png, "mime": "image/jpeg"}),
                "image #0 mime does not match image bytes; dropped",
            ),
            (
                json!({"data_b64": png, "mime": "image/gif"}),
                "image #0 has unsupported mime 'image/gif'; dropped",
            ),
            (
                json!({"data_b64": png, "mime": 7}),
                "image #0 has unsupported mime 7; dropped",
            ),
        ];
        for (entry, want) in cases {
            let r = read_images(&json!([entry]));
            assert!(r.images.is_empty(), "{entry}");
            assert_eq!(r.warnings, [want], "{entry}");
        }
    }

    #[test]
    fn a_png_with_a_bad_crc_in_any_chunk_is_refused_as_pillow_refuses_it() {
        let png = sample_png(4, 4);
        for kind in [b"iCCP", b"tEXt", b"zTXt", b"pHYs"] {
            let good = with_chunk(&png, kind, b"Comment\0edited", false);
            assert!(judge(&entry(&good)).is_ok(), "a right {kind:?} CRC is fine");
            let bad = with_chunk(&png, kind, b"Comment\0edited", true);
            // The `png` crate skips such a chunk and decodes the picture...
            assert!(Picture::decode(&bad, Format::Png, MAX_PIXELS).is_ok());
            // ...Pillow does not, and neither does main_server.
            let flaw = judge(&entry(&bad)).unwrap_err();
            let name = String::from_utf8_lossy(kind).into_owned();
            assert_eq!(
                flaw.to_string(),
                format!("the PNG has a bad CRC in its {name} chunk")
            );
            let r = read_images(&json!([entry(&bad)]));
            assert!(r.images.is_empty());
            assert_eq!(
                r.warnings,
                ["image #0 has invalid base64 or non-image bytes; dropped"]
            );
        }
    }

    #[test]
    fn cut_short_pictures_are_refused() {
        let png = sample_png(4, 4);
        let without_iend = &png[..png.len() - 12];
        let flaw = judge(&entry(without_iend)).unwrap_err();
        assert_eq!(flaw.to_string(), "the PNG ends before its IEND chunk");
        assert!(judge(&entry(&png[..30])).is_err());
        let jpg = jpeg(16, 16);
        assert!(judge(&entry(&jpg)).is_ok());
        let flaw = judge(&entry(&jpg[..jpg.len() - 2])).unwrap_err();
        assert_eq!(
            flaw.to_string(),
            "the JPEG ends before its end-of-image marker"
        );
    }

    #[test]
    fn only_the_first_two_are_looked_at() {
        let ok = json!({"data_b64": sample_png_b64(1, 1)});
        let r = read_images(&json!([ok, {"data_b64": "@"}, ok, ok]));
        assert_eq!(r.images.len(), 1);
        assert_eq!(
            r.warnings,
            [
                "a tool may return at most 2 image(s); 2 dropped",
                "image #1 has invalid base64 or non-image bytes; dropped"
            ]
        );
        assert_eq!(
            read_images(&json!({"a": 1})).warnings,
            ["tool images must be a list; ignored"]
        );
    }

    #[test]
    fn caps_on_pixels_size_and_prompt() {
        let big = sample_png_b64(3841, 2160);
        assert_eq!(
            judge(&json!({"data_b64": big})).unwrap_err(),
            Flaw::TooManyPixels {
                width: 3841,
                height: 2160
            }
        );
        let huge = "A".repeat(MAX_B64_BYTES + 4);
        let r = read_images(&json!([{"data_b64": huge}]));
        assert_eq!(
            r.warnings,
            ["image #0 is too large (2097156 > 2097152 base64 bytes); dropped"]
        );
        let r = read_images(
            &json!([{"data_b64": sample_png_b64(1, 1), "vision_prompt": "p".repeat(2500)}]),
        );
        assert_eq!(
            r.images[0].vision_prompt.chars().count(),
            VISION_PROMPT_CHARS
        );
        assert_eq!(
            r.warnings,
            ["image #0 vision_prompt is too long (2500 > 2000 characters); truncated"]
        );
    }

    #[test]
    fn a_large_image_is_reencoded_as_jpeg_down_main_servers_ladder() {
        // Noise does not compress: this PNG is well over 500 KiB of base64.
        let mut seed = 1u32;
        let img = Picture::from_fn(1000, 500, |_, _| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            [(seed >> 16) as u8, (seed >> 8) as u8, seed as u8]
        });
        let b64 = STANDARD.encode(img.to_png().unwrap());
        assert!(b64.len() > DELIVER_MAX_B64 && b64.len() <= MAX_B64_BYTES);
        let r = read_images(&json!([{"data_b64": b64, "mime": "image/png"}]));
        let out = &r.images[0];
        assert!(out.reencoded);
        assert_eq!(out.mime, "image/jpeg");
        assert!(
            out.height <= 720 && out.width <= 1280,
            "{}x{}",
            out.width,
            out.height
        );
        assert_eq!(out.width * 500, out.height * 1000, "in proportion");
        assert!(out.data_b64.len() <= DELIVER_MAX_B64);
        assert_eq!(
            r.warnings,
            ["image #0 was re-encoded to fit the delivery budget"]
        );
    }

    #[test]
    fn python_base64_tolerates_stray_bits_but_wants_its_padding() {
        assert_eq!(PYTHON_B64.decode("aGl=").unwrap(), b"hi");
        assert!(PYTHON_B64.decode("aGk").is_err());
        assert_eq!(decode_b64_leniently("aGk").unwrap(), b"hi");
        assert_eq!(decode_b64_leniently("-_8").unwrap(), [0xfb, 0xff]);
    }

    #[test]
    fn python_repr_of_a_declared_mime() {
        assert_eq!(py_repr(&json!("image/gif")), "'image/gif'");
        assert_eq!(py_repr(&json!("it's")), "\"it's\"");
        assert_eq!(py_repr(&json!(["a", true, null])), "['a', True, None]");
        assert_eq!(py_repr(&json!({"k": 1.5})), "{'k': 1.5}");
    }
}
