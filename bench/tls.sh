#!/usr/bin/env bash
# A call to a remote MCP server over https against the same call over plain
# http, on loopback, in one run (issue 36):
#
#   bench/tls.sh                 # 5 interleaved rounds of 5 s per path and concurrency
#   BENCH_QUICK=1 bench/tls.sh   # a smoke run (1 round of 1 s: figures not for publishing)
#
# One stand-in MCP server (`neko-sidecar dev-mcp --http`, Streamable HTTP)
# behind one nginx that listens for it five times (below). The real
# `neko-sidecar run` (against `neko-sidecar dev-server`) bridges it five
# times, as five [[mcp_server]]s, the https ones trusting the CA through
# `ca_file`. Every path crosses the same nginx to the same server, so the
# differences are TLS and connections alone: the sidecar's rustls client
# (and nginx's TLS server, which a real remote server has too).
#
#   plain, tls        keep-alive, plain http and https: a running session's
#                     calls share pooled connections (the TLS handshake paid
#                     once per connection, the first when the tools are listed)
#   plain_new         nginx closes the connection after each answer
#                     (keepalive_timeout 0): every call opens a TCP connection
#   tls_new           the same over https: every call a TLS handshake, which
#                     resumes the session of the one before (nginx's tickets,
#                     rustls's session cache), as with most remote servers
#   tls_full          the same with tickets and session cache off: every call
#                     a full handshake (certificate chain sent and verified)
#
# The `_new`/`_full` paths are the cost of a call that finds no open
# connection: the first of a session, or one after the sidecar's client
# dropped its idle connection (reqwest keeps one idle 90 s). nginx logs
# $ssl_session_reused for them, and the script checks that tls_new resumed
# and tls_full did not.
#
# Load: wrk with bench/wrk/call.lua at the tools' callback URLs (as
# main_server calls them): all five paths at concurrency 1, plain and tls at
# concurrency 8, the paths taking turns to go first round by round. The
# first call of the keep-alive sessions is timed apart (curl, once).
# Printed: p50, p90, p99, req/s and the sidecar's CPU per call of each, and
# the ratios against plain http (medians of the rounds' own ratios). Raw
# figures and the table go to bench/results/partial/tls/.
#
# Knobs (environment): BENCH_DURATION, BENCH_ROUNDS, BENCH_QUICK,
# BENCH_SKIP_BUILD=1, BENCH_KEEP_WORK=1, NEKO_SIDECAR_BIN (as bench/run.sh).
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

# start_front UPSTREAM_PORT: nginx in front of the MCP server (HTTP/1.1
# everywhere; no buffering, since answers may be event streams): keep-alive
# plain http on $PLAIN_PORT and https on $TLS_PORT; a connection per
# request, plain on $PLAIN_NEW_PORT and https on $TLS_NEW_PORT; the same
# with no resumption on $TLS_FULL_PORT. Sets FRONT_PID (the master).
start_front() {
    PLAIN_PORT=$(free_port)
    TLS_PORT=$(free_port)
    PLAIN_NEW_PORT=$(free_port)
    TLS_NEW_PORT=$(free_port)
    TLS_FULL_PORT=$(free_port)
    local to_mcp cert
    to_mcp=$(cat <<EOF
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
EOF
)
    cert="ssl_certificate $WORK/ca/server.pem; ssl_certificate_key $WORK/ca/server.key;"
    write_nginx_conf 1 1024 "$(cat <<EOF
    upstream mcp {
        server 127.0.0.1:$1;
        keepalive 64;
    }
    # Per request on the paths of a connection per call: the port and
    # whether its TLS session was resumed (r), checked after the run;
    # buffered, and kept by the three paths alike.
    log_format reuse '\$server_port \$ssl_session_reused';
    server {
        listen 127.0.0.1:$PLAIN_PORT;
        listen 127.0.0.1:$TLS_PORT ssl;
        $cert
$to_mcp
    }
    server {
        listen 127.0.0.1:$PLAIN_NEW_PORT;
        listen 127.0.0.1:$TLS_NEW_PORT ssl;
        $cert
        keepalive_timeout 0;
        access_log $WORK/nginx/reuse.log reuse buffer=64k;
$to_mcp
    }
    server {
        listen 127.0.0.1:$TLS_FULL_PORT ssl;
        $cert
        keepalive_timeout 0;
        ssl_session_tickets off;
        ssl_session_cache off;
        access_log $WORK/nginx/reuse.log reuse buffer=64k;
$to_mcp
    }
EOF
)"
    start_bg nginx "$NGINX" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf"
    FRONT_PID=$LAST_PID
    wait_http "http://127.0.0.1:$PLAIN_PORT/" nginx
}

# check_resumption: over the run, tls_new's handshakes resumed and
# tls_full's did not (else their rows would not be what they are named).
# The last use of nginx: it is stopped here, since its workers write their
# buffered log as they exit.
check_resumption() {
    kill -QUIT "$FRONT_PID"
    wait "$FRONT_PID" || true
    local new_r new_full full_r full_full
    new_r=$(grep -c "^$TLS_NEW_PORT r$" "$WORK/nginx/reuse.log" || true)
    new_full=$(grep -c "^$TLS_NEW_PORT \.$" "$WORK/nginx/reuse.log" || true)
    full_r=$(grep -c "^$TLS_FULL_PORT r$" "$WORK/nginx/reuse.log" || true)
    full_full=$(grep -c "^$TLS_FULL_PORT \.$" "$WORK/nginx/reuse.log" || true)
    log "handshakes: tls_new $new_r resumed, $new_full full; tls_full $full_r resumed, $full_full full"
    [ "$full_r" = 0 ] && [ "$full_full" -gt 0 ] || die "tls_full's handshakes were not all full"
    # tls_new's first handshakes are full (nothing to resume yet).
    [ "$new_full" -le 5 ] && [ "$new_r" -gt 0 ] || die "tls_new's handshakes did not resume"
    RESUMED="$new_r of $((new_r + new_full))"
    FULL="$full_full of $((full_r + full_full))"
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

# The callback URL of each path's echo tool.
declare -A URL

# turns C PATH...: a warm-up of each path, then $ROUNDS rounds in which
# every path runs once, round r starting with the r-th path (round robin).
turns() {
    local c=$1 r i n p
    shift
    n=$#
    local paths=("$@")
    for p in "${paths[@]}"; do
        ARGS=$ARGS_JSON wrk_run "" warm "${URL[$p]}" "$c" 1 "${p}_echo"
    done
    for r in $(seq 0 $((ROUNDS - 1))); do
        for i in $(seq 0 $((n - 1))); do
            p=${paths[$(((i + r) % n))]}
            ARGS=$ARGS_JSON wrk_run tls "$p" "${URL[$p]}" "$c" "$DUR" "${p}_echo" "$SIDECAR_PID"
        done
    done
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
    local name port scheme ca
    : >"$WORK/agent/tools.d/servers.toml"
    for name in plain tls plain_new tls_new tls_full; do
        case $name in
        plain) port=$PLAIN_PORT ;; tls) port=$TLS_PORT ;;
        plain_new) port=$PLAIN_NEW_PORT ;; tls_new) port=$TLS_NEW_PORT ;;
        tls_full) port=$TLS_FULL_PORT ;;
        esac
        scheme=http ca=
        [[ $name == tls* ]] && scheme=https ca="ca_file = \"$WORK/ca/ca.pem\""
        cat >>"$WORK/agent/tools.d/servers.toml" <<EOF
[[mcp_server]]
name = "$name"
url = "$scheme://127.0.0.1:$port/mcp"
transport = "streamable-http"
prefix = "${name}_"
$ca

EOF
    done
    start_bg sidecar "$BIN" run --config "$WORK/agent/agent.toml"
    SIDECAR_PID=$LAST_PID
    for name in plain tls plain_new tls_new tls_full; do
        URL[$name]=$(callback_url "${name}_echo")
    done
    FIRST_PLAIN=$(first_call "${URL[plain]}" plain_echo)
    FIRST_TLS=$(first_call "${URL[tls]}" tls_echo)
    log "first calls: plain ${FIRST_PLAIN}s, tls ${FIRST_TLS}s"
    log "$ROUNDS interleaved rounds of ${DUR}s per path and concurrency"
    turns 1 plain tls plain_new tls_new tls_full
    turns 8 plain tls
    if grep -h 'non2xx=[1-9]\|socket_errors=[1-9]' "$RAW/tls.txt" >&2; then
        die "some calls failed (above): these figures are not a measurement"
    fi
    no_mcp_server_lost
    # Last: it stops nginx, which the sidecar then logs as servers lost.
    check_resumption
    for p in "${BG[@]}"; do stop_bg "$p"; done
    BG=()
}

# row C PATH NAME [BASE]: a table row of PATH at concurrency C; with BASE,
# PATH ÷ BASE: p50 round by round and its median, p90's and CPU's medians.
row() {
    local c=$1 p=$2 base=${4:-}
    printf '| %s | %s | %s | %s | %s | %s | %s |' "$c" "$3" \
        "$(metric tls "$p" "$c" p50_us)" "$(metric tls "$p" "$c" p90_us)" \
        "$(metric tls "$p" "$c" p99_us)" "$(calc "$(metric tls "$p" "$c" rps)" 0)" \
        "$(calc "$(metric tls "$p" "$c" cpu_us)" 0)"
    if [ -n "$base" ]; then
        local p50s
        p50s=$(ratios tls "$base" "$p" "$c" p50_us)
        printf ' %s | **%s** | %s | %s |\n' "$(list <<<"$p50s")" \
            "$(calc "$(median <<<"$p50s")" 2)" \
            "$(calc "$(ratios tls "$base" "$p" "$c" p90_us | median)" 2)" \
            "$(calc "$(ratios tls "$base" "$p" "$c" cpu_us | median)" 2)"
    else
        printf ' | | | |\n'
    fi
}

report_tls() {
    cat <<EOF
### A call over https against plain http, on loopback

\`bench/tls.sh\` at commit \`$(git rev-parse --short=12 HEAD)\`, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),
$(nproc) cores: \`neko-sidecar dev-mcp --http\` (Streamable HTTP) behind one
nginx ($("$NGINX" -v 2>&1 | sed 's/.*\///')) listening with plain http and with https (a
CA made for the run, RSA 2048, trusted through \`ca_file\`), bridged five times
by \`neko-sidecar run\`; \`wrk\` at the tools' callback URLs, ${DUR} s per run,
${ROUNDS} rounds, the paths taking turns to go first. Medians over rounds; the
ratios are the medians of the rounds' own ratios, against plain http on the
same kind of connection.
First call of the keep-alive sessions (curl, once; their connection was opened when the tools were listed): plain ${FIRST_PLAIN} s, tls ${FIRST_TLS} s.

A running session (connections kept alive and pooled):

| concurrency | path | p50 µs | p90 µs | p99 µs | req/s | sidecar CPU µs per call | p50 ÷ http, round by round | p50 ÷ http | p90 ÷ http | CPU ÷ http |
|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|
EOF
    local c
    for c in 1 8; do
        row "$c" plain "plain http"
        row "$c" tls https plain
    done
    cat <<EOF

A call that finds no open connection (nginx closes each after its answer):
every call a TCP connection, and over https a handshake, resumed
(${RESUMED} handshakes) or full (${FULL}, certificate verified):

| concurrency | path | p50 µs | p90 µs | p99 µs | req/s | sidecar CPU µs per call | p50 ÷ http, round by round | p50 ÷ http | p90 ÷ http | CPU ÷ http |
|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|
EOF
    row 1 plain_new "plain http, new connection"
    row 1 tls_new "https, resumed handshake" plain_new
    row 1 tls_full "https, full handshake" plain_new
    echo
    echo "The same rounds against a running session's plain http call (p50, medians of the rounds' ratios): new connection $(calc "$(ratios tls plain plain_new 1 p50_us | median)" 2), resumed https $(calc "$(ratios tls plain tls_new 1 p50_us | median)" 2), full https $(calc "$(ratios tls plain tls_full 1 p50_us | median)" 2); sidecar CPU $(calc "$(ratios tls plain plain_new 1 cpu_us | median)" 2), $(calc "$(ratios tls plain tls_new 1 cpu_us | median)" 2), $(calc "$(ratios tls plain tls_full 1 cpu_us | median)" 2)."
    echo
}

tls_main() {
    install_peers
    apt_install openssl
    build
    mkdir -p "$RES"
    : >"$RAW/tls.txt"
    bench_tls
    report_tls >"$RES/latest.md"
    cat "$RES/latest.md"
    log "written: $RES/latest.md (raw: $RAW/tls.txt)"
}

tls_main "$@"
