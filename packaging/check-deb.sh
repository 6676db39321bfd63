#!/usr/bin/env bash
# Builds the Debian package and checks it as an operator would get it:
# lintian finds no error, and from the unpacked package, the packaged
# config checks clean with the packaged example manifests copied in, and
# the packaged unit passes packaging/check-unit.sh. Installs cargo-deb and
# lintian when they are missing (CI starts from a clean clone).
#
#   packaging/check-deb.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deb >/dev/null 2>&1; then
  cargo install cargo-deb --locked --version "^3.8"
fi
if ! command -v lintian >/dev/null 2>&1; then
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lintian >/dev/null
fi

deb="$(cargo deb | tail -n 1)"
[ -f "$deb" ] || { echo "cargo deb did not produce a package"; exit 1; }
echo "built $deb"

# Errors fail; the two warnings left are explained in README.md
# ("Installing the Debian package").
lintian --fail-on error "$deb"

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
dpkg-deb -f "$deb" Package Version Depends
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
