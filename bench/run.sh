#!/usr/bin/env bash
# Regenerates every figure of BENCHMARKS.md on this machine.
#
#   bench/run.sh                 # the full run (about 10 minutes after the build)
#   BENCH_QUICK=1 bench/run.sh   # a smoke run: short and few rounds (figures not for publishing)
#
# It installs its Debian peers (nginx, webhook, wrk, curl, jq) when they are
# missing, builds the release binary and the benchmark drivers (bench/drivers,
# a cargo package of its own, built into the root's target/release), records
# the machine, runs the nine benchmarks, writes bench/results/latest.md (and
# the raw outputs under bench/results/raw/), and rewrites the marked section
# of BENCHMARKS.md with it. Every verdict is a ratio against a baseline
# measured in the same run (or a count, or a size), because the machine may
# be shared.
#
# Everything listens on 127.0.0.1 only, every run is bounded in time, and
# every process started here is stopped on exit.
#
# Knobs (environment): BENCH_DURATION (wrk seconds per run, default 5),
# BENCH_ROUNDS (interleaved wrk rounds, default 5), BENCH_RESTARTS (20),
# BENCH_EDITS (20), BENCH_STOPS (10), BENCH_SOAK_CALLS (100000),
# BENCH_IDLE_SECS (120), BENCH_SKIP_BUILD=1, BENCH_QUICK=1,
# BENCH_ONLY="1 3" (run only those benchmarks; 1 and 2 run together; the
# result goes to bench/results/partial/, BENCHMARKS.md is left alone),
# NEKO_SIDECAR_BIN (the daemon binary to measure, default
# target/release/neko-sidecar; the drivers read it too),
# BENCH_HALT_POLL_NS, BENCH_KEEP_WORK=1 (keep the work directory, with every
# process's log, and say where), BENCH_CALL_HISTORY=N (`[admin]
# call_history` of the daemons the drivers start; default: the daemon's 200).
#
# BENCH_HALT_POLL_NS=N: in a VM guest whose idle driver is cpuidle-haltpoll,
# idle vCPUs poll for up to N ns before halting, for the run (restored on
# exit; needs root). The kernel's default is 200000; a guest booted with 0
# pays 25-30 us for every wake-up of an idle vCPU, which then decides
# concurrency 1 more than any proxy does (BENCHMARKS.md, "Concurrency 1").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
    DUR=${BENCH_DURATION:-1}; ROUNDS=${BENCH_ROUNDS:-1}
    RESTARTS=${BENCH_RESTARTS:-3}; EDITS=${BENCH_EDITS:-3}; STOPS=${BENCH_STOPS:-2}
    SOAK_CALLS=${BENCH_SOAK_CALLS:-20000}; IDLE_SECS=${BENCH_IDLE_SECS:-5}; IDLE_SETTLE=5
else
    DUR=${BENCH_DURATION:-5}; ROUNDS=${BENCH_ROUNDS:-5}
    RESTARTS=${BENCH_RESTARTS:-20}; EDITS=${BENCH_EDITS:-20}; STOPS=${BENCH_STOPS:-10}
    SOAK_CALLS=${BENCH_SOAK_CALLS:-100000}; IDLE_SECS=${BENCH_IDLE_SECS:-120}; IDLE_SETTLE=30
fi
POLL_MS=1000       # the daemon's poll interval in benchmark 5
DEBOUNCE_MS=200    # the daemon's debounce in benchmark 6 (its default)
SLOW_MS=1000       # the slow handler's sleep in benchmark 3
BURST=1000         # simultaneous calls in benchmark 3
SOAK_WARM=$((SOAK_CALLS / 5))  # benchmark 8: RSS growth counts after the first fifth

# The goals. Each is judged against a baseline of the same run where there
# is one (nginx, webhook), otherwise against a size or a count.
C64_RPS_GOAL=0.4        # 1: c=64 req/s at least this × nginx's
C1_ADDED_GOAL=2.5       # 1: c=1 added p50 at most this × nginx's (median of per-round ratios)
EXEC_P50_GOAL=1.00      # 2: p50 at most this × webhook's (median of per-round ratios)
BURST_HWM_GOAL_MIB=48   # 3: peak RSS of the 1,000-call burst
IDLE_ANON_GOAL_MIB=6    # 9: RssAnon of an idle daemon with 100 tools
# 9, "effectively zero" CPU: below 0.05 % of one core (1.8 s an hour),
# which top(1) shows as 0.0 %.
IDLE_CPU_GOAL_PCT=0.05

RES=$ROOT/bench/results
# A partial run (BENCH_ONLY) keeps its figures apart from the full run's.
[ -n "${BENCH_ONLY:-}" ] && RES=$RES/partial
RAW=$RES/raw
OUT=$RES/latest.md
CLK_TCK=$(getconf CLK_TCK)
# The drivers and the daemon, side by side in the root's target directory.
REL=$ROOT/target/release
BIN=${NEKO_SIDECAR_BIN:-$REL/neko-sidecar}
export NEKO_SIDECAR_BIN=$BIN
WORK=$(mktemp -d "${TMPDIR:-/tmp}/neko-bench.XXXXXX")
BG=()

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

cleanup() {
    local p
    for p in "${BG[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${BG[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    if [ -n "${HALT_POLL_WAS:-}" ]; then echo "$HALT_POLL_WAS" >"$HALT_POLL" || true; fi
    [ -n "${BENCH_KEEP_WORK:-}" ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts a background process (logging to $WORK/NAME.log) and remembers it.
start_bg() {
    local name=$1
    shift
    "$@" >"$WORK/$name.log" 2>&1 &
    BG+=("$!")
    LAST_PID=$!
}

stop_bg() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# A port nobody listens on, below the usual ephemeral range (32768-60999),
# so that no outgoing connection holds it either.
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
}

# wait_http URL [NAME]: waits until URL answers anything over HTTP (at
# most 10 s); on failure shows the log of the process NAME.
wait_http() {
    local i
    for i in $(seq 200); do
        curl -s -o /dev/null --max-time 1 "$1" && return 0
        sleep 0.05
    done
    [ -n "${2:-}" ] && [ -f "$WORK/$2.log" ] && cat "$WORK/$2.log" >&2
    die "nothing answers at $1"
}

# Number helpers (awk; bash has no floats).
median() { sort -g | awk '{a[NR]=$1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
# goal X LIMIT: met when X ≤ LIMIT; goal_min X LIMIT: met when X ≥ LIMIT.
goal() { awk -v x="$1" -v lim="$2" 'BEGIN { print (x <= lim) ? "met" : "**not met**" }'; }
goal_min() { awk -v x="$1" -v lim="$2" 'BEGIN { print (x >= lim) ? "met" : "**not met**" }'; }
kv() { grep -m1 "^$2=" "$1" | cut -d= -f2-; }
mib() { calc "$1/1024" 1; }

# ---------------------------------------------------------------- peers ---
# apt_install PKG...: installs the Debian packages given (none: nothing)
# that are missing, through .ci/deps: each must be in .ci/packages, the one
# list of what the project's scripts need (issue 43).
apt_install() {
    [ $# -gt 0 ] || return 0
    log "needs $*"
    "$ROOT/.ci/deps" "$@"
}

install_peers() {
    apt_install nginx webhook wrk curl jq
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
}

DRIVERS=(bench_handler bench_burst bench_registry bench_restart bench_edit bench_sigterm soak_calls mcp_direct)

build() {
    if [ "${BENCH_SKIP_BUILD:-0}" = 1 ]; then
        log "skipping the build (BENCH_SKIP_BUILD=1)"
    else
        log "building release: neko-sidecar, then the drivers (bench/drivers)"
        cargo build --release --quiet --bin neko-sidecar
        # Their own workspace, built into the root's target directory: the
        # drivers find the daemon next to them, and dependencies built for
        # the root with the same features are reused.
        CARGO_TARGET_DIR=$ROOT/target cargo build --release --quiet \
            --manifest-path "$ROOT/bench/drivers/Cargo.toml"
    fi
    local b
    for b in "$BIN" "${DRIVERS[@]/#/$REL/}"; do
        [ -x "$b" ] || die "$b is missing: build first"
    done
}

# -------------------------------------------------------------- machine ---
HALT_POLL=/sys/module/haltpoll/parameters/guest_halt_poll_ns

# Applies BENCH_HALT_POLL_NS, if given (see the top of this file).
set_halt_poll() {
    [ -n "${BENCH_HALT_POLL_NS:-}" ] || return 0
    [ -w "$HALT_POLL" ] || die "BENCH_HALT_POLL_NS needs a writable $HALT_POLL (cpuidle-haltpoll, as root)"
    HALT_POLL_WAS=$(cat "$HALT_POLL")
    echo "$BENCH_HALT_POLL_NS" >"$HALT_POLL"
    log "idle vCPUs poll for up to $BENCH_HALT_POLL_NS ns before halting (was $HALT_POLL_WAS)"
}

# How an idle CPU waits: the cpuidle driver, and its halt polling if any.
idle_policy() {
    local driver
    driver=$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)
    if [ -r "$HALT_POLL" ]; then
        echo "cpuidle $driver, guest_halt_poll_ns $(cat "$HALT_POLL")${HALT_POLL_WAS:+ (set for the run; boots with $HALT_POLL_WAS)}"
    else
        echo "cpuidle $driver"
    fi
}

record_machine() {
    # 1,000 simultaneous calls need about 2,000 descriptors in the daemon.
    local hard
    hard=$(ulimit -Hn)
    if [ "$hard" = unlimited ] || [ "$hard" -gt 65536 ]; then hard=65536; fi
    [ "$(ulimit -Sn)" != unlimited ] && [ "$(ulimit -Sn)" -lt "$hard" ] && ulimit -Sn "$hard"
    local commit dirty=""
    commit=$(git rev-parse --short=12 HEAD)
    git diff --quiet HEAD -- src Cargo.toml Cargo.lock || dirty=" (src modified)"
    [ -n "${BENCH_BIN_NOTE:-}" ] && dirty+=" ($BENCH_BIN_NOTE)"
    MACHINE=$(cat <<EOF
| | |
|---|---|
| date | $(date -u +%Y-%m-%dT%H:%MZ) |
| commit | \`$commit\`$dirty |
| CPU | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores online |
| kernel | $(uname -srm); $(idle_policy) |
| load average at start | $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) |
| open files limit | $(ulimit -Sn) |
| tools | $(rustc --version | cut -d' ' -f1-2), $("$NGINX" -v 2>&1 | cut -d' ' -f3), wrk $(wrk -v 2>&1 | head -1 | cut -d' ' -f2), webhook $(webhook -version | awk '{print $3}') |
EOF
)
}

# ---------------------------------------------- 1. http: direct/nginx/sidecar
CALL_BODY='{"name":"w","arguments":{"city":"Tokyo"},"call_id":"x","raw_arguments":"{\"city\":\"Tokyo\"}"}'

# CPU time (user + system, in clock ticks) used so far by the given pids.
cpu_ticks() {
    local t=0 p v
    for p in "$@"; do
        v=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null) || v=0
        t=$((t + v))
    done
    echo "$t"
}

# The pids of PID's children (nginx's workers).
children() {
    awk -v pp="$1" '$4 == pp { print $1 }' /proc/[0-9]*/stat 2>/dev/null || true
}

# wrk_run FILE LABEL URL CONCURRENCY SECONDS TOOL [PID...] → appends a RESULT
# line to $RAW/FILE.txt, with the CPU the PIDs used per request.
wrk_run() {
    local file=$1 label=$2 url=$3 c=$4 d=$5 tool=$6 t=1
    shift 6
    local pids=("$@") before after
    [ "$c" -gt 1 ] && t=2
    before=$(cpu_ticks "${pids[@]}")
    if ! TOOL=$tool timeout $((d + 30)) wrk -t"$t" -c"$c" -d"${d}s" --timeout 10s --latency \
        -s "$ROOT/bench/wrk/call.lua" "$url" >"$WORK/wrk.out" 2>&1; then
        cat "$WORK/wrk.out" >&2
        die "wrk failed on $url"
    fi
    local line
    line=$(grep '^RESULT' "$WORK/wrk.out") || die "no RESULT from wrk: $(cat "$WORK/wrk.out")"
    after=$(cpu_ticks "${pids[@]}")
    local reqs cpu=""
    reqs=$(echo "$line" | grep -o 'requests=[0-9]*' | cut -d= -f2)
    [ ${#pids[@]} -gt 0 ] && cpu=" cpu_us=$(calc "($after - $before) * 1000000 / $CLK_TCK / $reqs" 1)"
    [ -n "$file" ] && echo "$label c=$c ${line#RESULT }$cpu" >>"$RAW/$file.txt"
    return 0
}

# col FILE LABEL C KEY → KEY of each round, one a line, in round order
col() {
    grep "^$2 c=$3 " "$RAW/$1.txt" | grep -o " $4=[-0-9.]*" | cut -d= -f2
}

# metric FILE LABEL C KEY → the median over rounds
metric() { col "$@" | median; }

# ratios FILE A B C KEY → B's KEY ÷ A's, round by round (one a line)
ratios() {
    paste -d' ' <(col "$1" "$2" "$4" "$5") <(col "$1" "$3" "$4" "$5") |
        awk '{ printf "%.2f\n", $2 / $1 }'
}

# added_ratios C → round by round, the sidecar's added p50 ÷ nginx's, each
# the path's p50 minus the direct call's p50 of the same round. wrk counts
# in whole microseconds: an added p50 under 1 µs counts as 1 µs.
added_ratios() {
    paste -d' ' <(col http direct "$1" p50_us) <(col http nginx "$1" p50_us) \
        <(col http sidecar "$1" p50_us) |
        awk '{ n = $2 - $1; if (n < 1) n = 1; printf "%.2f\n", ($3 - $1) / n }'
}

# list → "a, b, c" (a column joined on one line)
list() { paste -sd, - | sed 's/,/, /g'; }

# no_mcp_server_lost [SERVER]: dies when the sidecar's log ($WORK/sidecar.log,
# at warn level) has a line about the MCP server SERVER (any, without it):
# a lost server answers every call at once with an error envelope (HTTP
# 200), which wrk would count as fast calls, so the run is no measurement.
no_mcp_server_lost() {
    local pattern="mcp_server=${1:-}"
    if grep -q "$pattern" "$WORK/sidecar.log"; then
        grep "$pattern" "$WORK/sidecar.log" | head -5 >&2
        die "an MCP server was lost during the run (above): these figures are not a measurement"
    fi
}

check_answer() {
    local url=$1 body=$2 answer
    answer=$(curl -s --max-time 10 -XPOST -H 'content-type: application/json' -d "$body" "$url") || true
    case $answer in
        *'"is_error":false'*) ;;
        *) die "$url does not answer a success envelope: $answer" ;;
    esac
}

start_devserver() {
    DS_PORT=$(free_port)
    start_bg devserver "$BIN" dev-server --listen "127.0.0.1:$DS_PORT"
    DS_PID=$LAST_PID
    DS=http://127.0.0.1:$DS_PORT
    wait_http "$DS/api/tools" devserver
}

# callback_url TOOL → the URL main_server holds for TOOL (waits up to 20 s)
callback_url() {
    local i u
    for i in $(seq 400); do
        u=$(curl -s "$DS/api/tools" | jq -r --arg t "$1" \
            '[.tools_by_role[][] | select(.name == $t) | .callback_url] | first // empty')
        [ -n "$u" ] && { echo "$u"; return 0; }
        sleep 0.05
    done
    die "tool $1 never showed up in GET /api/tools"
}

# Starts the fast http handler (bench/drivers/src/bin/bench_handler.rs) and
# waits for its port: sets HP and DIRECT (its /w URL).
start_handler() {
    local i
    HP=
    start_bg handler "$REL/bench_handler" --listen 127.0.0.1:0 --max-seconds "${1:-1800}"
    for i in $(seq 100); do
        HP=$(sed -n 's/^listening on 127.0.0.1://p' "$WORK/handler.log" 2>/dev/null) || true
        [ -n "$HP" ] && break
        sleep 0.05
    done
    [ -n "$HP" ] || die "the bench handler did not start"
    DIRECT=http://127.0.0.1:$HP/w
}

# Writes the benchmark's two tools to FILE: `w`, the fast http handler at
# $DIRECT, and `e`, the exec handler bench/handlers/envelope.sh.
write_bench_tools() {
    cat >"$1" <<EOF
[[tool]]
name = "w"
description = "The weather of a city (a fixed answer: the benchmark's fast http handler)."
handler = { type = "http", url = "$DIRECT" }
parameters = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }

[[tool]]
name = "e"
description = "The benchmark's exec handler: a shell script run per call."
handler = { type = "exec", command = ["$ROOT/bench/handlers/envelope.sh"] }
parameters = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
EOF
}

# write_agent DIR SOURCE: DIR/agent.toml (the stand-in at $DS, SOURCE, a
# callback port of its own, no admin endpoint, warnings only) and an empty
# DIR/tools.d.
write_agent() {
    mkdir -p "$1/tools.d"
    cat >"$1/agent.toml" <<EOF
source = "$2"
manifest_dirs = ["tools.d"]
[main_server]
url = "$DS"
[callback]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "warn"
EOF
}

# The agent of benchmarks 1 and 2 in DIR, with their two tools.
write_bench_agent() {
    write_agent "$1" plugin:bench
    write_bench_tools "$1/tools.d/bench.toml"
}

# write_nginx_conf WORKERS CONNECTIONS BLOCKS: $WORK/nginx/nginx.conf, an
# nginx in the foreground with its pid, log and temporary files under
# $WORK/nginx, no access log, and BLOCKS (its upstreams and servers) inside
# http { } (bench/tls.sh's front uses it too).
write_nginx_conf() {
    mkdir -p "$WORK/nginx/tmp"
    cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes $1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections $2; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/tmp/body;
    proxy_temp_path $WORK/nginx/tmp/proxy;
    fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
    scgi_temp_path $WORK/nginx/tmp/scgi;
$3
}
EOF
}

# start_nginx UPSTREAM_PORT: nginx as a reverse proxy to 127.0.0.1:PORT with
# a keep-alive upstream (the baseline of benchmark 1); sets NGINX_URL (its
# /w URL) and NGINX_PIDS (the master, then its workers).
start_nginx() {
    local np master
    np=$(free_port)
    write_nginx_conf auto 4096 "$(cat <<EOF
    upstream handler {
        server 127.0.0.1:$1;
        keepalive 128;
    }
    server {
        listen 127.0.0.1:$np;
        location / {
            proxy_pass http://handler;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
EOF
)"
    start_bg nginx "$NGINX" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf"
    master=$LAST_PID
    NGINX_URL=http://127.0.0.1:$np/w
    wait_http "$NGINX_URL" nginx
    read -r -a NGINX_PIDS <<<"$master $(children "$master" | tr '\n' ' ')"
}

bench_http_and_exec() {
    log "1+2: starting the handler, nginx, webhook, the stand-in and the daemon"
    : >"$RAW/http.txt"
    : >"$RAW/exec.txt"
    # The fast handler.
    local wp
    start_handler
    wait_http "$DIRECT" handler

    # nginx as a reverse proxy with a keep-alive upstream.
    start_nginx "$HP"

    # webhook running the exec handler, the body passed as its argument.
    wp=$(free_port)
    cat >"$WORK/hooks.json" <<EOF
[{
  "id": "e",
  "execute-command": "$ROOT/bench/handlers/envelope.sh",
  "include-command-output-in-response": true,
  "response-headers": [{"name": "Content-Type", "value": "application/json"}],
  "pass-arguments-to-command": [{"source": "raw-request-body"}]
}]
EOF
    start_bg webhook webhook -hooks "$WORK/hooks.json" -ip 127.0.0.1 -port "$wp"
    local webhook_pid=$LAST_PID
    wait_http "http://127.0.0.1:$wp/hooks/e" webhook
    WEBHOOK_URL=http://127.0.0.1:$wp/hooks/e

    # The stand-in main_server and the real daemon with both tools.
    start_devserver
    write_bench_agent "$WORK/agent"
    start_bg sidecar "$BIN" run --config "$WORK/agent/agent.toml"
    SIDECAR_PID=$LAST_PID
    SIDECAR_URL=$(callback_url w)
    SIDECAR_EXEC_URL=$(callback_url e)
    log "callback URLs from GET /api/tools: $SIDECAR_URL, $SIDECAR_EXEC_URL"

    check_answer "$DIRECT" "$CALL_BODY"
    check_answer "$NGINX_URL" "$CALL_BODY"
    check_answer "$SIDECAR_URL" "$CALL_BODY"
    check_answer "$WEBHOOK_URL" "${CALL_BODY/\"w\"/\"e\"}"
    check_answer "$SIDECAR_EXEC_URL" "${CALL_BODY/\"w\"/\"e\"}"

    local r c
    log "1: http handler, $ROUNDS interleaved rounds of ${DUR}s per path and concurrency"
    want 1 && for c in 1 64; do
        # Warm-up: every path once, not recorded.
        wrk_run "" warm "$DIRECT" "$c" 1 w
        wrk_run "" warm "$NGINX_URL" "$c" 1 w
        wrk_run "" warm "$SIDECAR_URL" "$c" 1 w
        # A round: the direct call, then the two proxies, taking turns to
        # go first so that neither always runs in the other's wake.
        for r in $(seq "$ROUNDS"); do
            wrk_run http direct "$DIRECT" "$c" "$DUR" w
            if [ $((r % 2)) = 1 ]; then
                wrk_run http nginx "$NGINX_URL" "$c" "$DUR" w "${NGINX_PIDS[@]}"
                wrk_run http sidecar "$SIDECAR_URL" "$c" "$DUR" w "$SIDECAR_PID"
            else
                wrk_run http sidecar "$SIDECAR_URL" "$c" "$DUR" w "$SIDECAR_PID"
                wrk_run http nginx "$NGINX_URL" "$c" "$DUR" w "${NGINX_PIDS[@]}"
            fi
        done
    done
    log "2: exec handler, $ROUNDS interleaved rounds of ${DUR}s per path and concurrency"
    want 2 && for c in 1 8; do
        wrk_run "" warm "$WEBHOOK_URL" "$c" 1 e
        wrk_run "" warm "$SIDECAR_EXEC_URL" "$c" 1 e
        for r in $(seq "$ROUNDS"); do
            if [ $((r % 2)) = 1 ]; then
                wrk_run exec webhook "$WEBHOOK_URL" "$c" "$DUR" e "$webhook_pid"
                wrk_run exec sidecar "$SIDECAR_EXEC_URL" "$c" "$DUR" e "$SIDECAR_PID"
            else
                wrk_run exec sidecar "$SIDECAR_EXEC_URL" "$c" "$DUR" e "$SIDECAR_PID"
                wrk_run exec webhook "$WEBHOOK_URL" "$c" "$DUR" e "$webhook_pid"
            fi
        done
    done
    grep -h 'non2xx=[1-9]\|socket_errors=[1-9]' "$RAW/http.txt" "$RAW/exec.txt" >&2 &&
        log "warning: some requests failed (see above)"
    for p in "${BG[@]}"; do stop_bg "$p"; done
    BG=()
}

report_http() {
    local c d n s
    cat <<EOF
### 1. http handler: added latency and throughput, against nginx

The same fast handler (\`bench_handler\`: axum, a fixed envelope) called
(a) directly, (b) through nginx \`proxy_pass\` with a keep-alive upstream,
(c) through the real \`neko-sidecar run\` at the callback URL read from the
stand-in's \`GET /api/tools\` (arguments validated against the schema, answer
wrapped: the real path). Load: \`wrk -t1 -c1\` and \`wrk -t2 -c64\`, ${DUR} s
per run, ${ROUNDS} rounds; a round is the direct call, then nginx and the
sidecar taking turns to go first. wrk, nginx, the handler and the daemon
share the machine's cores. Figures: medians over rounds.

\`\`\`
TOOL=w wrk -t1 -c1 -d${DUR}s --latency -s bench/wrk/call.lua URL    # and -t2 -c64
\`\`\`

| concurrency | path | p50 µs | p99 µs | req/s | added p50 µs | req/s ÷ direct | proxy CPU µs per call |
|---:|---|---:|---:|---:|---:|---:|---:|
EOF
    for c in 1 64; do
        d=$(metric http direct $c p50_us)
        echo "| $c | direct (baseline) | $d | $(metric http direct $c p99_us) | $(calc "$(metric http direct $c rps)" 0) | — | 1.00 | — |"
        for n in nginx sidecar; do
            s=$n; [ $n = nginx ] && s="nginx proxy_pass"; [ $n = sidecar ] && s=neko-sidecar
            echo "| $c | $s | $(metric http $n $c p50_us) | $(metric http $n $c p99_us) | $(calc "$(metric http $n $c rps)" 0) | $(calc "$(metric http $n $c p50_us)-$d" 0) | $(calc "$(metric http $n $c rps)/$(metric http direct $c rps)") | $(metric http $n $c cpu_us) |"
        done
    done
    local r64 r1 cpu64 v64 v1
    r64=$(ratios http nginx sidecar 64 rps | median)
    r1=$(added_ratios 1 | median)
    cpu64=$(ratios http nginx sidecar 64 cpu_us | median)
    v64=$(goal_min "$r64" "$C64_RPS_GOAL")
    v1=$(goal "$r1" "$C1_ADDED_GOAL")
    SUMMARY+=("| 1. http calls, concurrency 64 | req/s ≥ $C64_RPS_GOAL × nginx's | req/s ÷ nginx $(calc "$r64") (median of rounds: $(ratios http nginx sidecar 64 rps | list)); CPU per call ÷ nginx $(calc "$cpu64") | $v64 |")
    SUMMARY+=("| 1. http calls, concurrency 1 | added p50 ≤ $C1_ADDED_GOAL × nginx's | added p50 ÷ nginx's $(calc "$r1") (median of rounds: $(added_ratios 1 | list)) | $v1 |")
    cat <<EOF

Verdicts, each the median of the rounds' own ratios (the sidecar and nginx
of the same round, a paired figure that a slow spell of the shared machine
moves less than two medians divided):

| concurrency | round by round | median | goal | verdict |
|---:|---|---:|---|---|
| 64 | req/s, sidecar ÷ nginx: $(ratios http nginx sidecar 64 rps | list) | $(calc "$r64") | ≥ $C64_RPS_GOAL | $v64 |
| 64 | proxy CPU per call, sidecar ÷ nginx: $(ratios http nginx sidecar 64 cpu_us | list) | $(calc "$cpu64") | | |
| 1 | added p50 (p50 − the round's direct p50), sidecar ÷ nginx: $(added_ratios 1 | list) | $(calc "$r1") | ≤ $C1_ADDED_GOAL | $v1 |

Added p50 per round at concurrency 1, µs (nginx / sidecar): $(paste -d' ' <(col http direct 1 p50_us) <(col http nginx 1 p50_us) <(col http sidecar 1 p50_us) | awk '{ printf "%s%d / %d", (NR > 1 ? ", " : ""), $2 - $1, $3 - $1 }').
An added p50 under 1 µs counts as 1 µs in the ratio (wrk's resolution).

EOF
}

report_exec() {
    local c w s r v
    cat <<EOF
### 2. exec handler: per-call latency, against webhook

The same script (\`bench/handlers/envelope.sh\`: reads the call, prints an
envelope) run once per call by (a) adnanh/webhook, the baseline, and (b) the
daemon's exec handler. webhook cannot write the request body to a command's
stdin, so it passes the raw body as the script's argument
(\`"source": "raw-request-body"\`); the sidecar writes it to stdin. Load:
\`wrk\` at concurrency 1 and 8, ${DUR} s per run, ${ROUNDS} rounds, the two
taking turns to go first. Figures: medians over rounds; the verdict is the
median of the rounds' own p50 ratios.

\`\`\`
webhook -hooks hooks.json -ip 127.0.0.1 -port P     # hooks.json: written by bench/run.sh
TOOL=e wrk -t1 -c1 -d${DUR}s --latency -s bench/wrk/call.lua URL    # and -t2 -c8
\`\`\`

| concurrency | path | p50 µs | p99 µs | req/s | runner's own CPU µs per call | p50 ÷ webhook, round by round | median | verdict (≤ $EXEC_P50_GOAL) |
|---:|---|---:|---:|---:|---:|---|---:|---|
EOF
    for c in 1 8; do
        echo "| $c | webhook (baseline) | $(metric exec webhook $c p50_us) | $(metric exec webhook $c p99_us) | $(calc "$(metric exec webhook $c rps)" 0) | $(metric exec webhook $c cpu_us) | | | |"
        r=$(ratios exec webhook sidecar $c p50_us | median)
        v=$(goal "$r" "$EXEC_P50_GOAL")
        echo "| $c | neko-sidecar exec | $(metric exec sidecar $c p50_us) | $(metric exec sidecar $c p99_us) | $(calc "$(metric exec sidecar $c rps)" 0) | $(metric exec sidecar $c cpu_us) | $(ratios exec webhook sidecar $c p50_us | list) | $(calc "$r") | $v |"
        SUMMARY+=("| 2. exec calls, concurrency $c | p50 no worse than webhook's | p50 ÷ webhook $(calc "$r") ($(metric exec sidecar $c p50_us) / $(metric exec webhook $c p50_us) µs) | $v |")
    done
    cat <<EOF

The runner's own CPU is the daemon's (or webhook's) user + system time over
the run (\`/proc/PID/stat\`), per call, without the script's own process.

EOF
}

# ------------------------------------------------ 3. 1,000 slow calls ---
bench_burst() {
    log "3: $BURST simultaneous calls to a ${SLOW_MS} ms handler"
    timeout 300 "$REL/bench_burst" --calls "$BURST" --slow-ms "$SLOW_MS" >"$RAW/burst.txt"
}

report_burst() {
    local f=$RAW/burst.txt
    local ok wall idle peak ifd pfd all_ok hwm_ok
    ok=$(kv "$f" answered_ok); wall=$(kv "$f" wall_ms)
    idle=$(kv "$f" idle_hwm_kb); peak=$(kv "$f" peak_hwm_kb)
    ifd=$(kv "$f" idle_fds); pfd=$(kv "$f" peak_fds)
    all_ok="**not met**"
    [ "$ok" = "$(kv "$f" calls)" ] && all_ok=met
    hwm_ok=$(goal "$peak" $((BURST_HWM_GOAL_MIB * 1024)))
    SUMMARY+=("| 3. $BURST simultaneous ${SLOW_MS} ms calls: answered | all answered | $ok of $(kv "$f" calls); wall ÷ sleep $(calc "$wall/$SLOW_MS") | $all_ok |")
    SUMMARY+=("| 3. $BURST simultaneous ${SLOW_MS} ms calls: memory | peak RSS ≤ $BURST_HWM_GOAL_MIB MiB | VmHWM $(mib "$peak") MiB (÷ idle $(calc "$peak/$idle")); fds $pfd | $hwm_ok |")
    cat <<EOF
### 3. $BURST simultaneous slow calls

\`bench_burst\` starts the stand-in, \`bench_handler\` (answers after ${SLOW_MS} ms)
and \`neko-sidecar run\` with one tool, then POSTs $BURST callback bodies at once,
each on its own connection. Memory and descriptors of the daemon come from
\`/proc/PID/status\` (VmHWM, the peak resident set) and \`/proc/PID/fd\`
(sampled every 10 ms); the baseline is the same daemon idle after 3 warm-up calls.

\`\`\`
target/release/bench_burst --calls $BURST --slow-ms $SLOW_MS
\`\`\`

| figure | baseline | under $BURST calls | ratio | verdict |
|---|---:|---:|---:|---|
| answered with a success envelope | — | $ok of $(kv "$f" calls) | $(calc "$ok/$(kv "$f" calls)") | $all_ok |
| wall time of the burst, against the handler's sleep | ${SLOW_MS} ms | $(calc "$wall" 0) ms | $(calc "$wall/$SLOW_MS") | |
| per-call latency, median / max | ${SLOW_MS} ms | $(calc "$(kv "$f" per_call_median_ms)" 0) / $(calc "$(kv "$f" per_call_max_ms)" 0) ms | $(calc "$(kv "$f" per_call_median_ms)/$SLOW_MS") | |
| daemon peak RSS (VmHWM) | $(mib "$idle") MiB idle | $(mib "$peak") MiB | $(calc "$peak/$idle") | $hwm_ok (≤ $BURST_HWM_GOAL_MIB MiB) |
| of which, at their peaks: RssAnon (heap, stacks) / RssFile (the executable's and libraries' pages) | | $(mib "$(kv "$f" peak_anon_kb)") / $(mib "$(kv "$f" peak_file_kb)") MiB | | |
| daemon open descriptors | $ifd idle | $pfd peak | $(calc "$pfd/$ifd" 1) | |
| daemon threads | $(kv "$f" idle_threads) idle | $(kv "$f" threads_after) after | | |

The daemon's soft limit on open files was $(kv "$f" nofile_limit) (each call in
flight holds two descriptors: main_server's connection and the handler's).

EOF
}

# ------------------------------------------------ 4. registry GET ---
bench_registry() {
    log "4: GET /api/tools with 1,000 tools x 2 roles"
    timeout 300 "$REL/bench_registry" --tools 1000 --rounds 500 >"$RAW/registry.txt"
}

report_registry() {
    local f=$RAW/registry.txt e w k
    e=$(kv "$f" empty_median_ms); w=$(kv "$f" warm_median_ms); k=$(kv "$f" cold_median_ms)
    SUMMARY+=("| 4. GET /api/tools, 1,000 tools × 2 roles (issue 3) | a few ms (≤ 5 ms) | median $(calc "$w" 2) ms warm, $(calc "$k" 2) ms cold; ÷ empty $(calc "$w/$e" 1), $(calc "$k/$e" 1) | $(goal "$k" 5) |")
    cat <<EOF
### 4. Registry GET with 1,000 tools × 2 roles (issue 3)

\`bench_registry\` runs two \`neko-sidecar dev-server\` processes: one empty
(built-ins only, the baseline), one holding 1,000 tools on each of its 2 roles.
GETs alternate between the two ($(kv "$f" rounds) rounds, one keep-alive connection each).
"warm": the registry unchanged between GETs (the polling case); "cold": one
registration just before each GET.

\`\`\`
target/release/bench_registry --tools 1000 --rounds 500
\`\`\`

| registry | answer size | median ms | p99 ms | median ÷ empty | goal: a few ms |
|---|---:|---:|---:|---:|---|
| empty (baseline) | $(kv "$f" empty_bytes) B | $(calc "$e" 3) | $(calc "$(kv "$f" empty_p99_ms)" 3) | 1.00 | |
| 1,000 × 2, warm | $(kv "$f" full_bytes) B | $(calc "$w" 3) | $(calc "$(kv "$f" warm_p99_ms)" 3) | $(calc "$w/$e" 1) | $(goal "$w" 5) (≤ 5 ms) |
| 1,000 × 2, cold | $(kv "$f" full_bytes) B | $(calc "$k" 3) | $(calc "$(kv "$f" cold_p99_ms)" 3) | $(calc "$k/$e" 1) | $(goal "$k" 5) (≤ 5 ms) |

EOF
}

# ------------------------------------------------ 5. restart ---
bench_restart() {
    local n
    for n in 100 1000; do
        log "5: main_server restart -> $n tools visible, $RESTARTS restarts"
        timeout 600 "$REL/bench_restart" --tools "$n" --restarts "$RESTARTS" --poll-ms "$POLL_MS" \
            >"$RAW/restart_$n.txt"
    done
}

report_restart() {
    cat <<EOF
### 5. main_server restart → all tools visible again (issue 4)

\`bench_restart\` runs \`neko-sidecar run\` (poll interval **${POLL_MS} ms**)
against \`neko-sidecar dev-server\`, waits until all N tools are listed on both
roles, then $RESTARTS times: a random pause in [0, poll), \`POST /__dev/restart\`
(the stand-in forgets everything, as a restart does), and the time until a
\`GET /api/tools\` (polled every 10 ms from outside) lists all N tools again.
The daemon notices at its next poll, so about half a poll interval is expected
on average before it starts registering.

\`\`\`
target/release/bench_restart --tools N --restarts $RESTARTS --poll-ms $POLL_MS
\`\`\`

| N | cold start: all visible | median | max | median ÷ poll | goal: median ≤ poll + 100 ms |
|---:|---:|---:|---:|---:|---|
EOF
    local n f m
    for n in 100 1000; do
        f=$RAW/restart_$n.txt
        m=$(kv "$f" back_median_ms)
        SUMMARY+=("| 5. restart → all visible, N = $n (issue 4) | median ≤ poll + 100 ms$([ $n = 1000 ] && echo " (stated for N = 100)") | median $(calc "$m" 0) ms, ÷ poll ($POLL_MS ms) $(calc "$m/$POLL_MS") | $(goal "$m" $((POLL_MS + 100))) |")
        echo "| $n | $(calc "$(kv "$f" cold_start_ms)" 0) ms | $(calc "$m" 0) ms | $(calc "$(kv "$f" back_max_ms)" 0) ms | $(calc "$m/$POLL_MS") | $(goal "$m" $((POLL_MS + 100)))$([ $n = 1000 ] && echo " (goal stated for N = 100)") |"
    done
    echo
}

# ------------------------------------------------ 6. manifest edit ---
bench_edit() {
    log "6: manifest edit -> new schema registered, $EDITS edits"
    timeout 300 "$REL/bench_edit" --edits "$EDITS" --debounce-ms "$DEBOUNCE_MS" --tools 100 >"$RAW/edit.txt"
}

report_edit() {
    local f=$RAW/edit.txt m
    m=$(kv "$f" edit_median_ms)
    SUMMARY+=("| 6. manifest edit → new schema registered (issue 6) | median ≤ debounce + 100 ms | median $(calc "$m" 0) ms, ÷ debounce ($DEBOUNCE_MS ms) $(calc "$m/$DEBOUNCE_MS") | $(goal "$m" $((DEBOUNCE_MS + 100))) |")
    cat <<EOF
### 6. Manifest edit → new schema registered (issue 6)

\`bench_edit\` runs \`neko-sidecar run\` (debounce **${DEBOUNCE_MS} ms**, the
default) with 100 tools; $EDITS times it rewrites one manifest with a new
property in the schema and polls the stand-in's \`/__dev/registry\` every 5 ms
until both roles hold the new schema. Edits are 2–4 debounce periods apart.

\`\`\`
target/release/bench_edit --edits $EDITS --debounce-ms $DEBOUNCE_MS --tools 100
\`\`\`

| edits | median | max | median ÷ debounce | goal: median ≤ debounce + 100 ms |
|---:|---:|---:|---:|---|
| $(kv "$f" edit_n) | $(calc "$m" 0) ms | $(calc "$(kv "$f" edit_max_ms)" 0) ms | $(calc "$m/$DEBOUNCE_MS") | $(goal "$m" $((DEBOUNCE_MS + 100))) |

EOF
}

# ------------------------------------------------ 7. SIGTERM ---
bench_sigterm() {
    log "7: SIGTERM -> tools gone and exited, $STOPS runs"
    timeout 300 "$REL/bench_sigterm" --runs "$STOPS" --tools 100 >"$RAW/sigterm.txt"
}

report_sigterm() {
    local f=$RAW/sigterm.txt m b
    m=$(kv "$f" stop_median_ms); b=$(kv "$f" baseline_median_ms)
    SUMMARY+=("| 7. SIGTERM → tools gone and exited, 100 tools (issue 6) | median < 200 ms | median $(calc "$m" 1) ms, ÷ 200 ms $(calc "$m/200"); ÷ bare kill $(calc "$m/$b" 0) | $(goal "$m" 200) |")
    cat <<EOF
### 7. SIGTERM → all tools gone and the process exited (issue 6)

\`bench_sigterm\` starts \`neko-sidecar run\` with 100 tools, waits until all
are visible, sends SIGTERM and waits for the exit; then the stand-in must list
none of its tools (if some remain, the time until they are gone counts). The
baseline, interleaved: SIGTERM and wait on \`sleep 60\`, which exits at once.

\`\`\`
target/release/bench_sigterm --runs $STOPS --tools 100
\`\`\`

| | runs | median | max | median ÷ 200 ms | median ÷ baseline | goal: median < 200 ms |
|---|---:|---:|---:|---:|---:|---|
| \`kill\` of \`sleep 60\` (baseline) | $(kv "$f" baseline_n) | $(calc "$b" 2) ms | $(calc "$(kv "$f" baseline_max_ms)" 2) ms | | 1 | |
| neko-sidecar, 100 tools | $(kv "$f" stop_n) | $(calc "$m" 1) ms | $(calc "$(kv "$f" stop_max_ms)" 1) ms | $(calc "$m/200") | $(calc "$m/$b" 0) | $(goal "$m" 200) |

Exited with status 0: $(kv "$f" clean_exits) of $(kv "$f" runs); tools already gone when the process had exited: $(kv "$f" gone_at_exit) of $(kv "$f" runs).

EOF
}

# ------------------------------------------------ 8. sustained calls ---
bench_soak_calls() {
    log "8: $SOAK_CALLS calls at concurrency 64"
    SOAK_CALLS=$SOAK_CALLS SOAK_CONCURRENCY=64 SOAK_WARM_CALLS=$SOAK_WARM \
        timeout 600 "$REL/soak_calls" calls >"$RAW/soak_calls.txt"
}

report_soak_calls() {
    local f=$RAW/soak_calls.txt
    local n err warm end growth ratio flat
    n=$(kv "$f" calls); err=$(kv "$f" errors)
    warm=$(kv "$f" warm_rss_kb); end=$(kv "$f" end_sampled_rss_kb); growth=$(kv "$f" growth_kb)
    ratio=$(calc "$end/$warm" 3)
    # A leak grows with the number of calls; the allocator's working set
    # does not. "Flat": the last sample within 5 % of the one after warm-up.
    flat=$(awk -v r="$ratio" -v e="$err" 'BEGIN { print (e == 0 && r <= 1.05) ? "met" : "**not met**" }')
    SUMMARY+=("| 8. $n calls at concurrency 64 (issue 8) | zero errors, RSS flat after warm-up | $err errors; RSS $(calc "$warm/1024" 1) MiB after $(kv "$f" warm_calls) calls, $(calc "$end/1024" 1) MiB after $(kv "$f" end_calls) (growth $growth kB, ÷ warm $ratio) | $flat |")
    cat <<EOF
### 8. $n calls at concurrency 64 (issue 8)

\`soak_calls calls\` starts the stand-in and \`neko-sidecar run\` with 4 tools
whose http handler (in the example's own process) answers at once, then makes
$n calls with main_server's body from 64 concurrent callers on a pooled
client, and checks every answer (the envelope and the echoed arguments). The
daemon's RSS (\`/proc/PID/status\` VmRSS) is sampled every 5,000 calls; the
baseline is the sample after the first fifth of the calls (the warm-up, while
the allocator and the connection pools reach their working set), and "flat"
is read as the last sample within 5 % of it: a leak grows with the calls.

\`\`\`
SOAK_CALLS=$n SOAK_CONCURRENCY=64 SOAK_WARM_CALLS=$SOAK_WARM target/release/soak_calls calls
\`\`\`

| figure | baseline | at the end | ratio | goal |
|---|---:|---:|---:|---|
| calls answered correctly | — | $((n - err)) of $n | $(calc "($n - $err)/$n" 3) | $([ "$err" = 0 ] && echo met || echo "**not met**") (zero errors) |
| daemon RSS | $(calc "$warm/1024" 1) MiB after $(kv "$f" warm_calls) calls | $(calc "$end/1024" 1) MiB after $(kv "$f" end_calls) calls (growth $growth kB) | $ratio | $flat (≤ 1.05) |
| daemon RSS, anonymous / file-backed | $(calc "$(kv "$f" registered_anon_kb)/1024" 1) / $(calc "$(kv "$f" registered_file_kb)/1024" 1) MiB before the first call | $(calc "$(kv "$f" end_anon_kb)/1024" 1) / $(calc "$(kv "$f" end_file_kb)/1024" 1) MiB | | |
| daemon peak RSS (VmHWM) | $(calc "$(kv "$f" registered_rss_kb)/1024" 1) MiB before the first call | $(calc "$(kv "$f" hwm_kb)/1024" 1) MiB | $(calc "$(kv "$f" hwm_kb)/$(kv "$f" registered_rss_kb)") | |
| calls per second; daemon CPU per call | — | $(kv "$f" calls_per_s) /s over $(kv "$f" took_s) s; $(kv "$f" cpu_us_per_call) µs | | |
| daemon threads, open descriptors | — | $(kv "$f" threads_end), $(kv "$f" fds_end) | | |

RSS every 5,000 calls (calls: kB): $(kv "$f" rss_samples_kb | sed 's/,/, /g').

EOF
}

# ------------------------------------------------ 9. idle ---
bench_idle() {
    log "9: idle with 100 tools: ${IDLE_SETTLE}s to settle, then ${IDLE_SECS}s measured"
    SOAK_IDLE_SECS=$IDLE_SECS SOAK_IDLE_SETTLE_SECS=$IDLE_SETTLE \
        timeout $((IDLE_SECS + IDLE_SETTLE + 120)) "$REL/soak_calls" idle >"$RAW/idle.txt"
}

report_idle() {
    local f=$RAW/idle.txt
    local anon pct hour res anon_ok cpu_ok
    anon=$(kv "$f" end_anon_kb); pct=$(kv "$f" cpu_pct); hour=$(kv "$f" cpu_s_per_hour)
    # One clock tick over the window, in s per hour: the resolution.
    res=$(calc "3600 / $(kv "$f" clk_tck) / $(kv "$f" window_s)" 2)
    anon_ok=$(goal "$anon" $((IDLE_ANON_GOAL_MIB * 1024)))
    cpu_ok=$(awk -v x="$pct" -v lim="$IDLE_CPU_GOAL_PCT" 'BEGIN { print (x < lim) ? "met" : "**not met**" }')
    SUMMARY+=("| 9. idle, 100 tools: memory (issue 8) | RssAnon ≤ $IDLE_ANON_GOAL_MIB MiB | RssAnon $(mib "$anon") MiB (VmRSS $(mib "$(kv "$f" end_rss_kb)"), of which file-backed $(mib "$(kv "$f" end_file_kb)")) | $anon_ok |")
    SUMMARY+=("| 9. idle, 100 tools: CPU (issue 8) | effectively zero (< $IDLE_CPU_GOAL_PCT % of one core) | $(calc "$pct" 3) % of one core, $(calc "$hour" 1) s per hour | $cpu_ok |")
    cat <<EOF
### 9. Idle with 100 tools (issue 8)

\`soak_calls idle\` starts the stand-in and \`neko-sidecar run\` with 100 tools
and the default intervals (poll 5 s, rescan 30 s, debounce 200 ms), waits
until all are registered and then $(kv "$f" settle_s) s more, and measures over
$(calc "$(kv "$f" window_s)" 0) s: the daemon's CPU time (utime + stime from
\`/proc/PID/stat\`, counted in clock ticks: one tick over this window is
$res s per hour) and its memory (\`/proc/PID/status\`: RssAnon, the heap and
stacks, which is the daemon's own; RssFile, the pages of the executable and
of the C library that it touched, shared with any other process mapping
them). Idle, the daemon's only work is its job: one \`GET /api/tools\` per
poll and a rescan of the manifests every 30 s. There is no baseline: nothing
else does this job.

\`\`\`
SOAK_IDLE_SECS=$IDLE_SECS SOAK_IDLE_SETTLE_SECS=$IDLE_SETTLE target/release/soak_calls idle
\`\`\`

| figure | at the start of the window | at the end | verdict |
|---|---:|---:|---|
| RssAnon | $(mib "$(kv "$f" start_anon_kb)") MiB | $(mib "$anon") MiB | $anon_ok (≤ $IDLE_ANON_GOAL_MIB MiB) |
| RssFile | $(mib "$(kv "$f" start_file_kb)") MiB | $(mib "$(kv "$f" end_file_kb)") MiB | |
| VmRSS (the two together) | $(mib "$(kv "$f" start_rss_kb)") MiB | $(mib "$(kv "$f" end_rss_kb)") MiB (peak $(mib "$(kv "$f" hwm_kb)")) | |
| CPU over the window | — | $(kv "$f" cpu_s) s: $(calc "$pct" 3) % of one core, $(calc "$hour" 1) s per hour | $cpu_ok (< $IDLE_CPU_GOAL_PCT %) |
| threads, open descriptors | — | $(kv "$f" threads), $(kv "$f" fds) | |
| log lines during the window | — | $(kv "$f" log_lines_in_window) | |

EOF
}

# ------------------------------------------------ main ---
# want N: benchmark N is part of this run (BENCH_ONLY unset: all are).
want() { [ -z "${BENCH_ONLY:-}" ] || [[ " $BENCH_ONLY " == *" $1 "* ]]; }

main() {
    local t0=$SECONDS
    install_peers
    build
    set_halt_poll
    record_machine
    mkdir -p "$RAW"
    rm -f "$RAW"/*.txt
    log "machine recorded; load average $(cut -d' ' -f1-3 /proc/loadavg)"
    if want 1 || want 2; then bench_http_and_exec; fi
    want 3 && bench_burst
    want 4 && bench_registry
    want 5 && bench_restart
    want 6 && bench_edit
    want 7 && bench_sigterm
    want 8 && bench_soak_calls
    want 9 && bench_idle
    SUMMARY=()
    rm -f "$WORK"/r[1-9]
    want 1 && report_http >"$WORK/r1"
    want 2 && report_exec >"$WORK/r2"
    want 3 && report_burst >"$WORK/r3"
    want 4 && report_registry >"$WORK/r4"
    want 5 && report_restart >"$WORK/r5"
    want 6 && report_edit >"$WORK/r6"
    want 7 && report_sigterm >"$WORK/r7"
    want 8 && report_soak_calls >"$WORK/r8"
    want 9 && report_idle >"$WORK/r9"
    local took=$((SECONDS - t0))
    {
        echo "<!-- Written by bench/run.sh; do not edit by hand. -->"
        echo "## Figures of the last run"
        echo
        [ "$QUICK" = 1 ] && echo "**A quick smoke run (BENCH_QUICK=1): too short to quote.**" && echo
        echo "Machine (recorded by the script at the start of the run; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)):"
        echo
        echo "$MACHINE"
        echo
        echo "The whole run took $((took / 60)) min $((took % 60)) s (\`bench/run.sh\`, build included)."
        echo
        echo "### Goals"
        echo
        echo "| benchmark | goal | this run | verdict |"
        echo "|---|---|---|---|"
        printf '%s\n' "${SUMMARY[@]}"
        echo
        cat "$WORK"/r[1-9]
    } >"$OUT"
    # The verdicts, for whoever ran the script.
    printf '%s\n' "${SUMMARY[@]}" | awk -F' \\| ' '{ sub(/^\| /, "", $1); sub(/ \|$/, "", $4); printf "%-8s %s: %s (%s)\n", ($4 == "met" ? "met" : "NOT MET"), $1, $3, $2 }' >&2
    # Rewrite the marked section of BENCHMARKS.md.
    local doc=$ROOT/BENCHMARKS.md
    if [ -n "${BENCH_ONLY:-}" ]; then
        log "BENCH_ONLY=$BENCH_ONLY: BENCHMARKS.md left as it was"
    elif [ -f "$doc" ] && grep -q '<!-- BEGIN bench/run.sh -->' "$doc"; then
        awk -v out="$OUT" '
            /<!-- BEGIN bench\/run.sh -->/ { print; while ((getline l < out) > 0) print l; skip = 1; next }
            /<!-- END bench\/run.sh -->/ { skip = 0 }
            !skip { print }
        ' "$doc" >"$WORK/doc" && cat "$WORK/doc" >"$doc"
        log "BENCHMARKS.md updated"
    fi
    log "done in ${took}s: $OUT"
}

# Sourced (for a custom run of its pieces), it only defines them.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
