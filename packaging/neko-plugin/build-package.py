#!/usr/bin/env python3
"""Builds neko-sidecar-VERSION.neko-plugin: the N.E.K.O plugin
(packaging/neko-plugin/neko_sidecar/) with the executables, in N.E.K.O's
package format, as upstream's `neko-plugin build` lays it out
(Project-N-E-K-O/N.E.K.O plugin/neko_plugin_cli/docs/package-format.md
@2c7d9db4; core/build.py @0edf0ddc; payload hash as
core/archive_utils.py compute_archive_payload_hash @53e030d2):

    manifest.toml            schema_version, package_type = "plugin", id, package_name, version, package_description
    metadata.toml            [payload] hash_algorithm = "sha256", hash; [source]
    payload/plugins/neko_sidecar/
        plugin.toml, __init__.py, static/index.html
        examples/convert_units.py, examples/convert_units.schema.json
        bin/linux-x86_64/neko-sidecar        (static musl)
        bin/windows-x86_64/neko-sidecar.exe

The archive is reproducible: entries sorted, every time SOURCE_DATE_EPOCH
(default: the last commit's), no other metadata.

    build-package.py --version V --out FILE --linux BIN [--windows EXE]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
import unicodedata
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "packaging" / "neko-plugin" / "neko_sidecar"
PLUGIN_ID = "neko_sidecar"


def toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def payload_files(version: str, linux: Path, windows: Path | None) -> dict[str, tuple[bytes, int]]:
    """payload/... name -> (bytes, unix mode)."""
    base = f"payload/plugins/{PLUGIN_ID}"
    files: dict[str, tuple[bytes, int]] = {}
    for path in sorted(PLUGIN.rglob("*")):
        rel = path.relative_to(PLUGIN).as_posix()
        if path.is_dir() or "__pycache__" in rel or rel.endswith((".pyc", ".pyo")):
            continue
        data = path.read_bytes()
        if rel == "plugin.toml":
            data = data.replace(b'version = "VERSION"', f"version = {toml_str(version)}".encode())
        files[f"{base}/{rel}"] = (data, 0o644)
    files[f"{base}/examples/convert_units.py"] = (
        (ROOT / "examples" / "handlers" / "convert_units.py").read_bytes(),
        0o644,
    )
    files[f"{base}/examples/convert_units.schema.json"] = (
        (ROOT / "examples" / "tools" / "schemas" / "convert_units.schema.json").read_bytes(),
        0o644,
    )
    # The editors' JSON Schemas, which the files the plugin writes name on
    # their first lines (`#:schema`, read by taplo and VS Code).
    for schema in sorted((ROOT / "schemas").glob("*.schema.json")):
        files[f"{base}/schemas/{schema.name}"] = (schema.read_bytes(), 0o644)
    files[f"{base}/bin/linux-x86_64/neko-sidecar"] = (linux.read_bytes(), 0o755)
    if windows is not None:
        files[f"{base}/bin/windows-x86_64/neko-sidecar.exe"] = (windows.read_bytes(), 0o755)
    return files


def payload_hash(files: dict[str, tuple[bytes, int]]) -> str:
    """SHA-256 over the payload entries in NFC-normalized path order: each
    path without "payload/", NUL, its bytes, NUL (upstream's
    compute_archive_payload_hash)."""
    digest = hashlib.sha256()
    entries = sorted(
        (unicodedata.normalize("NFC", name[len("payload/") :]), name) for name in files
    )
    for canonical, name in entries:
        digest.update(canonical.encode("utf-8"))
        digest.update(b"\0")
        digest.update(files[name][0])
        digest.update(b"\0")
    return digest.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--linux", required=True, type=Path, help="the Linux x86_64 executable (static musl)")
    ap.add_argument("--windows", type=Path, help="the Windows x86_64 executable")
    args = ap.parse_args()

    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        try:
            epoch = subprocess.run(
                ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            epoch = str(int(time.time()))
    # A zip time starts in 1980.
    stamp = time.gmtime(max(int(epoch), 315532800))[:6]

    files = payload_files(args.version, args.linux, args.windows)
    description = (
        "neko-sidecar beside N.E.K.O: tools from manifests and MCP servers "
        "(those of N.E.K.O's MCP adapter too) for the chat model."
    )
    manifest = "\n".join([
        'schema_version = "1.0"',
        'package_type = "plugin"',
        "",
        f"id = {toml_str(PLUGIN_ID)}",
        'package_name = "neko-sidecar"',
        f"version = {toml_str(args.version)}",
        f"package_description = {toml_str(description)}",
        "",
    ])
    metadata = "\n".join([
        "[payload]",
        'hash_algorithm = "sha256"',
        f'hash = "{payload_hash(files)}"',
        "",
        "[source]",
        'kind = "local"',
        f"paths = [{toml_str(PLUGIN_ID)}]",
        "",
    ])
    entries = {"manifest.toml": (manifest.encode(), 0o644), "metadata.toml": (metadata.encode(), 0o644), **files}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name in sorted(entries):
            data, mode = entries[name]
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, so that the mode below is read
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    tmp.replace(args.out)
    print(f"built {args.out} ({args.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
