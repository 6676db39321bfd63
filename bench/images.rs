//! The cost of the sidecar's image check (issue 27), in process: checking
//! a clean PNG of about 1 MiB (sent as given), repairing the same picture
//! with a bad CRC in its `iCCP` chunk (re-encoded as a clean PNG), and an
//! answer without images (which must pay nothing).
//!
//! `bench/images.sh` runs it as `cargo bench --bench images -- --bench`
//! with `BENCH_IMAGES_DIR` set: the two PNGs are written there for the
//! Pillow baseline (main_server's own check) to read the same bytes, and
//! the median of each figure is printed as `key=value` lines. Without
//! `--bench` (as `cargo test --all-targets` runs it) it does each step once,
//! so the suite proves it still runs, and prints nothing worth reading.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use neko_sidecar::callback::images::deliver;
use neko_sidecar::contract::envelope::Envelope;
use neko_sidecar::contract::images::with_chunk;
use neko_sidecar::picture::{Format, Picture};
use serde_json::json;

fn main() {
    let measuring = std::env::args().any(|a| a == "--bench");
    let rounds = if measuring { 25 } else { 1 };
    let clean = photo_png();
    let broken = with_chunk(&clean, b"iCCP", b"sRGB\0\0an edited profile", true);
    if let Some(dir) = std::env::var_os("BENCH_IMAGES_DIR") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::write(dir.join("clean.png"), &clean).expect("writing clean.png");
        std::fs::write(dir.join("broken.png"), &broken).expect("writing broken.png");
    }
    let answer = |png: &[u8]| Envelope {
        images: Some(json!([{"data_b64": STANDARD.encode(png), "mime": "image/png"}])),
        ..envelope(json!({"file": "photo.png"}))
    };
    let clean_answer = answer(&clean);
    let broken_answer = answer(&broken);
    let plain = envelope(json!({"file": "photo.png", "size": clean.len()}));

    let check = median(rounds, || {
        let mut e = clean_answer.clone();
        let t = Instant::now();
        let report = deliver(&mut e);
        let took = t.elapsed();
        assert!(report.repaired.is_empty() && report.refused.is_empty());
        took
    });
    let repair = median(rounds, || {
        let mut e = broken_answer.clone();
        let t = Instant::now();
        let report = deliver(&mut e);
        let took = t.elapsed();
        assert_eq!(report.repaired.len(), 1, "{report:?}");
        took
    });
    // An answer without images: many, since each is a few nanoseconds.
    const PLAIN_BATCH: u32 = 100_000;
    let nothing = median(rounds, || {
        let mut e = plain.clone();
        let t = Instant::now();
        for _ in 0..PLAIN_BATCH {
            let report = deliver(std::hint::black_box(&mut e));
            std::hint::black_box(report);
        }
        t.elapsed() / PLAIN_BATCH
    });
    println!("png_bytes={}", clean.len());
    println!("png_pixels={}", pixels(&clean));
    println!("rounds={rounds}");
    println!("check_ms={:.3}", check.as_secs_f64() * 1e3);
    println!("repair_ms={:.3}", repair.as_secs_f64() * 1e3);
    println!("no_images_ns={:.1}", nothing.as_secs_f64() * 1e9);
}

fn envelope(output: serde_json::Value) -> Envelope {
    Envelope {
        output,
        is_error: false,
        error: None,
        images: None,
        image_repairs: Vec::new(),
    }
}

/// A photo-like PNG of about 1 MiB: smooth gradients with grain, so that
/// it compresses about as a photo does.
fn photo_png() -> Vec<u8> {
    let (w, h) = (1024u32, 768u32);
    let mut seed = 7u32;
    let img = Picture::from_fn(w, h, |x, y| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let grain = ((seed >> 16) & 0x0f) as u8;
        [
            (x * 255 / w) as u8 ^ grain,
            (y * 255 / h) as u8 ^ grain,
            ((x + y) % 256) as u8,
        ]
    });
    img.to_png().expect("encoding the PNG")
}

fn pixels(png: &[u8]) -> String {
    let img = Picture::decode(png, Format::Png, u64::MAX).expect("decoding the PNG");
    format!("{}x{}", img.width(), img.height())
}

fn median(rounds: usize, mut once: impl FnMut() -> Duration) -> Duration {
    let mut all: Vec<Duration> = (0..rounds).map(|_| once()).collect();
    all.sort();
    all[all.len() / 2]
}
