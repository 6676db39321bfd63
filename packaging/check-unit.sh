#!/usr/bin/env bash
# Checks a neko-sidecar systemd unit: it must load cleanly with the
# exec-handlers drop-in example installed, and keep an exposure score of
# 2.0 or lower. Used by .ci/run (the unit in the repository) and by
# packaging/check-deb.sh (the unit in the package).
#
#   packaging/check-unit.sh UNIT BINARY DROP_IN_EXAMPLE
#
# `verify` refuses a unit whose ExecStart binary is missing, so it checks a
# copy pointing at BINARY; everything else is verbatim.
set -euo pipefail
unit=$1 bin=$2 dropin=$3
name=$(basename "$unit")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
sed "s#/usr/bin/neko-sidecar#$bin#g" "$unit" >"$dir/$name"
mkdir "$dir/$name.d"
cp "$dropin" "$dir/$name.d/exec-handlers.conf"
# verify exits 0 on unknown keys and mere warnings: any output fails.
out="$(SYSTEMD_UNIT_PATH="$dir:" systemd-analyze verify --man=no "$name" 2>&1)" || {
  echo "$out"; echo "systemd-analyze verify failed on $unit"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "systemd-analyze verify reported problems in $unit"; exit 1; fi
# The score of the unit as given, without the drop-in's relaxations.
score="$(systemd-analyze security --offline=true "$unit" 2>/dev/null |
  sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')"
echo "systemd-analyze security: $unit exposure $score"
if [ -z "$score" ] || ! awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }'; then
  echo "the unit's exposure score must be 2.0 or lower"; exit 1
fi
