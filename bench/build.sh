#!/usr/bin/env bash
# The first ten minutes of a new user, measured (BENCHMARKS.md, "Build"):
# from a fresh clone of HEAD with an empty target directory, the README's
# two set-up commands (in its order, and the other order on a target
# directory of its own), each timed (wall and CPU = user + sys), then the
# release build of `cargo install --path .`, against
# ripgrep's release build (`cargo install ripgrep --locked`) in the same
# run, and the ten units that took longest in the release build
# (`cargo build --timings`). Crates come from the local registry cache, as
# on a machine that has built anything before; nothing else should run.
#
#   bench/build.sh                 # about 10 min on 2 cores
#   BUILD_SKIP_RIPGREP=1 bench/build.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/neko-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
out="$work/times"
"$repo/.ci/deps" time   # /usr/bin/time, from the one list (.ci/packages)

# time LABEL COMMAND...: one line "LABEL wall user sys" in $out.
timed() {
  local label=$1; shift
  /usr/bin/time -f "$label %e %U %S" -a -o "$out" "$@" >"$work/$label.log" 2>&1 || {
    echo "bench/build.sh: $label failed:"; tail -n 30 "$work/$label.log"; exit 1; }
}

git clone -q "$repo" "$work/clone"
git -C "$work/clone" log -1 --format='commit %h (%s)'
cd "$work/clone"
export CARGO_TARGET_DIR="$work/clone/target"

if [ -z "${BUILD_SKIP_RIPGREP:-}" ]; then
  timed ripgrep cargo install ripgrep --locked --root "$work/rg" --target-dir "$work/rg-target"
  rm -rf "$work/rg-target"
fi
# The quick start, in the README's order: the demo (which builds what it
# needs: the dependencies with the tests' features, the library and the
# example), then the tests (their own code on that build).
timed demo cargo run --example demo
timed test-build cargo test --all-targets --no-run
timed test-run cargo test --all-targets
# The other order, on a target directory of its own: the tests first, then
# the demo, which must find everything built.
if [ -z "${BUILD_SKIP_OTHER_ORDER:-}" ]; then
  CARGO_TARGET_DIR="$work/clone/target-other" timed other-tests cargo test --all-targets --no-run
  CARGO_TARGET_DIR="$work/clone/target-other" timed other-demo cargo run --example demo
  grep -c '^ *Compiling' "$work/other-demo.log" | sed 's/^/units the demo compiled after the tests: /' || true
  rm -rf "$work/clone/target-other"
fi
# What `cargo install --path .`, the packages and the benchmarks use.
timed release cargo build --release --timings
python3 - "$out" "$CARGO_TARGET_DIR/cargo-timings/cargo-timing.html" <<'PY'
import json, re, sys
rows = {}
for line in open(sys.argv[1]):
    label, wall, user, sys_ = line.split()
    rows[label] = (float(wall), float(user) + float(sys_))
rg = rows.get("ripgrep")
def show(label, name):
    wall, cpu = rows[label]
    ratio = f"{cpu / rg[1]:.1f} x" if rg else "-"
    print(f"| {name} | {int(wall // 60)} min {wall % 60:.0f} s | {cpu:.0f} s | {ratio} |")
print("| step | wall | CPU (user + sys) | CPU ÷ ripgrep's |")
print("|---|---:|---:|---:|")
if rg:
    show("ripgrep", "ripgrep's release build (`cargo install ripgrep --locked`)")
show("demo", "`cargo run --example demo`: build and run")
show("test-build", "`cargo test --all-targets`: its build, after the demo")
show("test-run", "`cargo test --all-targets`: the run, once built")
both = [rows[k] for k in ("demo", "test-build", "test-run")]
rows["both"] = (sum(w for w, _ in both), sum(c for _, c in both))
show("both", "**the README's two commands together**")
if "other-demo" in rows:
    show("other-tests", "the other order: `cargo test --all-targets --no-run` first")
    show("other-demo", "then `cargo run --example demo`: build and run")
show("release", "`cargo build --release` (`cargo install --path .`, the packages, the benchmarks)")
html = open(sys.argv[2]).read()
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);", html, re.S).group(1))
print("\nThe release build's ten longest units (`cargo build --release --timings`):\n")
print("| unit | seconds |")
print("|---|---:|")
for u in sorted(units, key=lambda u: -u["duration"])[:10]:
    # "target" names the kind for a package's non-library units (" bin").
    kind = u.get("target", "").strip() or "lib"
    print(f"| {u['name']} {u['version']} ({kind}) | {u['duration']:.1f} |")
print(f"\n{len(units)} units, {sum(u['duration'] for u in units):.0f} s of unit time in all")
PY
for exe in "$CARGO_TARGET_DIR/release/neko-sidecar"; do
  echo "release executable: $(stat -c %s "$exe") bytes"
done
