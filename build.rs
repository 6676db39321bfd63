//! Build script: link-time options that make the release daemon smaller in
//! memory (BENCHMARKS.md, "Idle"). It changes no code, and only the
//! `neko-sidecar` binary of a release build on Linux.
//!
//! - `link/text-layout.ld` puts the functions that start-up and an idle
//!   daemon run at the front of `.text`, together (written by
//!   `bench/layout.sh`). The kernel maps code in blocks of 64 KiB or more
//!   around every page touched, so code scattered over the whole executable
//!   made nearly all of it resident; laid out, about 3 MiB is. The script
//!   only orders sections: a function it does not name is linked as before.
//! - `-z pack-relative-relocs` stores the executable's relocations in a
//!   packed form (DT_RELR) instead of 24 bytes each: the loader reads all of
//!   them at every start, which made about 0.4 MiB resident. glibc learnt
//!   the format in 2.36 and the linker marks the binary as needing it, so it
//!   is only used when the glibc building the binary (the one it will run
//!   with, for a native build) is that recent.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/text-layout.ld");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("PROFILE") != "release" || var("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    let layout = Path::new(&var("CARGO_MANIFEST_DIR")).join("link/text-layout.ld");
    if layout.is_file() {
        // As two arguments: `-Wl,` would split a path with a comma in it.
        println!("cargo:rustc-link-arg-bin=neko-sidecar=-Xlinker");
        println!(
            "cargo:rustc-link-arg-bin=neko-sidecar=--script={}",
            layout.display()
        );
    }
    let native = var("HOST") == var("TARGET");
    if native && var("CARGO_CFG_TARGET_ENV") == "gnu" && glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bin=neko-sidecar=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc is at least `major.minor`, from
/// `getconf GNU_LIBC_VERSION` ("glibc 2.36"); false if that cannot be told.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.split_whitespace().nth(1) else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}
