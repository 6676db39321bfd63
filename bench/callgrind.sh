#!/usr/bin/env bash
# Instructions per call of one or more builds of the daemon: each runs under
# valgrind's callgrind (which counts instructions, so the figure does not
# depend on what else the machine is doing), behind the stand-in and the
# benchmark's fast http handler; after a warm-up, wrk calls it for D seconds
# and the user-space instructions counted are divided by wrk's request count.
#
#   bench/callgrind.sh target/release/neko-sidecar [OTHER_BUILD ...]
#   C=64 D=5 bench/callgrind.sh ...      # concurrency (1), seconds (5)
#   KEEP_CG=DIR bench/callgrind.sh ...   # keep the profiles in DIR, for
#                                        # callgrind_annotate --inclusive=yes
#
# Needs valgrind, wrk, curl, jq, and the release bench_handler example.
# Prints one line per build: NAME c=C calls=N Ir/call=X.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run.sh"
[ $# -gt 0 ] || die "give one or more daemon binaries"
command -v valgrind >/dev/null || die "valgrind is missing (apt-get install valgrind)"
C=${C:-1}; D=${D:-5}
start_handler
k=0
for b in "$@"; do
    k=$((k + 1))
    start_devserver
    write_bench_agent "$WORK/agent$k"
    start_bg "sidecar$k" valgrind --tool=callgrind --callgrind-out-file="$WORK/cg$k.out" "$b" run --config "$WORK/agent$k/agent.toml"
    pid=$LAST_PID
    url=$(callback_url w)
    check_answer "$url" "$CALL_BODY"
    TOOL=w wrk -t1 -c"$C" -d2s -s "$ROOT/bench/wrk/call.lua" "$url" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1   # count from here
    n=$(TOOL=w wrk -t1 -c"$C" -d"${D}s" -s "$ROOT/bench/wrk/call.lua" "$url" | grep -o 'requests=[0-9]*' | cut -d= -f2)
    callgrind_control -d "$pid" >/dev/null 2>&1
    sleep 0.5
    ir=$(for f in "$WORK/cg$k.out".*; do grep -m1 '^summary:' "$f" | awk '{print $2}'; done | sort -g | tail -1)
    echo "$(basename "$b") c=$C calls=$n Ir/call=$((ir / n))"
    if [ -n "${KEEP_CG:-}" ]; then cp "$WORK/cg$k.out".* "$KEEP_CG/"; fi
    stop_bg "$pid"
done
