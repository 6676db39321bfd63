#!/usr/bin/env bash
# The cost of the sidecar's image check (issue 27), against main_server's
# own check of the same bytes:
#
#   bench/images.sh
#
# The sidecar side is bench/images.rs (`cargo bench --bench images`): the
# median time to check a clean PNG of about 1 MiB (sent as given), to
# repair the same picture with a bad CRC in its iCCP chunk (re-encoded as a
# clean PNG), and what an answer without images pays. The baseline is
# main_server's check as CONTRACT.md rule 7 describes it, written with
# Pillow in bench/images_pillow.py and run on the same two files in the same
# run: strict base64, the magic, Image.open, the pixel cap, verify(), then
# a second open and a full load(). It prints both and the ratios.
#
# It installs what it needs when missing (python3, python3-venv; Pillow
# into a venv kept in a cache directory) and writes the figures to
# bench/results/partial/images/.
#
# Knobs (environment): BENCH_IMAGES_VENV (default
# ~/.cache/neko-sidecar/bench-images-venv), BENCH_PILLOW_SPEC (the pip
# requirement, default 'pillow>=10'), BENCH_PYTHON (default python3).
set -euo pipefail
# shellcheck source=bench/run.sh
. "$(dirname "${BASH_SOURCE[0]}")/run.sh"

RES=$ROOT/bench/results/partial/images
VENV=${BENCH_IMAGES_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/neko-sidecar/bench-images-venv}
SPEC=${BENCH_PILLOW_SPEC:-pillow>=10}

pillow_venv() {
    local py
    py=$(command -v "${BENCH_PYTHON:-python3}") || { apt_install python3 python3-venv; py=$(command -v python3); }
    if [ ! -x "$VENV/bin/python3" ]; then
        log "creating the venv $VENV"
        mkdir -p "$(dirname "$VENV")"
        if ! "$py" -m venv "$VENV" >"$WORK/venv.log" 2>&1; then
            rm -rf "$VENV"
            apt_install python3-venv
            "$py" -m venv "$VENV" || die "cannot create a venv with $py"
        fi
    fi
    PY=$VENV/bin/python3
    "$PY" -m pip install --quiet --disable-pip-version-check "$SPEC" ||
        die "pip could not install $SPEC"
    PILLOW_VERSION=$("$PY" -c 'import PIL; print(PIL.__version__)')
    log "Pillow $PILLOW_VERSION on $("$PY" -V 2>&1)"
}

images_main() {
    mkdir -p "$RES"
    pillow_venv
    log "building and running bench/images.rs (cargo bench, release settings)"
    BENCH_IMAGES_DIR=$WORK cargo bench --quiet --bench images -- --bench >"$RES/sidecar.txt"
    cat "$RES/sidecar.txt"
    log "running the Pillow baseline on the same files"
    "$PY" "$ROOT/bench/images_pillow.py" "$WORK/clean.png" "$WORK/broken.png" >"$RES/pillow.txt"
    cat "$RES/pillow.txt"
    local check repair nothing pil_clean pil_broken bytes pixels
    check=$(kv "$RES/sidecar.txt" check_ms)
    repair=$(kv "$RES/sidecar.txt" repair_ms)
    nothing=$(kv "$RES/sidecar.txt" no_images_ns)
    bytes=$(kv "$RES/sidecar.txt" png_bytes)
    pixels=$(kv "$RES/sidecar.txt" png_pixels)
    pil_clean=$(kv "$RES/pillow.txt" clean_ms)
    pil_broken=$(kv "$RES/pillow.txt" broken_ms)
    {
        echo "PNG: $bytes bytes, $pixels; Pillow $PILLOW_VERSION; $(nproc) CPUs; medians"
        echo
        echo "| step | sidecar | main_server (Pillow) | ratio |"
        echo "|---|---|---|---|"
        echo "| check a clean PNG (sent as given) | $check ms | $pil_clean ms | $(calc "$check/$pil_clean" 2) |"
        echo "| repair one with a bad iCCP CRC (Pillow: refuse it) | $repair ms | $pil_broken ms | $(calc "$repair/$pil_broken" 2) |"
        echo "| an answer without images | $nothing ns | - | - |"
    } | tee "$RES/table.md"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then images_main "$@"; fi
