#!/usr/bin/env bash
# Checks the Debian package as an operator would get it: lintian finds no
# error, the executable in it is the static one, and from the unpacked
# package, the packaged config checks clean with the packaged example
# manifests copied in, and the packaged unit passes packaging/check-unit.sh.
# Given no package, builds one first (`cargo deb` on the static musl build,
# as packaging/release.sh does). Installs cargo-deb, lintian and file (and,
# to build, the musl target and musl-tools) when missing, through .ci/deps.
# packaging/release.sh --check runs it on the package it made.
#
#   packaging/check-deb.sh                                  # build, then check
#   packaging/check-deb.sh target/dist/neko-sidecar_*.deb   # release.sh's
set -euo pipefail
# A package given is named from the caller's folder.
deb="${1:-}"
[ -z "$deb" ] || deb="$(realpath "$deb")"
cd "$(dirname "$0")/.."
# From the one list of what scripts need (.ci/packages); building the
# package also needs the musl target and musl-gcc (ring's C).
need=(lintian file)
[ -n "$deb" ] || need+=(cargo-deb x86_64-unknown-linux-musl musl-gcc)
.ci/deps "${need[@]}"

if [ -z "$deb" ]; then
  musl=x86_64-unknown-linux-musl
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
# The editors' schemas are where the config and the examples name them, and
# are the executable's own.
for f in "$etc/agent.toml" "$docs/tools/"*.toml; do
  target="$(sed -n '1s/^#:schema //p' "$f")"
  case "$target" in
    /*) installed="$root$target" ;;
    *) installed="$(dirname "$f")/$target" ;;
  esac
  [ -f "$installed" ] || { echo "$f names the schema $target, which the package lacks"; exit 1; }
done
for of in manifest config; do
  file="$root/usr/share/doc/neko-sidecar/schemas/$([ $of = config ] && echo agent || echo manifest).schema.json"
  "$root/usr/bin/neko-sidecar" schema "$of" | cmp -s - "$file" || { echo "$file is not \`neko-sidecar schema $of\`"; exit 1; }
done

if command -v systemd-analyze >/dev/null 2>&1; then
  packaging/check-unit.sh "$root/usr/lib/systemd/system/neko-sidecar.service" \
    "$root/usr/bin/neko-sidecar" "$docs/exec-handlers.conf.example"
fi
echo "packaging/check-deb.sh: ok"
