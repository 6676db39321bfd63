#!/usr/bin/env bash
# Concurrency 1, placement by placement: benchmark 1's http path at
# concurrency 1 (wrk -> proxy -> the fast handler, one connection), nginx and
# the sidecar alike, with the three processes pinned to given CPUs, then left
# free. A diagnostic, not a goal: it tells the proxy's own cost apart from
# where the kernel puts the three processes (BENCHMARKS.md, "Concurrency 1").
#
#   bench/placement.sh                     # 5 rounds of 5 s per placement and proxy
#   R=3 D=3 bench/placement.sh
#   PLACEMENTS="free" bench/placement.sh   # only some placements
#   HANDLER_THREADS=1 bench/placement.sh   # the handler on one tokio worker
#   HAPROXY=1 bench/placement.sh           # HAProxy (Debian's) as a third proxy
#   BENCH_HALT_POLL_NS=200000 bench/placement.sh   # idle vCPUs poll first (see run.sh)
#   NGINX_KEEPALIVE_REQUESTS=10000000 bench/placement.sh  # nginx never reconnects
#
# Placements, as CPU lists for proxy:handler:wrk (P, H and W below):
#   PH-W   0:0:1      the proxy and the handler share CPU 0, wrk on CPU 1
#   PW-H   0:1:0      the proxy and wrk share CPU 0, the handler on CPU 1
#   WH-P   1:0:0      wrk and the handler share CPU 0, the proxy on CPU 1
#   PHW    0:0:0      all three on CPU 0
#   free   all:all:all  no pinning: what bench/run.sh measures
# The proxies take turns going first. Prints a Markdown table: the median
# req/s of each proxy, and each one's ratio to nginx round by round.
#
# Needs 2 CPUs or more, taskset (util-linux), wrk, nginx, curl, jq (and
# haproxy with HAPROXY=1; installed when missing), and the release binary
# and bench_handler example (bench/run.sh builds them).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run.sh"
R=${R:-5}; D=${D:-5}
ALL="0-$(($(nproc) - 1))"
PLACEMENTS=${PLACEMENTS:-"PH-W PW-H WH-P PHW free"}
[ "$(nproc)" -ge 2 ] || die "placement needs 2 CPUs or more"
command -v taskset >/dev/null || die "taskset is missing (apt-get install util-linux)"
for b in "$BIN" "$EX/bench_handler"; do
    [ -x "$b" ] || die "$b is missing: run bench/run.sh once, or cargo build --release --example bench_handler and then --bin neko-sidecar"
done
install_peers
if [ "${HAPROXY:-0}" = 1 ] && ! command -v haproxy >/dev/null; then apt_install haproxy; fi
set_halt_poll
RAW=$WORK   # wrk_run's lines stay in this run's scratch directory

cpus_of() { # placement -> "proxy handler wrk" CPU lists
    case $1 in
        PH-W) echo "0 0 1" ;;
        PW-H) echo "0 1 0" ;;
        WH-P) echo "1 0 0" ;;
        PHW) echo "0 0 0" ;;
        free) echo "$ALL $ALL $ALL" ;;
        *) die "unknown placement $1 (PH-W, PW-H, WH-P, PHW or free)" ;;
    esac
}

# pin CPUS PID...: every thread of every PID (threads made later inherit it).
pin() {
    local cpus=$1 p
    shift
    for p in "$@"; do taskset -a -p -c "$cpus" "$p" >/dev/null; done
}

# one PLACEMENT PROXY URL PID...: a run of D seconds, its line in $RAW/placement.txt.
one() {
    local placement=$1 proxy=$2 url=$3 pc hc wc
    shift 3
    read -r pc hc wc <<<"$(cpus_of "$placement")"
    pin "$pc" "$@"
    pin "$hc" "$HANDLER_PID"
    # wrk inherits the CPUs of the subshell that starts it.
    (taskset -p -c "$wc" "$BASHPID" >/dev/null && wrk_run placement "$placement-$proxy" "$url" 1 "$D" w "$@")
}

if [ -n "${HANDLER_THREADS:-}" ]; then export TOKIO_WORKER_THREADS=$HANDLER_THREADS; fi
start_handler
unset TOKIO_WORKER_THREADS
HANDLER_PID=$LAST_PID
wait_http "$DIRECT" handler
start_nginx "$HP"
PROXIES="nginx sidecar"
if [ "${HAPROXY:-0}" = 1 ]; then
    # HTTP mode, keep-alive on both sides, idle server connections reused
    # by any client (what nginx's keepalive upstream and the sidecar's pool do).
    hport=$(free_port)
    cat >"$WORK/haproxy.cfg" <<EOF
global
    nbthread $(nproc)
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    option http-keep-alive
    http-reuse always
frontend callers
    bind 127.0.0.1:$hport
    default_backend handler
backend handler
    server h 127.0.0.1:$HP
EOF
    start_bg haproxy haproxy -db -f "$WORK/haproxy.cfg"
    HAPROXY_PID=$LAST_PID
    HAPROXY_URL=http://127.0.0.1:$hport/w
    wait_http "$HAPROXY_URL" haproxy
    check_answer "$HAPROXY_URL" "$CALL_BODY"
    wrk_run "" warm "$HAPROXY_URL" 1 1 w
    PROXIES="nginx sidecar haproxy"
fi
start_devserver
write_bench_agent "$WORK/agent"
start_bg sidecar "$BIN" run --config "$WORK/agent/agent.toml"
SIDECAR_PID=$LAST_PID
SIDECAR_URL=$(callback_url w)
check_answer "$NGINX_URL" "$CALL_BODY"
check_answer "$SIDECAR_URL" "$CALL_BODY"
wrk_run "" warm "$NGINX_URL" 1 1 w
wrk_run "" warm "$SIDECAR_URL" 1 1 w

# run PLACEMENT PROXY: one run of that proxy.
run() {
    case $2 in
        nginx) one "$1" nginx "$NGINX_URL" "${NGINX_PIDS[@]}" ;;
        sidecar) one "$1" sidecar "$SIDECAR_URL" "$SIDECAR_PID" ;;
        haproxy) one "$1" haproxy "$HAPROXY_URL" "$HAPROXY_PID" ;;
    esac
}

log "placement: $R rounds of ${D}s per placement and proxy ($PLACEMENTS; $PROXIES)"
for r in $(seq "$R"); do
    # Odd rounds in order, even rounds in reverse.
    order=$PROXIES
    [ $((r % 2)) = 0 ] && order=$(echo "$PROXIES" | tr ' ' '\n' | tac | tr '\n' ' ')
    for p in $PLACEMENTS; do
        for x in $order; do run "$p" "$x"; done
    done
done

echo "wrk -t1 -c1, $R rounds of $D s; handler worker threads: ${HANDLER_THREADS:-one per CPU};"
echo "$(nproc) CPUs, $(idle_policy), kernel $(uname -r)"
echo
head="| placement (proxy:handler:wrk CPUs) | nginx req/s | sidecar req/s | sidecar ÷ nginx, round by round | median |"
rule="|---|---|---|---|---|"
if [ "${HAPROXY:-0}" = 1 ]; then
    head="$head HAProxy req/s | HAProxy ÷ nginx, round by round | median |"
    rule="$rule---|---|---|"
fi
head="$head proxy CPU per call, µs ($(echo "$PROXIES" | sed 's/ / \/ /g')) |"
rule="$rule---|"
echo "$head"
echo "$rule"
for p in $PLACEMENTS; do
    row="| $p ($(cpus_of "$p" | tr ' ' ':')) | $(calc "$(metric placement "$p-nginx" 1 rps)" 0) |"
    for x in $PROXIES; do
        [ "$x" = nginx ] && continue
        rounds=$(per_round_ratio placement "$p-nginx" "$p-$x" 1 rps)
        row="$row $(calc "$(metric placement "$p-$x" 1 rps)" 0) | $rounds | $(calc "$(echo "$rounds" | tr ',' '\n' | median)") |"
    done
    cpu=$(for x in $PROXIES; do calc "$(metric placement "$p-$x" 1 cpu_us)" 1; echo; done | paste -sd/ | sed 's|/| / |g')
    echo "$row $cpu |"
done
