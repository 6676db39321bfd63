#!/usr/bin/env bash
# Regenerates link/text-layout.ld, the order in which the release build lays
# out the daemon's machine code (build.rs hands it to the linker).
#
#   bench/layout.sh              # builds release first (BENCH_SKIP_BUILD=1 to skip)
#
# Why: the kernel maps the executable's code in blocks of 64 KiB or more
# around every page touched, and start-up runs a little code from everywhere
# in the 7 MB of text, so an idle daemon had nearly all of it resident. Laid
# out so that what start-up and an idle daemon run sits together, at the
# front, only that part is mapped (BENCHMARKS.md, "Idle").
#
# How: the daemon runs under valgrind's callgrind, which records every
# instruction it executes, through the workload of benchmark 9 (100 tools,
# start-up, polls and rescans) and then some work (http and exec calls, bad
# arguments, the admin endpoints, a manifest edit, SIGHUP). The functions
# run before the work come first in the layout, those of the work next;
# everything else follows in the linker's own order. Names are written as
# patterns without the parts that change from build to build (the hashes of
# legacy mangling, the crate disambiguators of v0 mangling, the numbers LTO
# gives to local copies), so the layout stays valid while the code changes;
# rerun this after large changes (a function missing from the layout costs
# memory, never correctness).
#
# Needs valgrind, curl, jq, python3, nm (binutils), and the release
# bench_handler example.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run.sh"
for c in valgrind curl jq python3 nm; do
    command -v "$c" >/dev/null || die "$c is missing"
done
if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
    log "building release: bench_handler, then neko-sidecar by itself"
    # Apart: the example's dev-dependencies would change the daemon's
    # features (bench/run.sh says more).
    cargo build --release --quiet --example bench_handler
    cargo build --release --quiet --bin neko-sidecar
fi
OUT=$ROOT/link/text-layout.ld

start_handler 600
hp=$HP
start_devserver

# Benchmark 9's 100 tools, an http and an exec tool to call, and the
# example manifests (their schemas use more keywords).
AGENT=$WORK/agent
mkdir -p "$AGENT/tools.d"
ADMIN=127.0.0.1:$(free_port)
cat >"$AGENT/agent.toml" <<EOF
source = "plugin:layout"
manifest_dirs = ["tools.d", "$ROOT/examples/tools"]
[main_server]
url = "$DS"
[callback]
listen = "127.0.0.1:0"
[admin]
listen = "$ADMIN"
[registration]
poll_interval = "1s"
[reload]
rescan_interval = "12s"
EOF
for i in $(seq -w 0 99); do
    printf '[[tool]]\nname = "soak_%s"\ndescription = "Echoes q (tool %s)"\ntimeout_seconds = 30\nhandler = { type = "http", url = "http://127.0.0.1:%s/w" }\nparameters = { type = "object", required = ["q"], properties = { q = { type = "string" } } }\n\n' \
        "$i" "$i" "$hp"
done >"$AGENT/tools.d/soak.toml"
write_bench_tools "$AGENT/tools.d/bench.toml"

CG=$WORK/cg.out
log "starting the daemon under callgrind"
start_bg sidecar valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$CG" \
    "$BIN" run --config "$AGENT/agent.toml"
SIDECAR=$LAST_PID
url=$(callback_url w)
for t in soak_99 e get_weather; do callback_url "$t" >/dev/null; done
# Idle: polls, rescans, and the blocking thread of a rescan ending after
# its 10 s without work (which valgrind, running one thread at a time,
# only sees if it happens).
sleep 30
callgrind_control -d "$SIDECAR" >/dev/null 2>&1

log "the work: calls, the admin endpoints, an edit, SIGHUP"
for i in 1 2 3; do check_answer "$url" "$CALL_BODY"; done
check_answer "${url%/w}/e" "${CALL_BODY/\"w\"/\"e\"}"
call() { curl -s --max-time 20 -XPOST -H 'content-type: application/json' -d "$2" "$1" >/dev/null || true; }
call "$url" '{"name":"w","arguments":{"city":7},"call_id":"x","raw_arguments":"{\"city\":7}"}'
call "$url" 'not json'
call "${url%/w}/nope" "$CALL_BODY"
call "${url%/w}/disk_usage" '{"name":"disk_usage","arguments":{},"call_id":"x","raw_arguments":"{}"}'
for p in healthz readyz status metrics; do curl -s --max-time 10 "http://$ADMIN/$p" >/dev/null || true; done
printf '[[tool]]\nname = "added"\ndescription = "d"\nhandler = { type = "http", url = "http://127.0.0.1:%s/w" }\nparameters = { type = "object" }\n' "$hp" \
    >>"$AGENT/tools.d/bench.toml"
callback_url added >/dev/null
kill -HUP "$SIDECAR"
sleep 4
callgrind_control -d "$SIDECAR" >/dev/null 2>&1
stop_bg "$SIDECAR"

log "writing $OUT"
nm --defined-only "$BIN" >"$WORK/nm.txt"
python3 - "$WORK/nm.txt" "$BIN" "$CG".1 "$CG".2 >"$OUT.new" <<'EOF'
import bisect, re, sys

nm_file, binary, idle_dump, work_dump = sys.argv[1:5]
# Code symbols by address (aliases share one).
syms = {}
for line in open(nm_file):
    p = line.split()
    if len(p) == 3 and p[1] in "tTwW":
        syms.setdefault(int(p[0], 16), []).append(p[2])
starts = sorted(syms)

def executed(path):
    """Addresses of the executed instructions of `binary` in one callgrind
    dump (--dump-instr=yes: positions are the object's own addresses)."""
    names, inside, cur, seen = {}, False, 0, set()
    for line in open(path, errors="replace"):
        if line.startswith(("ob=", "cob=")):
            m = re.match(r"c?ob=\((\d+)\)\s*(.*)", line.strip())
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line[0] == "o":
                    inside = names.get(m.group(1)) == binary
            continue
        c = line[:1]
        if not (c.isdigit() or c in "+-*"):
            continue
        tok = line.split()[0]
        if tok.startswith("0x"):
            cur = int(tok, 16)
        elif tok[0] == "+":
            cur += int(tok[1:])
        elif tok[0] == "-":
            cur -= int(tok[1:])
        elif tok != "*":
            cur = int(tok)
        if inside:
            seen.add(cur)
    return seen

def functions(addrs):
    """The names of the functions holding those addresses, in address order."""
    hit = set()
    for a in addrs:
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0:
            hit.add(starts[i])
    return [n for s in sorted(hit) for n in syms[s]]

def pattern(name):
    name = re.sub(r"\.\d+$", "", name)                 # LTO's numbered local copies
    name = re.sub(r"17h[0-9a-f]{16}E$", "17h*E", name)  # legacy mangling's hash
    name = re.sub(r"Cs[0-9A-Za-z]+_(?=\d)", "Cs*_", name)  # v0 crate disambiguators
    return re.sub(r"[^A-Za-z0-9_.*]", "?", name)       # `$` and the like: any one character

groups, done = [], set()
for dump in (idle_dump, work_dump):
    group = []
    for n in functions(executed(dump)):
        p = pattern(n)
        if p not in done:
            done.add(p)
            group.append(p)
    groups.append(group)
# What valgrind never runs, so never sees: the SHA-NI code of sha2, which
# hashes the manifests at every rescan on CPUs that have it, and the paths of
# std's channels that wait for another thread (valgrind runs one thread at a
# time, so the answer is always there already): notify waits so for its
# watches. `perf record -e minor-faults -d` on a native run shows what else
# maps code outside the layout.
groups[0] += ["_ZN4sha26sha2563x86*digest_blocks17h*E", "*4sync4mpmc*"]

print("/* Generated by bench/layout.sh: do not edit. The daemon's functions in")
print("   the order start-up and an idle daemon run them, then those of calls,")
print("   reloads and the admin endpoints; the rest of .text follows. See")
print("   build.rs and BENCHMARKS.md, \"Idle\". */")
print("SECTIONS {\n  .text : {")
# The C start-up code (`_start`), whose sections have no function names.
print("    *crt1.o(.text .text.*) *crti.o(.text .text.*) *crtbeginS.o(.text .text.*)")
for title, group in zip(("start-up and idle", "calls, reloads, admin"), groups):
    print(f"    /* {title}: {len(group)} functions */")
    for p in group:
        print(f"    *(.text.{p} .text.{p}.* .text.unlikely.{p} .text.unlikely.{p}.*)")
print("  }\n} INSERT BEFORE .init;")
EOF
mv "$OUT.new" "$OUT"
log "$(grep -c '^    \*(' "$OUT") patterns; rebuild the release binary to use them"
