#!/usr/bin/env bash
# What hostile MCP servers and tool answers cost the sidecar (issue 49),
# with the real binary against the stand-ins, each case bounded in time:
#
#   bench/hostile.sh
#
# 1. bomb:  dev-mcp's `image` tool answering a 65500x65500 JPEG of a few
#           hundred bytes (`bomb: true`), called BENCH_BOMB_CALLS times, 8 at
#           a time: the sidecar's peak RSS (VmHWM) and the slowest call.
# 2. flood: a dev-mcp --sse --fault ping-flood server (1,000 pings after
#           each listing, the POSTs of the replies held open) beside a
#           well-behaved one for BENCH_HOSTILE_SECS: peak RSS, the most
#           descriptors seen, the sessions ended as floods, and a call of
#           the other server's tool at the end.
# 3. churn: dev-mcp --sse --fault rename-churn (tools renamed at every
#           listing, 500 list_changed after each): listings asked for,
#           requests to main_server, log bytes, CPU seconds, peak RSS.
# 4. pages: dev-mcp --sse --fault endless-pages (nextCursor for ever):
#           peak RSS and CPU seconds.
#
# Everything listens on 127.0.0.1; every process started here is stopped on
# exit. Writes bench/results/partial/hostile/table.md.
#
# Knobs (environment): BENCH_HOSTILE_SECS (each timed case, default 20),
# BENCH_BOMB_CALLS (default 40), NEKO_SIDECAR_BIN (the binary, default
# target/release/neko-sidecar: build it first, or point at target/debug).
set -euo pipefail
# shellcheck source=bench/run.sh
. "$(dirname "${BASH_SOURCE[0]}")/run.sh"

RES=$ROOT/bench/results/partial/hostile
SECS=${BENCH_HOSTILE_SECS:-20}
BOMB_CALLS=${BENCH_BOMB_CALLS:-40}

hwm_kb() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }
cpu_s() { awk '{ printf "%.1f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# start_sse NAME FAULT: a dev-mcp --sse server with --fault FAULT; sets URL.
start_sse() {
    local i
    start_bg "$1" "$BIN" dev-mcp --sse 127.0.0.1:0 --fault "$2"
    URL=
    for i in $(seq 200); do
        URL=$(grep -m1 '^http://' "$WORK/$1.log" 2>/dev/null) || true
        [ -n "$URL" ] && return 0
        sleep 0.05
    done
    die "dev-mcp --fault $2 did not start"
}

# start_sidecar NAME MANIFEST: the daemon on MANIFEST (its own stand-in);
# sets SC (its pid).
start_sidecar() {
    write_agent "$WORK/$1" "plugin:$1"
    sed -i 's/^level = "warn"/level = "info"/' "$WORK/$1/agent.toml"
    printf '%s\n' "$2" >"$WORK/$1/tools.d/mcp.toml"
    start_bg "$1-sidecar" "$BIN" run --config "$WORK/$1/agent.toml"
    SC=$LAST_PID
}

call_body() { printf '{"name":"%s","arguments":%s,"call_id":"b","raw_arguments":"{}"}' "$1" "$2"; }

bench_bomb() {
    start_devserver
    start_sidecar bomb "[[mcp_server]]
name = \"dev\"
command = [\"$BIN\", \"dev-mcp\"]"
    local url idle start i worst ms
    url=$(callback_url dev_image)
    check_answer "$(callback_url dev_echo)" "$(call_body dev_echo '{"text":"x"}')"
    idle=$(hwm_kb "$SC")
    start=$(date +%s%N)
    local urls=()
    for i in $(seq "$BOMB_CALLS"); do urls+=("$url"); done
    curl -s --max-time 60 --parallel --parallel-max 8 -XPOST -H 'content-type: application/json' \
        -d "$(call_body dev_image '{"bomb":true}')" -w '\ntime_ms=%{time_total}\n' "${urls[@]}" >"$WORK/bomb.out" || true
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    worst=$(sed -n 's/^time_ms=//p' "$WORK/bomb.out" | sort -n | tail -1)
    worst=$(calc "$worst*1000" 0)
    kill -0 "$SC" || die "the sidecar died"
    {
        echo "bomb_calls=$BOMB_CALLS"
        echo "bomb_refused=$(grep -o 'too large to scale down' "$WORK/bomb.out" | wc -l)"
        echo "bomb_idle_hwm_kb=$idle"
        echo "bomb_hwm_kb=$(hwm_kb "$SC")"
        echo "bomb_worst_ms=$worst"
        echo "bomb_total_ms=$ms"
    } | tee "$RES/bomb.txt"
    stop_bg "$SC"
    stop_bg "$DS_PID"
}

# hostile_case NAME FAULT: a sidecar with the hostile server (and, for the
# flood, a well-behaved one) for $SECS, sampled every 0.2 s.
hostile_case() {
    start_devserver
    start_sse "$1-server" "$2"
    start_sidecar "$1" "[[mcp_server]]
name = \"$1\"
url = \"$URL\"
transport = \"sse\"
prefix = \"h_\"

[[mcp_server]]
name = \"dev\"
command = [\"$BIN\", \"dev-mcp\"]"
    local end most=0 n log
    end=$((SECONDS + SECS))
    while [ "$SECONDS" -lt "$end" ]; do
        kill -0 "$SC" || die "the sidecar died during $1"
        n=$(fds "$SC")
        [ "$n" -gt "$most" ] && most=$n
        sleep 0.2
    done
    check_answer "$(callback_url dev_echo)" "$(call_body dev_echo '{"text":"x"}')"
    log=$WORK/$1-sidecar.log
    {
        echo "${1}_secs=$SECS"
        echo "${1}_hwm_kb=$(hwm_kb "$SC")"
        echo "${1}_cpu_s=$(cpu_s "$SC")"
        echo "${1}_most_fds=$most"
        echo "${1}_log_bytes=$(stat -c %s "$log")"
        echo "${1}_floods=$(grep -c 'it floods' "$log" || true)"
        echo "${1}_dropped_lines_notes=$(grep -c 'log lines of' "$log" || true)"
        echo "${1}_pages_refused=$(grep -c 'a listing may take at most' "$log" || true)"
        echo "${1}_other_tool_answered=yes"
    } | tee "$RES/$1.txt"
    stop_bg "$SC"
    stop_bg "$DS_PID"
}

hostile_main() {
    mkdir -p "$RES"
    [ -x "$BIN" ] || die "no binary at $BIN: cargo build --release, or set NEKO_SIDECAR_BIN"
    command -v jq >/dev/null || apt_install jq
    command -v curl >/dev/null || apt_install curl
    log "1. the JPEG bomb, $BOMB_CALLS calls 8 at a time"
    bench_bomb
    log "2. a ping flood with stalled replies, ${SECS} s"
    hostile_case flood ping-flood
    log "3. renamed tools under a flood of list_changed, ${SECS} s"
    hostile_case churn rename-churn
    log "4. an endless listing, ${SECS} s"
    hostile_case pages endless-pages
    local b=$RES/bomb.txt
    {
        echo "binary: $BIN; $(nproc) CPUs; each timed case ${SECS} s"
        echo
        echo "| case | peak RSS (VmHWM) | CPU | most fds | log | other |"
        echo "|---|---|---|---|---|---|"
        echo "| 1. JPEG bomb ×$(kv "$b" bomb_calls), 8 at a time | $(mib "$(kv "$b" bomb_hwm_kb)") MiB ($(mib "$(kv "$b" bomb_idle_hwm_kb)") before) | - | - | - | all refused: $(kv "$b" bomb_refused); slowest call $(kv "$b" bomb_worst_ms) ms |"
        for c in flood churn pages; do
            f=$RES/$c.txt
            echo "| $c | $(mib "$(kv "$f" "${c}_hwm_kb")") MiB | $(kv "$f" "${c}_cpu_s") s | $(kv "$f" "${c}_most_fds") | $(kv "$f" "${c}_log_bytes") bytes | sessions ended as floods $(kv "$f" "${c}_floods"); listings refused $(kv "$f" "${c}_pages_refused"); the other server's tool answered |"
        done
    } | tee "$RES/table.md"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then hostile_main "$@"; fi
