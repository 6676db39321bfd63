#!/usr/bin/env bash
# Checks the Debian package as an operator would get it: lintian finds no
# error, the executable in it is the static one, and from the unpacked
# package, the packaged config checks clean with the packaged example
# manifests copied in, and the packaged unit passes packaging/check-unit.sh.
# Given no package, builds one first (`cargo deb` on the static musl build,
# as packaging/release.sh does). Installs cargo-deb, lintian and file when
# they are missing (CI starts from a clean clone). packaging/release.sh --check
# runs it on the package it made.
#
#   packaging/check-deb.sh                                  # build, then check
#   packaging/check-deb.sh target/dist/neko-sidecar_*.deb   # release.sh's
set -euo pipefail
# A package given is named from the caller's folder.
deb="${1:-}"
[ -z "$deb" ] || deb="$(realpath "$deb")"
cd "$(dirname "$0")/.."
sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo

if [ -z "$deb" ] && ! command -v cargo-deb >/dev/null 2>&1; then
  cargo install cargo-deb --locked --version "^3.8"
fi
need=()
command -v lintian >/dev/null 2>&1 || need+=(lintian)
command -v file >/dev/null 2>&1 || need+=(file)
if [ ${#need[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ -z "$deb" ]; then
  musl=x86_64-unknown-linux-musl
  rustup target list --installed | grep -qx "$musl" || rustup target add "$musl"
  deb="$(cargo deb --target "$musl" | tail -n 1)"
  [ -f "$deb" ] || { echo "cargo deb did not produce a package"; exit 1; }
  echo "built $deb"
fi
[ -f "$deb" ] || { echo "no package at $deb"; exit 1; }

# Errors fail; the two warnings left are explained in README.md
# ("Installing the Debian package").
lintian --fail-on error "$deb"

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
dpkg-deb -f "$deb" Package Version Depends
# As release.sh checks the tarball's: "static-pie linked" for a static PIE.
file "$root/usr/bin/neko-sidecar" | grep -Eq 'static(ally|-pie) linked' || {
  echo "the packaged executable is not the static build: $(file -b "$root/usr/bin/neko-sidecar")"; exit 1; }
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/neko-sidecar/agent.toml || {
  echo "/etc/neko-sidecar/agent.toml is not a conffile"; exit 1; }
if [ -e "$root/usr/lib/systemd/system/multi-user.target.wants" ] || [ -e "$root/etc/systemd" ]; then
  echo "the package enables its unit; the operator must enable it"; exit 1
fi

# What postinst makes, then the operator's first step: manifests in tools.d.
etc="$root/etc/neko-sidecar"
docs="$root/usr/share/doc/neko-sidecar/examples"
mkdir -p "$etc/tools.d"
cp -r "$docs/tools/." "$etc/tools.d/"
cp -r "$docs/handlers" "$etc/handlers"
"$root/usr/bin/neko-sidecar" check --config "$etc/agent.toml"

if command -v systemd-analyze >/dev/null 2>&1; then
  packaging/check-unit.sh "$root/usr/lib/systemd/system/neko-sidecar.service" \
    "$root/usr/bin/neko-sidecar" "$docs/exec-handlers.conf.example"
fi
echo "packaging/check-deb.sh: ok"
