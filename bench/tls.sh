#!/usr/bin/env bash
# A call to a remote MCP server over https against the same call over plain
# http, on loopback, in one run (issue 36):
#
#   bench/tls.sh                 # 5 interleaved rounds of 5 s per path and concurrency
#   BENCH_QUICK=1 bench/tls.sh   # a smoke run (1 round of 1 s: figures not for publishing)
#
# One stand-in MCP server (`neko-sidecar dev-mcp --http`, Streamable HTTP)
# behind one nginx that listens twice: plain http, and https with a
# certificate of a CA made for the run (openssl). The real `neko-sidecar
# run` (against `neko-sidecar dev-server`) bridges it twice, as two
# [[mcp_server]]s: `plain` at the http port and `tls` at the https port,
# the CA trusted through `ca_file`. Both paths cross the same nginx to the
# same server, so the difference is TLS alone: the sidecar's rustls client
# (and nginx's TLS server, which a real remote server has too).
#
# Load: wrk with bench/wrk/call.lua at the two tools' callback URLs (as
# main_server calls them), concurrency 1 and 8, the two paths taking turns
# to go first. Both sessions are kept (the TLS handshake is paid once per
# connection of the sidecar's pool, the first when it lists the tools), so
# the figures are those of calls in a running session; the first call of
# each is timed apart (curl, once). Printed: p50, p99, req/s and the sidecar's
# CPU per call of each, and the ratios tls ÷ plain (medians of the rounds'
# own ratios). Raw figures and the table go to bench/results/partial/tls/.
#
# Knobs (environment): BENCH_DURATION, BENCH_ROUNDS, BENCH_QUICK,
# BENCH_SKIP_BUILD=1, NEKO_SIDECAR_BIN (as bench/run.sh).
set -euo pipefail
# The helpers of bench/run.sh (sourced, it only defines them).
# shellcheck source=bench/run.sh
. "$(dirname "${BASH_SOURCE[0]}")/run.sh"

RES=$ROOT/bench/results/partial/tls
RAW=$RES
ARGS_JSON='{"text":"Tokyo"}'

# make_ca DIR: DIR/ca.pem, and DIR/server.pem + DIR/server.key for
# 127.0.0.1 (an IP address SAN, as the sidecar checks it), signed by it.
make_ca() {
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=neko-sidecar bench CA" \
        -keyout "$1/ca.key" -out "$1/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$1/server.key" -out "$1/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$1/ext.cnf"
    openssl x509 -req -in "$1/server.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial \
        -days 2 -extfile "$1/ext.cnf" -out "$1/server.pem" 2>/dev/null
}

# start_front UPSTREAM_PORT: nginx in front of the MCP server, plain http on
# $PLAIN_PORT and https on $TLS_PORT (HTTP/1.1 both; no buffering, since
# answers may be event streams).
start_front() {
    PLAIN_PORT=$(free_port)
    TLS_PORT=$(free_port)
    write_nginx_conf 1 1024 "$(cat <<EOF
    upstream mcp {
        server 127.0.0.1:$1;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$PLAIN_PORT;
        listen 127.0.0.1:$TLS_PORT ssl;
        ssl_certificate $WORK/ca/server.pem;
        ssl_certificate_key $WORK/ca/server.key;
        location / {
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # The server's own address: rmcp's server refuses other Hosts
            # (its DNS-rebinding guard), as a real front would pass them.
            proxy_set_header Host 127.0.0.1:$1;
            proxy_buffering off;
            proxy_read_timeout 1h;
        }
    }
EOF
)"
    start_bg nginx "$NGINX" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf"
    wait_http "http://127.0.0.1:$PLAIN_PORT/" nginx
}

# first_call URL TOOL → the seconds curl took for one call (the sidecar's
# first to that server: its connection may be opened now).
first_call() {
    local body
    body="{\"name\":\"$2\",\"arguments\":$ARGS_JSON,\"call_id\":\"first\",\"raw_arguments\":\"${ARGS_JSON//\"/\\\"}\"}"
    curl -s -o "$WORK/first.json" -w '%{time_total}' --max-time 30 -XPOST \
        -H 'content-type: application/json' -d "$body" "$1"
    grep -q '"is_error":false' "$WORK/first.json" || die "$2 does not answer a success envelope: $(cat "$WORK/first.json")"
}

bench_tls() {
    mkdir -p "$WORK/ca"
    make_ca "$WORK/ca"
    log "starting the stand-in main_server, the MCP server, nginx (http and https) and the daemon"
    start_devserver
    start_bg devmcp "$BIN" dev-mcp --http 127.0.0.1:0
    local i mcp_url=
    for i in $(seq 100); do
        mcp_url=$(grep -m1 '^http://' "$WORK/devmcp.log" 2>/dev/null) || true
        [ -n "$mcp_url" ] && break
        sleep 0.05
    done
    [ -n "$mcp_url" ] || die "dev-mcp printed no URL: $(cat "$WORK/devmcp.log")"
    local mcp_port=${mcp_url#http://127.0.0.1:}
    start_front "${mcp_port%%/*}"
    write_agent "$WORK/agent" plugin:bench-tls
    cat >"$WORK/agent/tools.d/servers.toml" <<EOF
[[mcp_server]]
name = "plain"
url = "http://127.0.0.1:$PLAIN_PORT/mcp"
transport = "streamable-http"
prefix = "plain_"

[[mcp_server]]
name = "tls"
url = "https://127.0.0.1:$TLS_PORT/mcp"
transport = "streamable-http"
prefix = "tls_"
ca_file = "$WORK/ca/ca.pem"
EOF
    start_bg sidecar "$BIN" run --config "$WORK/agent/agent.toml"
    SIDECAR_PID=$LAST_PID
    PLAIN_URL=$(callback_url plain_echo)
    TLS_URL=$(callback_url tls_echo)
    FIRST_PLAIN=$(first_call "$PLAIN_URL" plain_echo)
    FIRST_TLS=$(first_call "$TLS_URL" tls_echo)
    log "first calls: plain ${FIRST_PLAIN}s, tls ${FIRST_TLS}s"
    log "$ROUNDS interleaved rounds of ${DUR}s per path and concurrency"
    local c r
    for c in 1 8; do
        ARGS=$ARGS_JSON wrk_run "" warm "$PLAIN_URL" "$c" 1 plain_echo
        ARGS=$ARGS_JSON wrk_run "" warm "$TLS_URL" "$c" 1 tls_echo
        for r in $(seq "$ROUNDS"); do
            if [ $((r % 2)) = 1 ]; then
                ARGS=$ARGS_JSON wrk_run tls plain "$PLAIN_URL" "$c" "$DUR" plain_echo "$SIDECAR_PID"
                ARGS=$ARGS_JSON wrk_run tls tls "$TLS_URL" "$c" "$DUR" tls_echo "$SIDECAR_PID"
            else
                ARGS=$ARGS_JSON wrk_run tls tls "$TLS_URL" "$c" "$DUR" tls_echo "$SIDECAR_PID"
                ARGS=$ARGS_JSON wrk_run tls plain "$PLAIN_URL" "$c" "$DUR" plain_echo "$SIDECAR_PID"
            fi
        done
    done
    if grep -h 'non2xx=[1-9]\|socket_errors=[1-9]' "$RAW/tls.txt" >&2; then
        die "some calls failed (above): these figures are not a measurement"
    fi
    # A lost server answers at once with an error envelope (HTTP 200), which
    # wrk would count as fast calls: the daemon logs such a loss at warn.
    if grep -q 'mcp_server=' "$WORK/sidecar.log"; then
        grep 'mcp_server=' "$WORK/sidecar.log" | head -5 >&2
        die "an MCP server was lost during the run (above): these figures are not a measurement"
    fi
    for p in "${BG[@]}"; do stop_bg "$p"; done
    BG=()
}

report_tls() {
    local c
    cat <<EOF
### A call over https against plain http, on loopback

\`bench/tls.sh\` at commit \`$(git rev-parse --short=12 HEAD)\`, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),
$(nproc) cores: \`neko-sidecar dev-mcp --http\` (Streamable HTTP) behind one
nginx ($("$NGINX" -v 2>&1 | sed 's/.*\///')) listening with plain http and with https (a
CA made for the run, trusted through \`ca_file\`), bridged twice by
\`neko-sidecar run\`; \`wrk\` at the two tools' callback URLs, concurrency 1 and
8, ${DUR} s per run, ${ROUNDS} rounds, the two taking turns to go first.
Medians over rounds; the ratios are the medians of the rounds' own ratios.
First call of each session (curl, once; its connection was opened when the tools were listed): plain ${FIRST_PLAIN} s, tls ${FIRST_TLS} s.

| concurrency | path | p50 µs | p99 µs | req/s | sidecar CPU µs per call | p50 tls ÷ plain, round by round | median | CPU tls ÷ plain |
|---:|---|---:|---:|---:|---:|---|---:|---:|
EOF
    for c in 1 8; do
        echo "| $c | plain http | $(metric tls plain $c p50_us) | $(metric tls plain $c p99_us) | $(calc "$(metric tls plain $c rps)" 0) | $(calc "$(metric tls plain $c cpu_us)" 0) | | | |"
        echo "| $c | https | $(metric tls tls $c p50_us) | $(metric tls tls $c p99_us) | $(calc "$(metric tls tls $c rps)" 0) | $(calc "$(metric tls tls $c cpu_us)" 0) | $(ratios tls plain tls $c p50_us | list) | $(calc "$(ratios tls plain tls $c p50_us | median)" 2) | $(calc "$(ratios tls plain tls $c cpu_us | median)" 2) |"
    done
    echo
}

tls_main() {
    install_peers
    command -v openssl >/dev/null || apt_install openssl
    build
    mkdir -p "$RES"
    : >"$RAW/tls.txt"
    bench_tls
    report_tls >"$RES/latest.md"
    cat "$RES/latest.md"
    log "written: $RES/latest.md (raw: $RAW/tls.txt)"
}

tls_main "$@"
