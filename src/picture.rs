//! Pixels: the PNG and JPEG decode, scale and encode that the image rules
//! (`contract::images`), the repair of a tool's images (`callback::images`)
//! and the stand-in MCP server's pictures need, and nothing more.
//!
//! Built on the codecs the `image` crate itself uses (`png`, and
//! `zune-jpeg` with the same lenient options, so a picture decodes here
//! exactly when it decoded there) plus `jpeg-encoder`, without `image`'s
//! colour management and format registry, which cost a third of the
//! release build and which a PNG/JPEG check never used (BENCHMARKS.md,
//! "Build"). Pure: no I/O, no logging.

use std::io::Cursor;

use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

/// The two formats main_server takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
}

/// The most a PNG decode may allocate besides the picture itself (its
/// metadata chunks, the decompressor's window): `image`'s default limit.
/// The picture's own size is bounded by the caller's pixel budget, checked
/// from the header before anything is allocated (`decode`).
const MAX_ALLOC: usize = 512 * 1024 * 1024;
/// The most bytes one pixel takes while a PNG decodes (16-bit RGBA).
const PNG_BYTES_PER_PIXEL: u64 = 8;

/// A decoded picture: 8 bits a sample, 1 (grey), 2 (grey and alpha), 3
/// (RGB) or 4 (RGBA) samples a pixel, rows top to bottom.
#[derive(Clone, PartialEq, Eq)]
pub struct Picture {
    width: u32,
    height: u32,
    channels: u8,
    samples: Vec<u8>,
}

impl std::fmt::Debug for Picture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Picture({}x{}, {} channels)",
            self.width, self.height, self.channels
        )
    }
}

/// The most scans a progressive JPEG may have: each one passes over the
/// whole picture again, so this (zune-jpeg's own default, named here so
/// it is ours) and the pixel budget bound a decode's time.
const MAX_JPEG_SCANS: usize = 100;

/// The JPEG decoder's options as `image` sets them: lenient (a JPEG cut
/// short decodes, grey where data is missing), no size limit of its own
/// (`decode` sets the one the header was checked against).
fn jpeg_options() -> DecoderOptions {
    DecoderOptions::default()
        .set_strict_mode(false)
        .set_max_width(usize::MAX)
        .set_max_height(usize::MAX)
        .jpeg_set_max_scans(MAX_JPEG_SCANS)
}

fn png_decoder(bytes: &[u8], limit: usize) -> png::Decoder<Cursor<&[u8]>> {
    let mut decoder =
        png::Decoder::new_with_limits(Cursor::new(bytes), png::Limits { bytes: limit });
    // 16-bit samples become 8-bit and palettes and low bit depths expand:
    // everything downstream is 8-bit RGB(A) or grey.
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    decoder
}

impl Picture {
    /// A picture from RGB samples (`width * height * 3` bytes).
    ///
    /// # Panics
    /// If `rgb` is not that long: a caller's bug.
    pub fn from_rgb(width: u32, height: u32, rgb: Vec<u8>) -> Picture {
        assert_eq!(rgb.len(), width as usize * height as usize * 3);
        Picture {
            width,
            height,
            channels: 3,
            samples: rgb,
        }
    }

    /// A picture of `width` x `height` whose every pixel is `f(x, y)`.
    pub fn from_fn(width: u32, height: u32, mut f: impl FnMut(u32, u32) -> [u8; 3]) -> Picture {
        let mut rgb = Vec::with_capacity(width as usize * height as usize * 3);
        for y in 0..height {
            for x in 0..width {
                rgb.extend_from_slice(&f(x, y));
            }
        }
        Picture::from_rgb(width, height, rgb)
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// Whether it has colour (RGB) rather than grey samples.
    pub fn has_color(&self) -> bool {
        self.channels >= 3
    }

    /// The size the header gives, without decoding the pixels.
    pub fn dimensions(bytes: &[u8], format: Format) -> Result<(u32, u32), String> {
        match format {
            Format::Png => {
                let mut decoder = png_decoder(bytes, MAX_ALLOC);
                let info = decoder.read_header_info().map_err(|e| e.to_string())?;
                Ok((info.width, info.height))
            }
            Format::Jpeg => {
                let mut decoder =
                    zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), jpeg_options());
                decoder.decode_headers().map_err(|e| e.to_string())?;
                let (w, h) = decoder.dimensions().ok_or("no frame header")?;
                // A JPEG's sides are 16-bit numbers.
                Ok((w as u32, h as u32))
            }
        }
    }

    /// Decodes the whole picture, if its header says it has at most
    /// `max_pixels` pixels: the size is read from the header first, so a
    /// picture of a few hundred bytes that claims 65500x65500 pixels (a
    /// decompression bomb) is refused before anything is allocated for it.
    pub fn decode(bytes: &[u8], format: Format, max_pixels: u64) -> Result<Picture, String> {
        let (w, h) = Picture::dimensions(bytes, format)?;
        let pixels = u64::from(w) * u64::from(h);
        if pixels > max_pixels {
            return Err(format!(
                "it is {w}x{h} pixels ({pixels}), more than the {max_pixels} a picture may have to be decoded"
            ));
        }
        match format {
            Format::Png => decode_png(bytes, pixels),
            Format::Jpeg => decode_jpeg(bytes, w, h),
        }
    }

    /// The picture as RGB samples, alpha dropped and grey spread to all
    /// three channels.
    pub fn to_rgb(&self) -> Vec<u8> {
        match self.channels {
            3 => self.samples.clone(),
            4 => self
                .samples
                .chunks_exact(4)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect(),
            c => self
                .samples
                .chunks_exact(usize::from(c))
                .flat_map(|p| [p[0], p[0], p[0]])
                .collect(),
        }
    }

    /// The grey samples, alpha dropped (for a grey picture).
    fn to_grey(&self) -> Vec<u8> {
        self.samples
            .chunks_exact(usize::from(self.channels))
            .map(|p| p[0])
            .collect()
    }

    /// Scaled to fit `max_w` x `max_h`, keeping its proportions (up or
    /// down, as `image`'s `resize`).
    pub fn resize_within(&self, max_w: u32, max_h: u32) -> Picture {
        let ratio = (f64::from(max_w) / f64::from(self.width))
            .min(f64::from(max_h) / f64::from(self.height));
        let w = ((f64::from(self.width) * ratio).round() as u32).max(1);
        let h = ((f64::from(self.height) * ratio).round() as u32).max(1);
        self.resize_exact(w, h)
    }

    /// Scaled to exactly `w` x `h` with a triangle (bilinear) filter whose
    /// support widens when shrinking, so every source pixel counts (what
    /// `image`'s `FilterType::Triangle` and Pillow's BILINEAR do).
    pub fn resize_exact(&self, w: u32, h: u32) -> Picture {
        let c = usize::from(self.channels);
        let (sw, sh) = (self.width as usize, self.height as usize);
        let (w, h) = (w.max(1), h.max(1));
        // Horizontal pass into floats, then vertical into bytes.
        let across = taps(sw, w as usize);
        let mut mid = vec![0f32; sh * w as usize * c];
        for y in 0..sh {
            let row = &self.samples[y * sw * c..(y + 1) * sw * c];
            for (x, (first, weights)) in across.iter().enumerate() {
                let out = &mut mid[(y * w as usize + x) * c..][..c];
                for (k, wt) in weights.iter().enumerate() {
                    let px = &row[(first + k) * c..][..c];
                    for ch in 0..c {
                        out[ch] += f32::from(px[ch]) * wt;
                    }
                }
            }
        }
        let down = taps(sh, h as usize);
        let stride = w as usize * c;
        let mut samples = vec![0u8; h as usize * stride];
        for (y, (first, weights)) in down.iter().enumerate() {
            let out = &mut samples[y * stride..(y + 1) * stride];
            for (i, o) in out.iter_mut().enumerate() {
                let v: f32 = weights
                    .iter()
                    .enumerate()
                    .map(|(k, wt)| mid[(first + k) * stride + i] * wt)
                    .sum();
                *o = v.round().clamp(0.0, 255.0) as u8;
            }
        }
        Picture {
            width: w,
            height: h,
            channels: self.channels,
            samples,
        }
    }

    /// A PNG of the picture (no metadata), as `image` would write it.
    pub fn to_png(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
        encoder.set_color(match self.channels {
            1 => png::ColorType::Grayscale,
            2 => png::ColorType::GrayscaleAlpha,
            3 => png::ColorType::Rgb,
            _ => png::ColorType::Rgba,
        });
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
        writer
            .write_image_data(&self.samples)
            .map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// A JPEG of the picture at `quality` (1 to 100), its alpha dropped as
    /// JPEG has none; a grey picture stays grey.
    pub fn to_jpeg(&self, quality: u8) -> Result<Vec<u8>, String> {
        let too_large = |_| format!("{}x{} is too large for a JPEG", self.width, self.height);
        let w = u16::try_from(self.width).map_err(too_large)?;
        let h = u16::try_from(self.height).map_err(too_large)?;
        let mut out = Vec::new();
        let encoder = jpeg_encoder::Encoder::new(&mut out, quality);
        let result = if self.has_color() {
            encoder.encode(&self.to_rgb(), w, h, jpeg_encoder::ColorType::Rgb)
        } else {
            encoder.encode(&self.to_grey(), w, h, jpeg_encoder::ColorType::Luma)
        };
        result.map_err(|e| e.to_string())?;
        Ok(out)
    }
}

/// For each output position, the first source position and the weights of
/// the source positions from there: a triangle filter of radius 1, widened
/// by the scale when shrinking, centred on the output pixel's centre.
fn taps(from: usize, to: usize) -> Vec<(usize, Vec<f32>)> {
    let ratio = from as f32 / to as f32;
    let scale = ratio.max(1.0);
    (0..to)
        .map(|o| {
            let centre = (o as f32 + 0.5) * ratio;
            let first = ((centre - scale).floor().max(0.0) as usize).min(from - 1);
            let last = ((centre + scale).ceil() as usize).clamp(first + 1, from);
            let mut weights: Vec<f32> = (first..last)
                .map(|i| (1.0 - ((i as f32 + 0.5 - centre) / scale).abs()).max(0.0))
                .collect();
            let sum: f32 = weights.iter().sum();
            if sum > 0.0 {
                weights.iter_mut().for_each(|w| *w /= sum);
            } else {
                weights = vec![0.0; last - first];
                weights[0] = 1.0;
            }
            (first, weights)
        })
        .collect()
}

fn decode_png(bytes: &[u8], pixels: u64) -> Result<Picture, String> {
    // The picture at its widest samples, plus the decoder's own needs: the
    // header's size was checked, and this keeps the decoder to it.
    let limit = usize::try_from(pixels.saturating_mul(PNG_BYTES_PER_PIXEL))
        .unwrap_or(usize::MAX)
        .saturating_add(MAX_ALLOC);
    let mut reader = png_decoder(bytes, limit)
        .read_info()
        .map_err(|e| e.to_string())?;
    let size = reader
        .output_buffer_size()
        .ok_or("the picture is too large to hold in memory")?;
    let mut samples = vec![0; size];
    let frame = reader.next_frame(&mut samples).map_err(|e| e.to_string())?;
    samples.truncate(frame.buffer_size());
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        // normalize_to_color8 expands palettes.
        png::ColorType::Indexed => return Err("an indexed PNG was not expanded".into()),
    };
    // Rows may be padded to the line size; keep only the pixels.
    let row = frame.width as usize * channels;
    if frame.line_size != row {
        samples = samples
            .chunks(frame.line_size)
            .flat_map(|line| &line[..row])
            .copied()
            .collect();
    }
    Ok(Picture {
        width: frame.width,
        height: frame.height,
        channels: channels as u8,
        samples,
    })
}

fn decode_jpeg(bytes: &[u8], w: u32, h: u32) -> Result<Picture, String> {
    // The decoder itself refuses a frame larger than the header read
    // before (a second frame header cannot grow the picture).
    let options = jpeg_options()
        .set_max_width(w as usize)
        .set_max_height(h as usize);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(|e| e.to_string())?;
    let (width, height) = decoder.dimensions().ok_or("no frame header")?;
    // Grey stays grey; anything else (YCbCr, CMYK, YCCK) becomes RGB.
    let (space, channels) = match decoder.input_colorspace() {
        Some(ColorSpace::Luma | ColorSpace::LumaA) => (ColorSpace::Luma, 1),
        _ => (ColorSpace::RGB, 3),
    };
    decoder.set_options(options.jpeg_set_out_colorspace(space));
    let samples = decoder.decode().map_err(|e| e.to_string())?;
    if samples.len() != width * height * channels {
        return Err(format!(
            "decoded {} bytes for {width}x{height} pixels",
            samples.len()
        ));
    }
    Ok(Picture {
        width: width as u32,
        height: height as u32,
        channels: channels as u8,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: u32, h: u32) -> Picture {
        Picture::from_fn(w, h, |x, y| [(x * 7) as u8, (y * 5) as u8, 200])
    }

    #[test]
    fn a_png_round_trips_exactly() {
        let p = gradient(33, 17);
        let png = p.to_png().unwrap();
        assert_eq!(Picture::dimensions(&png, Format::Png).unwrap(), (33, 17));
        assert_eq!(Picture::decode(&png, Format::Png, 33 * 17).unwrap(), p);
    }

    #[test]
    fn a_jpeg_round_trips_closely_and_grey_stays_grey() {
        let p = gradient(40, 24);
        let jpeg = p.to_jpeg(95).unwrap();
        assert_eq!(Picture::dimensions(&jpeg, Format::Jpeg).unwrap(), (40, 24));
        let back = Picture::decode(&jpeg, Format::Jpeg, 40 * 24).unwrap();
        assert!(back.has_color());
        let worst = back
            .to_rgb()
            .iter()
            .zip(p.to_rgb())
            .map(|(a, b)| a.abs_diff(b))
            .max()
            .unwrap();
        assert!(worst < 24, "quality 95 stays close, was off by {worst}");

        let grey = Picture {
            width: 8,
            height: 8,
            channels: 2,
            samples: (0..128).map(|i| i as u8).collect(),
        };
        let back = Picture::decode(&grey.to_jpeg(90).unwrap(), Format::Jpeg, 64).unwrap();
        assert!(!back.has_color(), "a grey picture is encoded as grey");
    }

    #[test]
    fn an_indexed_and_a_16_bit_png_decode_to_8_bit_samples() {
        for (color, depth, data) in [
            (
                png::ColorType::Indexed,
                png::BitDepth::Eight,
                vec![0u8, 1, 1, 0],
            ),
            (
                png::ColorType::Rgb,
                png::BitDepth::Sixteen,
                [[0xffu8, 0, 0, 0, 0x80, 0x80]; 4].concat(),
            ),
        ] {
            let mut out = Vec::new();
            let mut enc = png::Encoder::new(&mut out, 2, 2);
            enc.set_color(color);
            enc.set_depth(depth);
            if color == png::ColorType::Indexed {
                enc.set_palette(vec![10, 20, 30, 40, 50, 60]);
            }
            let mut w = enc.write_header().unwrap();
            w.write_image_data(&data).unwrap();
            w.finish().unwrap();
            let p = Picture::decode(&out, Format::Png, 4).unwrap();
            assert_eq!((p.width(), p.height(), p.channels), (2, 2, 3));
            let rgb = p.to_rgb();
            if color == png::ColorType::Indexed {
                assert_eq!(&rgb[..6], &[10, 20, 30, 40, 50, 60]);
            } else {
                assert_eq!(
                    &rgb[..3],
                    &[0xff, 0, 0x80],
                    "the high byte of each 16-bit sample"
                );
            }
        }
    }

    #[test]
    fn scaling_keeps_proportions_and_averages() {
        let p = gradient(1000, 500);
        let s = p.resize_within(1280, 240);
        assert_eq!((s.width(), s.height()), (480, 240));
        // A flat picture stays flat whatever the scale.
        let flat = Picture::from_fn(37, 23, |_, _| [90, 120, 250]);
        let small = flat.resize_exact(5, 3);
        assert!(small.to_rgb().chunks(3).all(|px| px == [90, 120, 250]));
        let big = flat.resize_exact(80, 50);
        assert!(big.to_rgb().chunks(3).all(|px| px == [90, 120, 250]));
        // Halving a two-colour stripe pattern averages it.
        let stripes = Picture::from_fn(4, 1, |x, _| if x % 2 == 0 { [0; 3] } else { [200; 3] });
        let half = stripes.resize_exact(2, 1);
        assert!(
            half.to_rgb().iter().all(|&v| (80..=120).contains(&v)),
            "{:?}",
            half.to_rgb()
        );
    }

    #[test]
    fn a_picture_over_the_budget_is_refused_from_its_header() {
        let p = gradient(40, 24);
        for (bytes, format) in [
            (p.to_png().unwrap(), Format::Png),
            (p.to_jpeg(90).unwrap(), Format::Jpeg),
        ] {
            assert!(Picture::decode(&bytes, format, 40 * 24).is_ok());
            assert_eq!(
                Picture::decode(&bytes, format, 40 * 24 - 1).unwrap_err(),
                "it is 40x24 pixels (960), more than the 959 a picture may have to be decoded"
            );
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            &b"\x89PNG\r\n\x1a\nxx"[..],
            &[0xff, 0xd8, 0xff, 0xe0, 0, 2][..],
        ] {
            for f in [Format::Png, Format::Jpeg] {
                assert!(Picture::decode(bytes, f, 1 << 20).is_err());
            }
        }
    }
}
