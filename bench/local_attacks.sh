#!/usr/bin/env bash
# Issue 48's attacks by a local process, at full size, on the release
# build (or any binary): the figures of BENCHMARKS.md "Local attacks".
#
#   bench/local_attacks.sh                       # target/release/neko-sidecar
#   NEKO_SIDECAR_BIN=/path/to/old bench/local_attacks.sh   # another build
#   BENCH_ATTACKS="tokenless burst" bench/local_attacks.sh  # some of them
#
# Each attack gets a fresh sidecar (default [callback] limits: 1,024
# connections, 1 MiB bodies, 64 MiB of bodies in all), a stand-in
# main_server (`dev-server`) and an http handler (bench/handlers/
# slow_echo.py: `echo` at once, `slow` after 5 s), with the open-files
# limit at 16,384 (the sidecar's hard limit; the attacker keeps the
# shell's). The attacks (bench/local_attacks.py, Python's standard library):
#
#   tokenless           1,024 connections `POST /cb/anything/x`,
#                       Content-Length 1000, no body, re-opened as they
#                       close, for the 7 s of 70 real calls
#   wrong_token_bodies  1,000 connections each sending 1,040,000 of
#                       1,048,576 announced bytes for a wrong token, during
#                       30 real calls; the sidecar's peak RSS
#   burst               2,000 simultaneous calls to `slow` (5 s)
#   admin_flood         19,000 idle connections to the admin port, then
#                       10 /healthz and 30 real calls
#
# Everything listens on 127.0.0.1 only; every process started here is
# stopped on exit. Output: one JSON line per attack on stdout (and in
# bench/results/raw/local_attacks-LABEL.jsonl, LABEL from BENCH_LABEL).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${NEKO_SIDECAR_BIN:-$ROOT/target/release/neko-sidecar}
ATTACKS=${BENCH_ATTACKS:-tokenless wrong_token_bodies burst admin_flood}
LABEL=${BENCH_LABEL:-$(basename "$BIN")}
RAW=$ROOT/bench/results/raw
mkdir -p "$RAW"
OUT=$RAW/local_attacks-$LABEL.jsonl
: > "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/neko-attacks.XXXXXX")
PIDS=()

log() { printf '[attacks %s] %s\n' "$(date +%T)" "$*" >&2; }
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$BIN" ] || { echo "no binary at $BIN: cargo build --release first" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed (Debian: python3)" >&2; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits until `url` answers 200, at most 30 s.
wait_http() {
    for _ in $(seq 300); do
        python3 - "$1" <<'EOF' && return 0
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=1).status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
        sleep 0.1
    done
    echo "nothing answered at $1" >&2
    return 1
}

HP=$(free_port)
python3 "$ROOT/bench/handlers/slow_echo.py" "$HP" &
PIDS+=($!)

for attack in $ATTACKS; do
    MS=$(free_port); CB=$(free_port); AD=$(free_port)
    "$BIN" dev-server --listen "127.0.0.1:$MS" >"$WORK/dev-server.log" 2>&1 &
    DEV=$!
    PIDS+=("$DEV")
    mkdir -p "$WORK/tools"
    cat >"$WORK/tools/t.toml" <<EOF
[[tool]]
name = "echo"
description = "Echoes its arguments."
handler = { type = "http", url = "http://127.0.0.1:$HP/echo" }

[[tool]]
name = "slow"
description = "Answers after 5 s."
timeout_seconds = 60
handler = { type = "http", url = "http://127.0.0.1:$HP/slow" }
EOF
    cat >"$WORK/agent.toml" <<EOF
source = "plugin:bench-attacks"
manifest_dirs = ["tools"]

[main_server]
url = "http://127.0.0.1:$MS"

[callback]
listen = "127.0.0.1:$CB"

[admin]
listen = "127.0.0.1:$AD"

[log]
level = "warn"
EOF
    (ulimit -Sn 16384; ulimit -Hn 16384; exec "$BIN" run --config "$WORK/agent.toml") \
        >"$WORK/sidecar-$attack.log" 2>&1 &
    SC=$!
    PIDS+=("$SC")
    wait_http "http://127.0.0.1:$AD/healthz"
    # The callback paths, from /status once both tools are registered.
    PATHS=""
    for _ in $(seq 300); do
        PATHS=$(python3 - "$AD" <<'EOF' || true
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/status", timeout=2))
urls = {t["name"]: t.get("callback_url") for t in s["tools"] if t.get("state") == "registered"}
if urls.get("echo") and urls.get("slow"):
    path = lambda u: "/" + u.split("/", 3)[3]
    print(path(urls["echo"]), path(urls["slow"]))
EOF
)
        [ -n "$PATHS" ] && break
        sleep 0.1
    done
    [ -n "$PATHS" ] || { echo "the tools never registered" >&2; exit 1; }
    read -r ECHO_PATH SLOW_PATH <<<"$PATHS"
    log "$attack on $BIN (pid $SC)"
    python3 "$ROOT/bench/local_attacks.py" "$attack" --callback "127.0.0.1:$CB" \
        --admin "127.0.0.1:$AD" --pid "$SC" --echo-path "$ECHO_PATH" \
        --slow-path "$SLOW_PATH" --flood 19000 | tee -a "$OUT"
    accept_errors=$(grep -c "cannot accept" "$WORK/sidecar-$attack.log" || true)
    log "$attack: accept errors in the sidecar's log: $accept_errors"
    echo "{\"attack\": \"$attack\", \"sidecar_accept_errors_logged\": $accept_errors}" >>"$OUT"
    kill "$SC" "$DEV" 2>/dev/null || true
    wait "$SC" "$DEV" 2>/dev/null || true
done
log "figures in $OUT"
