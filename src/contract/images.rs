//! main_server's image rules (CONTRACT.md, rule 7): which entries of an
//! envelope's `images` reach the model, and the warnings for the rest.
//!
//! main_server is the one judge of images, so the sidecar forwards them as
//! the handler gave them and only the stand-in runs these rules: the first
//! two entries are looked at; each must be an object whose `data_b64` is
//! strict base64 of a real JPEG or PNG that decodes fully, within the pixel
//! and size caps, with a `mime` (optional) that matches the bytes. A large
//! image is re-encoded as JPEG, as main_server does to fit a turn.

use std::io::Cursor;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use image::{ImageFormat, ImageReader};
use serde::Serialize;
use serde_json::Value as Json;

/// Only this many entries of `images` are looked at.
pub(crate) const MAX_IMAGES: usize = 2;
/// The largest `data_b64` accepted, in bytes of base64 text.
pub(crate) const MAX_B64_BYTES: usize = 2 * 1024 * 1024;
/// The largest image accepted, in pixels (3840 x 2160).
pub(crate) const MAX_PIXELS: u64 = 3840 * 2160;
/// Above this much base64, an image is re-encoded as JPEG to fit.
pub(crate) const REENCODE_ABOVE_B64: usize = 500 * 1024;
/// A longer `vision_prompt` is cut to this many characters.
pub(crate) const VISION_PROMPT_CHARS: usize = 2000;

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

/// The images accepted from one `images` value, and why others were not.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ImageReading {
    pub images: Vec<Image>,
    pub warnings: Vec<String>,
}

/// Applies the rules to an envelope's `images` value.
pub(crate) fn read_images(value: &Json) -> ImageReading {
    let mut out = ImageReading::default();
    let Json::Array(entries) = value else {
        out.warnings
            .push("images must be a list; ignored".to_owned());
        return out;
    };
    for (i, entry) in entries.iter().take(MAX_IMAGES).enumerate() {
        match read_image(entry) {
            Ok(img) => out.images.push(img),
            Err(why) => out
                .warnings
                .push(format!("image {}: {why}; ignored", i + 1)),
        }
    }
    if entries.len() > MAX_IMAGES {
        out.warnings.push(format!(
            "only the first {MAX_IMAGES} images are used; {} more ignored",
            entries.len() - MAX_IMAGES
        ));
    }
    out
}

fn read_image(entry: &Json) -> Result<Image, String> {
    let Json::Object(o) = entry else {
        return Err("not an object".into());
    };
    let Some(Json::String(raw)) = o.get("data_b64") else {
        return Err("data_b64 must be a string".into());
    };
    let b64: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
    if b64.len() > MAX_B64_BYTES {
        return Err(format!(
            "data_b64 is {} bytes, more than the {MAX_B64_BYTES} allowed",
            b64.len()
        ));
    }
    let bytes = STANDARD
        .decode(&b64)
        .map_err(|e| format!("data_b64 is not valid base64 ({e})"))?;
    let format = sniff(&bytes).ok_or("data_b64 is not a JPEG or PNG image")?;
    let actual = mime_of(format);
    match o.get("mime") {
        None | Some(Json::Null) => {}
        Some(Json::String(m)) if m == actual => {}
        Some(Json::String(m)) if m == "image/png" || m == "image/jpeg" => {
            return Err(format!("mime says {m} but the data is {actual}"));
        }
        Some(other) => {
            return Err(format!(
                "mime must be \"image/jpeg\" or \"image/png\", not {other}"
            ));
        }
    }
    let (width, height) = ImageReader::with_format(Cursor::new(&bytes), format)
        .into_dimensions()
        .map_err(|e| format!("the {actual} does not decode ({e})"))?;
    if u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(format!(
            "{width}x{height} is more than the 3840x2160 pixels allowed"
        ));
    }
    let decoded = image::load_from_memory_with_format(&bytes, format)
        .map_err(|e| format!("the {actual} does not decode ({e})"))?;
    let vision_prompt = match o.get("vision_prompt") {
        Some(Json::String(p)) => p.chars().take(VISION_PROMPT_CHARS).collect(),
        _ => String::new(),
    };
    let (mime, data_b64, reencoded) = if b64.len() > REENCODE_ABOVE_B64 {
        ("image/jpeg", reencode_as_jpeg(&decoded)?, true)
    } else {
        (actual, b64, false)
    };
    Ok(Image {
        mime,
        width,
        height,
        data_b64_len: data_b64.len(),
        data_b64,
        vision_prompt,
        reencoded,
    })
}

/// What the first bytes say the image is.
fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(ImageFormat::Png)
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(ImageFormat::Jpeg)
    } else {
        None
    }
}

fn mime_of(format: ImageFormat) -> &'static str {
    if format == ImageFormat::Png {
        "image/png"
    } else {
        "image/jpeg"
    }
}

/// Lower JPEG qualities until the base64 fits `REENCODE_ABOVE_B64` (the
/// last try is kept even when it does not).
fn reencode_as_jpeg(img: &image::DynamicImage) -> Result<String, String> {
    let rgb = img.to_rgb8();
    let mut last = String::new();
    for quality in [85, 70, 55, 40, 25] {
        let mut buf = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut buf, quality)
            .encode_image(&rgb)
            .map_err(|e| format!("could not be re-encoded as JPEG ({e})"))?;
        last = STANDARD.encode(&buf);
        if last.len() <= REENCODE_ABOVE_B64 {
            break;
        }
    }
    Ok(last)
}

/// A real PNG of `w` x `h` pixels, as base64: for tests and examples.
pub fn sample_png_b64(w: u32, h: u32) -> String {
    let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 128]));
    let mut buf = Cursor::new(Vec::new());
    // Encoding an in-memory RGB image as PNG cannot fail.
    let _ = img.write_to(&mut buf, ImageFormat::Png);
    STANDARD.encode(buf.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_real_png_is_accepted_with_its_size_and_prompt() {
        let b64 = sample_png_b64(4, 3);
        let r = read_images(&json!([{"data_b64": b64, "mime": "image/png", "vision_prompt": 7}]));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let img = &r.images[0];
        assert_eq!((img.mime, img.width, img.height), ("image/png", 4, 3));
        assert_eq!(img.vision_prompt, "", "a non-string prompt becomes empty");
        assert!(!img.reencoded);
    }

    #[test]
    fn whitespace_is_removed_and_mime_is_optional() {
        let b64 = sample_png_b64(2, 2);
        let spaced = format!("{}\n {}", &b64[..8], &b64[8..]);
        let r = read_images(&json!([{"data_b64": spaced}]));
        assert_eq!(r.images.len(), 1, "{:?}", r.warnings);
    }

    #[test]
    fn fakes_and_mismatches_are_refused_with_a_reason() {
        let png = sample_png_b64(2, 2);
        let cases = [
            (json!("x"), "not an object"),
            (json!({"data_b64": 1}), "must be a string"),
            (json!({"data_b64": "iVBORw0K"}), "not a JPEG or PNG"),
            (json!({"data_b64": "aGk"}), "not valid base64"),
            (json!({"data_b64": "a-_b"}), "not valid base64"),
            (
                json!({"data_b64": png, "mime": "image/jpeg"}),
                "but the data is image/png",
            ),
            (
                json!({"data_b64": png, "mime": "image/gif"}),
                "mime must be",
            ),
        ];
        for (entry, want) in cases {
            let r = read_images(&json!([entry]));
            assert!(r.images.is_empty(), "{entry}");
            assert!(r.warnings[0].contains(want), "{entry}: {:?}", r.warnings);
        }
        // A PNG signature over truncated data does not decode.
        let truncated = STANDARD.encode(&STANDARD.decode(&png).unwrap()[..30]);
        let r = read_images(&json!([{"data_b64": truncated}]));
        assert!(
            r.warnings[0].contains("does not decode"),
            "{:?}",
            r.warnings
        );
    }

    #[test]
    fn only_the_first_two_are_looked_at() {
        let ok = json!({"data_b64": sample_png_b64(1, 1)});
        let r = read_images(&json!([ok, {"data_b64": "@"}, ok, ok]));
        assert_eq!(r.images.len(), 1);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(r.warnings[1].contains("2 more ignored"));
        assert!(read_images(&json!({"a": 1})).warnings[0].contains("must be a list"));
    }

    #[test]
    fn caps_on_pixels_size_and_prompt() {
        let big = sample_png_b64(3841, 2160);
        let r = read_images(&json!([{"data_b64": big}]));
        assert!(r.warnings[0].contains("3840x2160"), "{:?}", r.warnings);
        let huge = "A".repeat(MAX_B64_BYTES + 4);
        let r = read_images(&json!([{"data_b64": huge}]));
        assert!(r.warnings[0].contains("more than the"), "{:?}", r.warnings);
        let r = read_images(
            &json!([{"data_b64": sample_png_b64(1, 1), "vision_prompt": "p".repeat(2500)}]),
        );
        assert_eq!(
            r.images[0].vision_prompt.chars().count(),
            VISION_PROMPT_CHARS
        );
    }

    #[test]
    fn a_large_image_is_reencoded_as_jpeg() {
        // Noise does not compress: this PNG is well over 500 KiB of base64.
        let mut seed = 1u32;
        let img = image::RgbImage::from_fn(600, 600, |_, _| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            image::Rgb([(seed >> 16) as u8, (seed >> 8) as u8, seed as u8])
        });
        let mut buf = Cursor::new(Vec::new());
        img.write_to(&mut buf, ImageFormat::Png).unwrap();
        let b64 = STANDARD.encode(buf.into_inner());
        assert!(b64.len() > REENCODE_ABOVE_B64);
        let r = read_images(&json!([{"data_b64": b64, "mime": "image/png"}]));
        let out = &r.images[0];
        assert!(out.reencoded);
        assert_eq!(out.mime, "image/jpeg");
        assert!(out.data_b64.len() < b64.len());
    }
}
