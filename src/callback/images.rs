//! Pictures that reach the model: before an answer goes to main_server,
//! every image in its `images` is checked by main_server's own rule
//! (`contract::images::judge`, the one the stand-in reads answers with).
//!
//! - One main_server would take is sent exactly as the handler gave it.
//! - One it would refuse but our decoder can read is repaired and sent: a
//!   `mime` that does not match the bytes is corrected, loose base64 (a
//!   `data:` URL, the URL-safe alphabet, missing padding) is rewritten, and
//!   a picture Pillow refuses (a bad CRC in any PNG chunk, a JPEG cut
//!   short, too many pixels, too many bytes) is decoded and encoded again:
//!   a PNG stays a PNG, with clean chunks and no metadata, unless only a
//!   JPEG fits main_server's 2 MiB, as main_server itself would re-encode.
//! - One that cannot be read at all is not sent, and the model reads which
//!   one and why in `output` (`_image_warnings`, the key main_server adds
//!   its own warnings to), instead of main_server's bare "invalid base64 or
//!   non-image bytes".
//!
//! And no picture as text: a string in `output` that repeats the data of an
//! attached image (a tool that also puts the picture in its structured
//! result) becomes a short reference to the attachment.
//!
//! Pure and CPU-bound (a decode is milliseconds): `call` runs it on the
//! blocking pool, and only for an answer that carries `images`.

use serde_json::{Value as Json, json};

use crate::contract::answer::insert_into_output;
use crate::contract::answer::{decoded_size, refer_to_attachments};
use crate::contract::envelope::Envelope;
use crate::contract::images::{
    self as rules, Flaw, MAX_B64_BYTES, MAX_IMAGES, MAX_PIXELS, MAX_REPAIR_PIXELS,
    REPAIR_PIXEL_MULTIPLE,
};
use crate::picture::{Format, Picture};

/// What was done to the images of one answer, for the log and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageReport {
    /// One sentence per image repaired: which, what was wrong, what was sent.
    pub repaired: Vec<String>,
    /// One sentence per image not sent, as the model reads it.
    pub refused: Vec<String>,
}

/// Checks, repairs or refuses the images of `envelope` in place. An answer
/// without `images` is returned untouched at once.
pub fn deliver(envelope: &mut Envelope) -> ImageReport {
    let mut report = ImageReport::default();
    let Some(images) = envelope.images.take() else {
        return report;
    };
    let Json::Array(entries) = images else {
        report.refused.push(format!(
            "the tool's `images` is {}, not a list of images; nothing was attached",
            kind_of(&images)
        ));
        warn_model(&mut envelope.output, &report.refused);
        return report;
    };
    let mut sent = Vec::new();
    let mut references = Vec::new();
    for (index, entry) in entries.iter().enumerate().take(MAX_IMAGES) {
        let delivered = match rules::judge(entry) {
            Ok(_) => entry.clone(),
            Err(flaw) => match repair(entry, &flaw) {
                Ok((fixed, how)) => {
                    report
                        .repaired
                        .push(format!("image #{index}: {flaw}; {how}"));
                    fixed
                }
                Err(why) => {
                    report
                        .refused
                        .push(format!("image #{index} was not attached: {flaw}{why}"));
                    continue;
                }
            },
        };
        if let Some(Json::String(original)) = entry.get("data_b64") {
            references.push((original.clone(), reference(index, &delivered)));
        }
        sent.push(delivered);
    }
    if entries.len() > MAX_IMAGES {
        let which = if entries.len() == MAX_IMAGES + 1 {
            format!("image #{MAX_IMAGES} was")
        } else {
            format!("images #{MAX_IMAGES} to #{} were", entries.len() - 1)
        };
        report.refused.push(format!(
            "{which} not attached: main_server takes at most {MAX_IMAGES} images per answer"
        ));
    }
    refer_to_attachments(&mut envelope.output, &references);
    warn_model(&mut envelope.output, &report.refused);
    envelope.images = Some(Json::Array(sent));
    envelope.image_repairs.clone_from(&report.repaired);
    report
}

/// Sends `envelope` without its images, the model reading `why` (the
/// check of its images did not end in time).
pub(crate) fn refuse_all(envelope: &mut Envelope, why: String) {
    envelope.images = None;
    warn_model(&mut envelope.output, &[why]);
}

/// What the model reads in place of an attached image's data.
fn reference(index: usize, entry: &Json) -> String {
    let mime = entry.get("mime").and_then(Json::as_str).unwrap_or("image");
    let data = entry.get("data_b64").and_then(Json::as_str).unwrap_or("");
    format!(
        "[image #{index} ({mime}, {}): attached as a picture]",
        decoded_size(data)
    )
}

/// Adds `notes` to the `_image_warnings` main_server's own warnings join.
fn warn_model(output: &mut Json, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    let mut all: Vec<Json> = output
        .get("_image_warnings")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    all.extend(notes.iter().cloned().map(Json::String));
    insert_into_output(output, "_image_warnings", Json::Array(all));
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

/// A repaired entry and how it was repaired, or why it cannot be (a clause
/// that follows the flaw).
fn repair(entry: &Json, flaw: &Flaw) -> Result<(Json, String), String> {
    let Json::Object(original) = entry else {
        return Err(String::new());
    };
    let Some(Json::String(raw)) = original.get("data_b64") else {
        return Err(String::new());
    };
    if matches!(flaw, Flaw::NoData) {
        return Err(String::new());
    }
    let text: String = raw.split_whitespace().collect();
    let text = match text.find(";base64,") {
        Some(at) if text.starts_with("data:") => &text[at + 8..],
        _ => &text[..],
    };
    let Some(bytes) = rules::decode_b64_leniently(text) else {
        return Err(", and it is not base64 in any alphabet".into());
    };
    let (b64, format, how) = match rules::judge_bytes(&bytes) {
        // Only the text was wrong (loose base64, a `mime` that lies):
        // the bytes go as they are.
        Ok((format, ..)) if text.len() <= MAX_B64_BYTES => {
            let how = match flaw {
                Flaw::MimeMismatch { .. } | Flaw::UnsupportedMime(_) => {
                    format!("sent as {}", rules::mime_of(format))
                }
                _ => "sent as strict base64".to_owned(),
            };
            (rules::encode_b64(&bytes), format, how)
        }
        _ => reencode(&bytes)?,
    };
    let mut fixed = original.clone();
    fixed.insert("mime".into(), json!(rules::mime_of(format)));
    fixed.insert("data_b64".into(), Json::String(b64));
    let fixed = Json::Object(fixed);
    // Whatever was done, main_server must take the result.
    rules::judge(&fixed).map_err(|e| format!(", and its repair failed too ({e})"))?;
    Ok((fixed, how))
}

/// Decodes what Pillow would not read and encodes it clean: a PNG as a
/// PNG without metadata, a JPEG as a JPEG; scaled down to main_server's
/// pixel cap, and as JPEG when no PNG fits its 2 MiB.
fn reencode(bytes: &[u8]) -> Result<(String, Format, String), String> {
    let Some(format) = rules::sniff(bytes) else {
        return Err(other_format(bytes).map_or_else(String::new, |name| {
            format!(", and it is {name}, which main_server does not take")
        }));
    };
    // The size from the header, before anything is decoded: a picture of
    // a few hundred bytes may claim billions of pixels.
    let (w, h) = Picture::dimensions(bytes, format)
        .map_err(|e| format!(", and it does not decode at all ({e})"))?;
    if u64::from(w) * u64::from(h) > MAX_REPAIR_PIXELS {
        return Err(format!(
            ", and it is too large to scale down: the sidecar decodes pictures of at most {MAX_REPAIR_PIXELS} pixels ({REPAIR_PIXEL_MULTIPLE} times main_server's 3840x2160), and its header says {w}x{h}"
        ));
    }
    let picture = Picture::decode(bytes, format, MAX_REPAIR_PIXELS)
        .map_err(|e| format!(", and it does not decode at all ({e})"))?;
    let picture = within_pixel_cap(picture);
    let (w, h) = (picture.width(), picture.height());
    if format == Format::Png {
        let png = picture
            .to_png()
            .map_err(|e| format!(", and it could not be encoded again ({e})"))?;
        let b64 = rules::encode_b64(&png);
        if b64.len() <= MAX_B64_BYTES {
            let size = decoded_size(&b64);
            let how = format!("re-encoded as a clean PNG ({w}x{h}, {size})");
            return Ok((b64, Format::Png, how));
        }
    }
    for quality in [90, 80, 65, 50] {
        let jpeg = rules::encode_jpeg(&picture, quality)
            .ok_or(", and it could not be encoded again as JPEG")?;
        let b64 = rules::encode_b64(&jpeg);
        if b64.len() <= MAX_B64_BYTES {
            let size = decoded_size(&b64);
            let why = if format == Format::Png {
                " (as a PNG it was over main_server's 2 MiB)"
            } else {
                ""
            };
            let how = format!("re-encoded as JPEG{why} ({w}x{h}, {size})");
            return Ok((b64, Format::Jpeg, how));
        }
    }
    Err(", and even as a JPEG it is over main_server's 2 MiB".into())
}

/// The common picture formats main_server does not take, by their magic
/// bytes, to name in the reason.
fn other_format(bytes: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 8] = [
        (b"GIF87a", "gif"),
        (b"GIF89a", "gif"),
        (b"BM", "bmp"),
        (b"II*\0", "tiff"),
        (b"MM\0*", "tiff"),
        (b"\0\0\x01\0", "ico"),
        (b"qoif", "qoi"),
        (b"\x76\x2f\x31\x01", "exr"),
    ];
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Some("webp");
    }
    if bytes.get(4..12).is_some_and(|b| b == b"ftypavif") {
        return Some("avif");
    }
    MAGIC
        .iter()
        .find(|(magic, _)| bytes.starts_with(magic))
        .map(|(_, name)| *name)
}

/// `picture` scaled down, keeping its proportions, to at most
/// main_server's pixel count.
fn within_pixel_cap(picture: Picture) -> Picture {
    let (w, h) = (u64::from(picture.width()), u64::from(picture.height()));
    if w * h <= MAX_PIXELS {
        return picture;
    }
    let scale = (MAX_PIXELS as f64 / (w * h) as f64).sqrt();
    let nw = ((w as f64 * scale).floor() as u32).max(1);
    let nh = ((h as f64 * scale).floor() as u32).max(1);
    picture.resize_exact(nw, nh)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::images::{sample_png, sample_png_b64, with_chunk};
    use crate::contract::model_text;
    use serde_json::Map;

    /// An `images` value's entries as objects, for tests.
    fn entries(e: &Envelope) -> Vec<Map<String, Json>> {
        e.images
            .as_ref()
            .and_then(Json::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_object().cloned()).collect())
            .unwrap_or_default()
    }

    fn envelope(output: Json, images: Json) -> Envelope {
        Envelope {
            images: Some(images),
            ..Envelope::ok(output)
        }
    }

    #[test]
    fn an_answer_without_images_is_left_alone() {
        let mut e = Envelope::ok(json!({"a": 1}));
        assert_eq!(deliver(&mut e), ImageReport::default());
        assert_eq!(e, Envelope::ok(json!({"a": 1})));
    }

    #[test]
    fn a_clean_image_is_sent_exactly_as_given() {
        let images = json!([{"data_b64": sample_png_b64(3, 3), "mime": "image/png", "vision_prompt": "p", "x": 1}]);
        let mut e = envelope(json!("see"), images.clone());
        assert_eq!(deliver(&mut e), ImageReport::default());
        assert_eq!(e.images, Some(images));
        assert_eq!(e.output, json!("see"));
    }

    #[test]
    fn a_png_with_a_bad_ancillary_crc_is_repaired_as_a_clean_png() {
        let bad = with_chunk(&sample_png(8, 6), b"iCCP", b"icc\0\0junk", true);
        let images = json!([{"data_b64": rules::encode_b64(&bad), "mime": "image/png", "vision_prompt": "look"}]);
        let mut e = envelope(json!("see"), images);
        let report = deliver(&mut e);
        assert_eq!(report.refused, Vec::<String>::new());
        assert_eq!(report.repaired.len(), 1);
        assert!(
            report.repaired[0].starts_with(
                "image #0: the PNG has a bad CRC in its iCCP chunk; re-encoded as a clean PNG (8x6, "
            ),
            "{report:?}"
        );
        let sent = &entries(&e)[0];
        assert_eq!(sent["mime"], "image/png");
        assert_eq!(sent["vision_prompt"], "look");
        assert!(rules::judge(&Json::Object(sent.clone())).is_ok());
        let bytes = rules::decode_b64_leniently(sent["data_b64"].as_str().unwrap()).unwrap();
        let pixels = Picture::decode(&bytes, Format::Png, MAX_PIXELS)
            .unwrap()
            .to_rgb();
        let want = Picture::decode(&sample_png(8, 6), Format::Png, MAX_PIXELS)
            .unwrap()
            .to_rgb();
        assert_eq!(pixels, want, "the same picture");
        assert_eq!(e.output, json!("see"), "the model is not bothered");
        assert_eq!(e.image_repairs, report.repaired);
    }

    #[test]
    fn a_lying_mime_and_loose_base64_are_corrected_without_re_encoding() {
        let png = sample_png_b64(24, 24);
        let url_safe = png.replace('+', "-").replace('/', "_");
        assert_ne!(url_safe, png);
        let data_url = format!("data:image/png;base64,{}", png.trim_end_matches('='));
        for (entry, how) in [
            (
                json!({"data_b64": png, "mime": "image/jpeg"}),
                "sent as image/png",
            ),
            (
                json!({"data_b64": png, "mime": "image/webp"}),
                "sent as image/png",
            ),
            (json!({"data_b64": data_url}), "sent as strict base64"),
            (json!({"data_b64": url_safe}), "sent as strict base64"),
        ] {
            let mut e = envelope(json!(1), json!([entry]));
            let report = deliver(&mut e);
            assert!(report.repaired[0].ends_with(how), "{entry}: {report:?}");
            assert_eq!(entries(&e)[0]["data_b64"], png, "{entry}");
            assert_eq!(entries(&e)[0]["mime"], "image/png", "{entry}");
        }
    }

    #[test]
    fn a_picture_too_large_for_main_server_is_scaled_to_fit() {
        let big = sample_png_b64(3900, 2160);
        let mut e = envelope(json!(1), json!([{"data_b64": big}]));
        let report = deliver(&mut e);
        assert!(report.repaired[0].contains("3840x2160"), "{report:?}");
        let sent = Json::Object(entries(&e)[0].clone());
        let accepted = rules::judge(&sent).unwrap();
        assert!(u64::from(accepted.width) * u64::from(accepted.height) <= MAX_PIXELS);
    }

    #[test]
    fn a_decompression_bomb_is_refused_from_its_header_without_decoding() {
        use crate::contract::images::decompression_bomb;
        for format in [Format::Jpeg, Format::Png] {
            let bomb = decompression_bomb(format, 65500, 65500);
            assert!(bomb.len() < 1024, "a bomb is small: {} bytes", bomb.len());
            assert_eq!(Picture::dimensions(&bomb, format).unwrap(), (65500, 65500));
            let mut e = envelope(
                json!("see"),
                json!([{"data_b64": rules::encode_b64(&bomb)}]),
            );
            let report = deliver(&mut e);
            assert!(report.repaired.is_empty(), "{report:?}");
            assert_eq!(report.refused.len(), 1, "{report:?}");
            assert_eq!(
                report.refused[0],
                "image #0 was not attached: it is 65500x65500 pixels, more than the 3840x2160 main_server takes, and it is too large to scale down: the sidecar decodes pictures of at most 16588800 pixels (2 times main_server's 3840x2160), and its header says 65500x65500"
            );
            assert_eq!(e.output["_image_warnings"][0], report.refused[0]);
        }
        // One pixel row over the repair budget is enough to be refused
        // (within it, a picture is scaled: the test above).
        let over = decompression_bomb(Format::Jpeg, 4073, 4073);
        const { assert!(4073 * 4073 > MAX_REPAIR_PIXELS && 4073 * 4072 <= MAX_REPAIR_PIXELS) };
        let mut e = envelope(json!(1), json!([{"data_b64": rules::encode_b64(&over)}]));
        let report = deliver(&mut e);
        assert!(
            report.refused[0].ends_with("its header says 4073x4073"),
            "{report:?}"
        );
    }

    #[test]
    fn what_cannot_be_read_is_refused_and_the_model_reads_why() {
        let gif = rules::encode_b64(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;");
        let images = json!([{"data_b64": "%%%"}, {"data_b64": gif}]);
        let mut e = envelope(json!("done"), images);
        let report = deliver(&mut e);
        assert!(report.repaired.is_empty());
        assert_eq!(e.images, Some(json!([])));
        assert_eq!(e.output["result"], "done");
        assert_eq!(report.refused.len(), 2, "{report:?}");
        assert!(
            report.refused[0]
                .starts_with("image #0 was not attached: its `data_b64` is not strict base64"),
            "{report:?}"
        );
        assert!(report.refused[0].ends_with("and it is not base64 in any alphabet"));
        assert!(
            report.refused[1].ends_with(
                "its bytes are neither a PNG nor a JPEG, and it is gif, which main_server does not take"
            ),
            "{report:?}"
        );
        let text = model_text(&e.output);
        for note in &report.refused {
            assert!(text.contains(note.as_str()), "{text}");
        }
    }

    #[test]
    fn a_cut_png_main_server_takes_no_part_of_is_refused_with_its_reason() {
        let cut = rules::encode_b64(&sample_png(4, 4)[..45]);
        let mut e = envelope(json!({"k": 1}), json!([{"data_b64": cut}]));
        let report = deliver(&mut e);
        assert_eq!(report.refused.len(), 1, "{report:?}");
        assert!(
            report.refused[0].starts_with(
                "image #0 was not attached: the PNG ends inside its IDAT chunk, and it does not decode at all"
            ),
            "{report:?}"
        );
        assert_eq!(e.output["k"], 1);
        assert_eq!(e.output["_image_warnings"][0], report.refused[0]);
    }

    #[test]
    fn images_past_the_second_are_refused_with_a_reason() {
        let ok = json!({"data_b64": sample_png_b64(1, 1)});
        let mut e = envelope(json!({}), json!([ok, ok, ok]));
        let report = deliver(&mut e);
        assert_eq!(entries(&e).len(), 2);
        assert_eq!(
            report.refused,
            ["image #2 was not attached: main_server takes at most 2 images per answer"]
        );
        let mut e = envelope(json!({}), json!({"data_b64": "x"}));
        let report = deliver(&mut e);
        assert!(report.refused[0].contains("is an object, not a list"));
        assert_eq!(e.images, None);
    }

    #[test]
    fn the_model_reads_a_reference_not_the_data_of_an_attached_picture() {
        let png = sample_png_b64(40, 40);
        let output = json!({"picture": {"data": png, "mimeType": "image/png"},
            "url": format!("data:image/png;base64,{png}"), "name": "a.png"});
        let mut e = envelope(output, json!([{"data_b64": png, "mime": "image/png"}]));
        deliver(&mut e);
        let text = model_text(&e.output);
        assert!(!text.contains(&png[..64]), "{text}");
        let want = format!(
            "[image #0 (image/png, {}): attached as a picture]",
            decoded_size(&png)
        );
        assert_eq!(e.output["picture"]["data"], want);
        assert_eq!(e.output["url"], want);
        assert_eq!(e.output["name"], "a.png");
        assert_eq!(
            entries(&e)[0]["data_b64"],
            png,
            "the picture itself still goes"
        );
    }
}
