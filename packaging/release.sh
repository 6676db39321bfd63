#!/usr/bin/env bash
# Builds the release archives, from Linux, into target/dist/:
#
#   neko-sidecar-VERSION-x86_64-pc-windows-gnu.zip
#     neko-sidecar.exe, agent.toml.example (packaging/windows/agent.toml.example:
#     Windows paths and commands), examples/ (manifests and handlers), README.md
#   neko-sidecar-VERSION-x86_64-unknown-linux-musl.tar.gz
#     neko-sidecar (static: runs on any x86_64 Linux, with no glibc version to
#     match), agent.toml.example, examples/, packaging/agent.toml and
#     systemd/ (README.md, "Installing by hand"), README.md
#   SHA256SUMS (of both, in `sha256sum -c` form)
#
# Each archive holds one folder named like the archive. The archives are
# reproducible: every file gets the time of the last commit
# (SOURCE_DATE_EPOCH overrides), the order is sorted, tar records no owner
# and gzip no name or time.
#
#   packaging/release.sh                 # both archives
#   packaging/release.sh --check         # ... then unpack each and check it (as CI does)
#   RELEASE_TARGETS=x86_64-unknown-linux-musl packaging/release.sh
#
# --check unpacks each archive into a temporary folder and, from there, runs
# `check --config agent.toml.example` and `demo` (the Windows one under Wine,
# through .ci/windows-env); the demo must end with every step ok.
#
# Installs what a clean machine lacks: the rustup targets, Debian's mingw-w64
# (the Windows target's linker), zip. The musl target needs no C toolchain of
# its own: the crate and its dependencies build no C code for it.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

check=0
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    *) echo "usage: packaging/release.sh [--check]" >&2; exit 2 ;;
  esac
done

targets="${RELEASE_TARGETS:-x86_64-pc-windows-gnu x86_64-unknown-linux-musl}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
[ -n "$version" ] || { echo "no version in Cargo.toml" >&2; exit 1; }
target_dir="${CARGO_TARGET_DIR:-target}"
dist="$target_dir/dist"
mkdir -p "$dist"
# Absolute: the archives are written from a staging folder.
dist="$(cd "$dist" && pwd)"
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
apt_install() {
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
need_zip=0
for t in $targets; do
  rustup target list --installed | grep -qx "$t" || rustup target add "$t"
  case "$t" in
    *-windows-gnu)
      need_zip=1
      command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || apt_install gcc-mingw-w64-x86-64 ;;
  esac
done
if [ "$need_zip" = 1 ]; then
  command -v zip >/dev/null 2>&1 || apt_install zip
  [ "$check" = 0 ] || command -v unzip >/dev/null 2>&1 || apt_install unzip
fi
[ "$check" = 0 ] || command -v file >/dev/null 2>&1 || apt_install file

mkdir -p "$dist"
archives=()
for t in $targets; do
  cargo build --release --locked --target "$t" --bin neko-sidecar
  name="neko-sidecar-$version-$t"
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT
  dir="$stage/$name"
  mkdir -p "$dir/examples/tools/schemas" "$dir/examples/handlers"
  cp examples/tools/*.toml "$dir/examples/tools/"
  cp examples/tools/schemas/* "$dir/examples/tools/schemas/"
  cp examples/handlers/* "$dir/examples/handlers/"
  cp README.md "$dir/"
  case "$t" in
    *-windows-*)
      cp "$target_dir/$t/release/neko-sidecar.exe" "$dir/"
      cp packaging/windows/agent.toml.example "$dir/agent.toml.example"
      archive="$name.zip" ;;
    *)
      install -m 0755 "$target_dir/$t/release/neko-sidecar" "$dir/"
      cp agent.toml.example "$dir/"
      mkdir -p "$dir/packaging" "$dir/systemd"
      cp packaging/agent.toml "$dir/packaging/"
      cp systemd/neko-sidecar.service systemd/exec-handlers.conf.example "$dir/systemd/"
      archive="$name.tar.gz" ;;
  esac
  find "$dir" -exec touch -h -d "@$epoch" {} +
  rm -f "$dist/$archive"
  case "$archive" in
    *.zip)
      (cd "$stage" && find "$name" | LC_ALL=C sort | zip -q -X -@ "$dist/$archive") ;;
    *.tar.gz)
      tar -C "$stage" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
        -cf - "$name" | gzip -n -9 >"$dist/$archive" ;;
  esac
  rm -rf "$stage"
  trap - EXIT
  archives+=("$archive")
  echo "built $dist/$archive ($(du -k "$dist/$archive" | cut -f1) KiB)"
done

(cd "$dist" && sha256sum "${archives[@]}" >SHA256SUMS && cat SHA256SUMS)

[ "$check" = 1 ] || exit 0

# From each unpacked archive, as its user would: the config checks, and the
# demo runs every step it can (a step whose interpreter is missing is
# skipped, and says so) with none failing.
(cd "$dist" && sha256sum -c --quiet SHA256SUMS)
for archive in "${archives[@]}"; do
  unpacked="$(mktemp -d)"
  trap 'rm -rf "$unpacked"' EXIT
  case "$archive" in
    *.zip)
      (cd "$unpacked" && unzip -q "$dist/$archive")
      # Under Wine, from the unpacked folder (so relative paths resolve
      # as they would for a user who unzipped it).
      (cd "$unpacked/${archive%.zip}" &&
        "$root/.ci/windows-env" wine neko-sidecar.exe check --config agent.toml.example &&
        "$root/.ci/windows-env" wine neko-sidecar.exe demo)
      ;;
    *.tar.gz)
      tar -C "$unpacked" -xzf "$dist/$archive"
      bin="$unpacked/${archive%.tar.gz}/neko-sidecar"
      # "statically linked", or "static-pie linked" for a static PIE (what
      # Rust builds for musl): either way, no dynamic loader and no libc.
      file "$bin" | grep -Eq 'static(ally|-pie) linked' || { file "$bin"; echo "$bin is not statically linked" >&2; exit 1; }
      (cd "$unpacked/${archive%.tar.gz}" &&
        ./neko-sidecar check --config agent.toml.example &&
        ./neko-sidecar demo)
      ;;
  esac
  echo "checked $archive: check and demo pass from the unpacked archive"
  rm -rf "$unpacked"
  trap - EXIT
done
