#!/usr/bin/env bash
# Compares two builds of the daemon in one run, interleaved, on the figures
# a build choice (an allocator, a release profile) moves:
#
#   bench/compare.sh A=path/to/neko-sidecar B=path/to/other/neko-sidecar
#
# - http calls at concurrency 64 (wrk, as benchmark 1): req/s and the
#   daemon's CPU per call, both daemons running side by side behind the
#   same fast handler, nginx as the common baseline, taking turns;
# - `soak_calls calls` (benchmark 8, 100,000 calls): the daemon's CPU per call;
# - `bench_burst` (benchmark 3): the peak RSS of 1,000 simultaneous calls;
# - `soak_calls idle` (benchmark 9, 100 tools): RssAnon and RssFile at the
#   end of the window, the two builds idling at the same time.
#
# Knobs: CMP_ROUNDS (wrk rounds and repeats of the drivers, default 5),
# BENCH_DURATION (wrk seconds, 5), CMP_IDLE_SECS (60). The drivers must be
# built (bench/run.sh does it). Prints a Markdown table; raw outputs go to
# bench/results/partial/compare/.
set -euo pipefail
# The helpers of bench/run.sh (sourced, it only defines them).
# shellcheck source=bench/run.sh
. "$(dirname "${BASH_SOURCE[0]}")/run.sh"

[ $# = 2 ] && [[ $1 == *=* ]] && [[ $2 == *=* ]] || die "usage: bench/compare.sh NAME=BIN NAME=BIN"
NAMES=("${1%%=*}" "${2%%=*}")
declare -A BINS=(["${1%%=*}"]=${1#*=} ["${2%%=*}"]=${2#*=})
R=${CMP_ROUNDS:-5}
IDLE=${CMP_IDLE_SECS:-60}
RAW=$ROOT/bench/results/partial/compare
mkdir -p "$RAW"
rm -f "$RAW"/*.txt
install_peers
for b in "${BINS[@]}" "$REL/bench_handler" "$REL/bench_burst" "$REL/soak_calls"; do
    [ -x "$b" ] || die "$b is missing"
done

# The order of round R: the two builds, A first in odd rounds.
order() { if [ $(($1 % 2)) = 1 ]; then echo "${NAMES[0]} ${NAMES[1]}"; else echo "${NAMES[1]} ${NAMES[0]}"; fi; }

log "http calls at concurrency 64: $R rounds of ${DUR}s"
start_handler
wait_http "$DIRECT" handler
start_nginx "$HP"
BIN=${BINS[${NAMES[0]}]}
start_devserver
declare -A URL PID
for n in "${NAMES[@]}"; do
    write_agent "$WORK/$n" "plugin:$n"
    cat >"$WORK/$n/tools.d/w.toml" <<EOF
[[tool]]
name = "w_$n"
description = "The weather of a city (a fixed answer)."
handler = { type = "http", url = "$DIRECT" }
parameters = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
EOF
    start_bg "sidecar_$n" "${BINS[$n]}" run --config "$WORK/$n/agent.toml"
    PID[$n]=$LAST_PID
    URL[$n]=$(callback_url "w_$n")
done
for n in "${NAMES[@]}"; do
    wrk_run "" warm "${URL[$n]}" 64 1 "w_$n"
done
wrk_run "" warm "$NGINX_URL" 64 1 w
for r in $(seq "$R"); do
    wrk_run http nginx "$NGINX_URL" 64 "$DUR" w "${NGINX_PIDS[@]}"
    for n in $(order "$r"); do
        wrk_run http "$n" "${URL[$n]}" 64 "$DUR" "w_$n" "${PID[$n]}"
    done
done
for p in "${BG[@]}"; do stop_bg "$p"; done
BG=()

log "soak_calls calls and bench_burst: $R runs of each build"
for r in $(seq "$R"); do
    for n in $(order "$r"); do
        NEKO_SIDECAR_BIN=${BINS[$n]} SOAK_CALLS=100000 SOAK_WARM_CALLS=20000 \
            timeout 600 "$REL/soak_calls" calls >"$RAW/soak_${n}_$r.txt"
        NEKO_SIDECAR_BIN=${BINS[$n]} timeout 300 "$REL/bench_burst" --calls 1000 --slow-ms 1000 \
            >"$RAW/burst_${n}_$r.txt"
    done
done

log "idle with 100 tools: both builds at once, 30 s to settle, ${IDLE}s window, twice"
for r in 1 2; do
    for n in "${NAMES[@]}"; do
        NEKO_SIDECAR_BIN=${BINS[$n]} SOAK_IDLE_SECS=$IDLE SOAK_IDLE_SETTLE_SECS=30 \
            timeout $((IDLE + 150)) "$REL/soak_calls" idle >"$RAW/idle_${n}_$r.txt" &
        BG+=("$!")
    done
    for p in "${BG[@]}"; do wait "$p"; done
    BG=()
done

# kvs PREFIX NAME KEY → the KEY of every run of NAME, one a line
kvs() { cat "$RAW/$1_$2"_*.txt | grep "^$3=" | cut -d= -f2; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s–%s", lo, hi }'; }
a=${NAMES[0]} b=${NAMES[1]}
echo
echo "| figure | $a | $b | $b ÷ $a |"
echo "|---|---:|---:|---:|"
ra=$(metric http "$a" 64 rps); rb=$(metric http "$b" 64 rps); rn=$(metric http nginx 64 rps)
echo "| c=64 req/s, median of $R rounds (÷ nginx) | $(calc "$ra" 0) ($(calc "$ra/$rn")) | $(calc "$rb" 0) ($(calc "$rb/$rn")) | $(ratios http "$a" "$b" 64 rps | median) (rounds $(ratios http "$a" "$b" 64 rps | list)) |"
ca=$(metric http "$a" 64 cpu_us); cb=$(metric http "$b" 64 cpu_us)
echo "| c=64 daemon CPU µs per call (wrk) | $ca | $cb | $(ratios http "$a" "$b" 64 cpu_us | median) (rounds $(ratios http "$a" "$b" 64 cpu_us | list)) |"
sa=$(kvs soak "$a" cpu_us_per_call | median); sb=$(kvs soak "$b" cpu_us_per_call | median)
echo "| soak_calls calls: daemon CPU µs per call, median of $R ($a / $b runs: $(kvs soak "$a" cpu_us_per_call | range) / $(kvs soak "$b" cpu_us_per_call | range)) | $sa | $sb | $(calc "$sb/$sa") |"
pa=$(kvs soak "$a" calls_per_s | median); pb=$(kvs soak "$b" calls_per_s | median)
echo "| soak_calls calls: calls/s | $pa | $pb | $(calc "$pb/$pa") |"
ha=$(kvs soak "$a" hwm_kb | median); hb=$(kvs soak "$b" hwm_kb | median)
echo "| soak_calls calls: peak RSS MiB | $(mib "$ha") | $(mib "$hb") | $(calc "$hb/$ha") |"
ba=$(kvs burst "$a" peak_hwm_kb | median); bb=$(kvs burst "$b" peak_hwm_kb | median)
echo "| 1,000-call burst: peak RSS MiB, median of $R (runs $(kvs burst "$a" peak_hwm_kb | range) / $(kvs burst "$b" peak_hwm_kb | range) kB) | $(mib "$ba") | $(mib "$bb") | $(calc "$bb/$ba") |"
ia=$(kvs idle "$a" end_anon_kb | median); ib=$(kvs idle "$b" end_anon_kb | median)
echo "| idle, 100 tools: RssAnon MiB (2 runs: $(kvs idle "$a" end_anon_kb | range) / $(kvs idle "$b" end_anon_kb | range) kB) | $(mib "$ia") | $(mib "$ib") | $(calc "$ib/$ia") |"
fa=$(kvs idle "$a" end_file_kb | median); fb=$(kvs idle "$b" end_file_kb | median)
echo "| idle, 100 tools: RssFile MiB | $(mib "$fa") | $(mib "$fb") | $(calc "$fb/$fa") |"
echo
log "raw outputs in $RAW"
