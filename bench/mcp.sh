#!/usr/bin/env bash
# The MCP handler against the exec handler, on the same Python tool:
#
#   bench/mcp.sh                 # 5 interleaved rounds of 5 s per path and concurrency
#   BENCH_QUICK=1 bench/mcp.sh   # a smoke run (1 round of 1 s: figures not for publishing)
#
# examples/handlers/weather_mcp.py, the weather tool, is called through the
# real `neko-sidecar run` (against `neko-sidecar dev-server`) two ways:
#   exec: a [[tool]] whose exec handler runs `python3 weather_mcp.py --exec`,
#         one interpreter start per call (the tool's code, without the SDK);
#   mcp:  an [[mcp_server]] running `python3 weather_mcp.py`, the official
#         Python SDK serving tools/call over stdio, started once.
# Both use the same interpreter (a venv's python3) and the same function.
# Load: wrk with bench/wrk/call.lua at the callback URLs read from GET
# /api/tools, concurrency 1 and 8, the two paths taking turns to go first.
# It prints p50, p99 and req/s of each, and the verdict: exec p50 ÷ mcp p50
# (the median of the rounds' own ratios) at least 10 at both concurrencies.
#
# It installs what it needs when missing (wrk, curl, jq, python3,
# python3-venv; the `mcp` package into a venv kept in a cache directory),
# builds the release binary and the drivers (run.sh's `build`), and writes
# the raw figures and the table to bench/results/partial/mcp/. Exits 1 when
# a goal is not met, 2 when the MCP path could not be measured (the exec
# path is measured regardless).
#
# Knobs (environment): BENCH_DURATION, BENCH_ROUNDS, BENCH_QUICK,
# BENCH_SKIP_BUILD=1, NEKO_SIDECAR_BIN (as bench/run.sh);
# BENCH_MCP_VENV (default ~/.cache/neko-sidecar/bench-mcp-venv),
# BENCH_MCP_SPEC (the pip requirement, default 'mcp>=2,<3'),
# BENCH_PYTHON (the interpreter the venv is made from, default python3).
set -euo pipefail
# The helpers of bench/run.sh (sourced, it only defines them).
# shellcheck source=bench/run.sh
. "$(dirname "${BASH_SOURCE[0]}")/run.sh"

P50_RATIO_GOAL=10
RES=$ROOT/bench/results/partial/mcp
RAW=$RES
SCRIPT=$ROOT/examples/handlers/weather_mcp.py
VENV=${BENCH_MCP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/neko-sidecar/bench-mcp-venv}
SPEC=${BENCH_MCP_SPEC:-mcp>=2,<3}
MCP_WAIT_S=30   # how long the MCP tool may take to show up in GET /api/tools

install_mcp_peers() {
    apt_install wrk curl jq python3 python3-venv
    PY_BASE=$(command -v "${BENCH_PYTHON:-python3}")
}

# The venv with the SDK: made once, then reused (pip only checks SPEC).
# Sets PY (its python3) and MCP_VERSION.
make_venv() {
    if [ ! -x "$VENV/bin/python3" ]; then
        log "creating the venv $VENV"
        mkdir -p "$(dirname "$VENV")"
        # Debian's python3 makes venvs only with python3-venv (ensurepip).
        if ! "$PY_BASE" -m venv "$VENV" >"$WORK/venv.log" 2>&1; then
            rm -rf "$VENV"
            apt_install python3-venv
            "$PY_BASE" -m venv "$VENV" || die "cannot create a venv with $PY_BASE"
        fi
    fi
    PY=$VENV/bin/python3
    log "installing $SPEC into the venv"
    "$PY" -m pip install --quiet --disable-pip-version-check "$SPEC" ||
        die "pip could not install $SPEC"
    MCP_VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("mcp"))')
    log "mcp $MCP_VERSION on $("$PY" -V 2>&1)"
}

# The two manifests, in files of their own: a daemon that does not know
# [[mcp_server]] yet skips that file and still serves the exec tool.
write_mcp_bench_tools() {
    cat >"$1/exec.toml" <<EOF
[[tool]]
name = "weather_exec"
description = "Current weather of a city (weather_mcp.py --exec, an interpreter per call)."
handler = { type = "exec", command = ["$PY", "$SCRIPT", "--exec"] }
parameters = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
EOF
    cat >"$1/mcp.toml" <<EOF
[[mcp_server]]
name = "weather"
command = ["$PY", "$SCRIPT"]
prefix = "mcp_"
timeout_seconds = 30
EOF
}

# tool_url TOOL SECONDS → its callback URL, or nothing if it does not show
# up within SECONDS (or the daemon rejected [[mcp_server]]: no MCP handler).
tool_url() {
    local end=$((SECONDS + $2))
    while [ "$SECONDS" -lt "$end" ]; do
        curl -s "$DS/api/tools" | jq -r --arg t "$1" \
            '[.tools_by_role[][] | select(.name == $t) | .callback_url] | first // empty' | grep . && return 0
        grep -q 'unknown key `mcp_server`' "$WORK/sidecar.log" && return 0
        sleep 0.05
    done
    return 0
}

# direct_run C D: the same call straight from an rmcp client to a fresh
# server, no sidecar (bench/drivers/src/bin/mcp_direct.rs): the floor under
# the MCP path.
direct_run() {
    local line
    line=$("$REL/mcp_direct" --python "$PY" --script "$SCRIPT" --concurrency "$1" --duration "$2" |
        grep '^RESULT') || die "mcp_direct gave no RESULT"
    echo "direct c=$1 ${line#RESULT }" >>"$RAW/mcp.txt"
}

# output URL TOOL → the `output` of the answer to the benchmark's call.
output_of() {
    curl -s --max-time 10 -XPOST -H 'content-type: application/json' \
        -d "${CALL_BODY/\"w\"/\"$2\"}" "$1" | jq -cS .output
}

bench_mcp() {
    log "starting the stand-in and the daemon (exec tool and MCP server)"
    start_devserver
    write_agent "$WORK/agent" plugin:bench-mcp
    write_mcp_bench_tools "$WORK/agent/tools.d"
    # The protocol the sidecar and the SDK agree on, as `check --probe`
    # (the same client) negotiates it.
    MCP_PROTOCOL=$("$BIN" check --probe --config "$WORK/agent/agent.toml" 2>/dev/null |
        sed -n 's/.*, protocol \([0-9-]*\):.*/\1/p' | head -1)
    log "negotiated protocol: ${MCP_PROTOCOL:-unknown}"
    start_bg sidecar "$BIN" run --config "$WORK/agent/agent.toml"
    SIDECAR_PID=$LAST_PID
    EXEC_URL=$(callback_url weather_exec)
    check_answer "$EXEC_URL" "${CALL_BODY/\"w\"/\"weather_exec\"}"
    MCP_URL=$(tool_url mcp_get_weather "$MCP_WAIT_S")
    if [ -z "$MCP_URL" ]; then
        log "warning: mcp_get_weather never showed up in GET /api/tools; the daemon's log:"
        grep -i -m5 'mcp' "$WORK/sidecar.log" >&2 || tail -5 "$WORK/sidecar.log" >&2
        log "measuring the exec path only"
    else
        check_answer "$MCP_URL" "${CALL_BODY/\"w\"/\"mcp_get_weather\"}"
        local a b
        a=$(output_of "$EXEC_URL" weather_exec)
        b=$(output_of "$MCP_URL" mcp_get_weather)
        [ "$a" = "$b" ] || die "the two paths answer differently: exec $a, mcp $b"
        log "both answer $a"
    fi
    log "$ROUNDS interleaved rounds of ${DUR}s per path and concurrency"
    local c r
    for c in 1 8; do
        wrk_run "" warm "$EXEC_URL" "$c" 1 weather_exec
        [ -n "$MCP_URL" ] && wrk_run "" warm "$MCP_URL" "$c" 1 mcp_get_weather
        for r in $(seq "$ROUNDS"); do
            if [ -z "$MCP_URL" ]; then
                wrk_run mcp exec "$EXEC_URL" "$c" "$DUR" weather_exec
            elif [ $((r % 2)) = 1 ]; then
                wrk_run mcp exec "$EXEC_URL" "$c" "$DUR" weather_exec
                wrk_run mcp mcp "$MCP_URL" "$c" "$DUR" mcp_get_weather
                direct_run "$c" "$DUR"
            else
                direct_run "$c" "$DUR"
                wrk_run mcp mcp "$MCP_URL" "$c" "$DUR" mcp_get_weather
                wrk_run mcp exec "$EXEC_URL" "$c" "$DUR" weather_exec
            fi
        done
    done
    grep -h 'non2xx=[1-9]\|socket_errors=[1-9]' "$RAW/mcp.txt" >&2 &&
        log "warning: some requests failed (see above)"
    # At warn level, a loss is the only line about the server.
    no_mcp_server_lost weather
    for p in "${BG[@]}"; do stop_bg "$p"; done
    BG=()
}

report_mcp() {
    local c r v
    cat <<EOF
### MCP handler against exec handler, the same Python tool

\`examples/handlers/weather_mcp.py\` behind \`neko-sidecar run\` (commit
\`$(git rev-parse --short=12 HEAD)\`), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),
$(nproc) cores: (a) exec, \`python3 weather_mcp.py --exec\` run per call;
(b) mcp, \`python3 weather_mcp.py\` started once, the official SDK (mcp
$MCP_VERSION, protocol $MCP_PROTOCOL) serving tools/call over stdio. Same
interpreter ($("$PY" -V 2>&1)), same function. Load: \`wrk\` at concurrency 1
and 8, ${DUR} s per run, ${ROUNDS} rounds, the two taking turns to go first.
(c) direct, the same server called straight from an rmcp client over its
stdio (\`bench/drivers/src/bin/mcp_direct.rs\`), no sidecar: the floor
under (b), and exec ÷ direct the best ratio any sidecar could reach.
Figures: medians over rounds; the verdict is the median of the rounds' own
p50 ratios.

| concurrency | path | p50 µs | p99 µs | req/s | exec p50 ÷ this p50, round by round | median | verdict (≥ $P50_RATIO_GOAL) |
|---:|---|---:|---:|---:|---|---:|---|
EOF
    VERDICTS=()
    for c in 1 8; do
        echo "| $c | exec (baseline) | $(metric mcp exec $c p50_us) | $(metric mcp exec $c p99_us) | $(calc "$(metric mcp exec $c rps)" 0) | | | |"
        if [ -z "$MCP_URL" ]; then
            echo "| $c | mcp | — | — | — | | | not measured |"
            VERDICTS+=("NOT RUN  MCP vs exec, concurrency $c: the MCP tool did not register")
            continue
        fi
        r=$(ratios mcp mcp exec $c p50_us | median)
        v=$(goal_min "$r" "$P50_RATIO_GOAL")
        echo "| $c | mcp | $(metric mcp mcp $c p50_us) | $(metric mcp mcp $c p99_us) | $(calc "$(metric mcp mcp $c rps)" 0) | $(ratios mcp mcp exec $c p50_us | list) | $(calc "$r" 1) | $v |"
        local d
        d=$(ratios mcp direct exec $c p50_us | median)
        echo "| $c | direct (no sidecar) | $(metric mcp direct $c p50_us) | $(metric mcp direct $c p99_us) | $(calc "$(metric mcp direct $c rps)" 0) | $(ratios mcp direct exec $c p50_us | list) | $(calc "$d" 1) | (ceiling) |"
        VERDICTS+=("$([ "$v" = met ] && echo "met     " || echo "NOT MET ") MCP vs exec, concurrency $c: exec p50 ÷ mcp p50 $(calc "$r" 1) (≥ $P50_RATIO_GOAL; without the sidecar $(calc "$d" 1)); req/s mcp ÷ exec $(calc "$(metric mcp mcp $c rps)/$(metric mcp exec $c rps)" 1)")
    done
    echo
}

mcp_main() {
    install_mcp_peers
    make_venv
    build
    mkdir -p "$RES"
    : >"$RAW/mcp.txt"
    bench_mcp
    report_mcp >"$RES/latest.md"
    cat "$RES/latest.md"
    printf '%s\n' "${VERDICTS[@]}" >&2
    log "written: $RES/latest.md (raw: $RAW/mcp.txt)"
    [ -n "$MCP_URL" ] || exit 2
    printf '%s\n' "${VERDICTS[@]}" | grep -q '^NOT' && exit 1
    return 0
}

mcp_main "$@"
