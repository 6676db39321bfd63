#!/usr/bin/env python3
"""neko-sidecar-VERSION.neko-plugin against N.E.K.O's package format and
what its installer and host check (upstream Project-N-E-K-O/N.E.K.O:
plugin/neko_plugin_cli/docs/package-format.md @2c7d9db4;
core/archive_utils.py and core/install.py @53e030d2; the host's entry and
SDK-range rules, plugin/core/host.py and plugin/core/registry.py @685f1382).

    package.py PACKAGE.neko-plugin [--release]

--release also wants the Windows executable, a static Linux one, and the
package listed in SHA256SUMS beside it (what packaging/release.sh makes).
Every check says what it found; the first failure ends the run.
"""

from __future__ import annotations

import ast
import hashlib
import re
import struct
import sys
import tomllib
import unicodedata
import zipfile
from pathlib import Path, PurePosixPath

PLUGIN_ID = "neko_sidecar"
HOST_SDK_VERSION = (0, 1, 0)  # plugin/_types/version.py @685f1382
SAFE_ID = re.compile(r"^[A-Za-z0-9._-]+$")  # install.py _SAFE_PACKAGE_ID_RE


def check(cond: bool, what: str) -> None:
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


def safe_entry(name: str) -> bool:
    """The gist of upstream's validate_archive_entry_name: relative, posix,
    no traversal, no control characters."""
    p = PurePosixPath(name)
    return (
        not name.startswith("/")
        and "\\" not in name
        and ":" not in name
        and ".." not in p.parts
        and not any(ord(c) < 32 for c in name)
    )


def payload_hash(z: zipfile.ZipFile) -> str:
    """Upstream's compute_archive_payload_hash, written again here."""
    digest = hashlib.sha256()
    entries = []
    for name in z.namelist():
        parts = PurePosixPath(name).parts
        if len(parts) < 2 or parts[0] != "payload" or name.endswith("/"):
            continue
        entries.append((unicodedata.normalize("NFC", PurePosixPath(*parts[1:]).as_posix()), name))
    for canonical, name in sorted(entries):
        digest.update(canonical.encode("utf-8"))
        digest.update(b"\0")
        digest.update(z.read(name))
        digest.update(b"\0")
    return digest.hexdigest()


def in_range(spec: str, version: tuple[int, ...]) -> bool:
    """A PEP 440-style range of >=, >, <=, <, == clauses (what upstream's
    [plugin.sdk] values are)."""
    for clause in spec.split(","):
        m = re.fullmatch(r"\s*(>=|<=|==|>|<)\s*(\d+(?:\.\d+)*)\s*", clause)
        if not m:
            raise SystemExit(f"FAIL: [plugin.sdk] clause {clause!r} is not a version comparison")
        op, v = m.group(1), tuple(int(x) for x in m.group(2).split("."))
        v = v + (0,) * (3 - len(v))
        ok = {">=": version >= v, "<=": version <= v, "==": version == v, ">": version > v, "<": version < v}[op]
        if not ok:
            return False
    return True


def elf_is_static(data: bytes) -> bool:
    """No PT_INTERP program header: no dynamic loader, no libc to match."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return False
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))


def main() -> int:
    package = Path(sys.argv[1])
    release = "--release" in sys.argv[2:]
    check(package.name.endswith(".neko-plugin"), f"{package.name}: the extension of a single-plugin package")
    check(zipfile.is_zipfile(package), "a standard ZIP archive")
    with zipfile.ZipFile(package) as z:
        names = z.namelist()
        check(len(names) == len(set(names)), "no duplicate entries")
        bad = [n for n in names if not safe_entry(n)]
        check(not bad, f"entry names are safe relative paths ({bad or 'all'})")
        check(z.testzip() is None, "every entry's CRC is right")

        manifest = tomllib.loads(z.read("manifest.toml").decode("utf-8"))
        check(manifest.get("schema_version") == "1.0", "manifest.toml: schema_version = \"1.0\"")
        check(manifest.get("package_type") == "plugin", "manifest.toml: package_type = \"plugin\"")
        check(isinstance(manifest.get("id"), str) and SAFE_ID.fullmatch(manifest["id"]) is not None, f"manifest.toml: a safe id ({manifest.get('id')!r})")
        for key in ("package_name", "version", "package_description"):
            check(isinstance(manifest.get(key), str) and manifest[key].strip() != "", f"manifest.toml: {key}")

        folders = {PurePosixPath(n).parts[2] for n in names if PurePosixPath(n).parts[:2] == ("payload", "plugins") and len(PurePosixPath(n).parts) >= 4}
        check(folders == {PLUGIN_ID}, f"payload/plugins/ holds exactly one plugin folder ({sorted(folders)})")
        base = f"payload/plugins/{PLUGIN_ID}"
        check(f"{base}/plugin.toml" in names, "the plugin folder has its plugin.toml")
        check(f"{base}/requirements.txt" not in names, "no requirements.txt (refused by the installer)")
        junk = [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo")) or "/.git/" in n]
        check(not junk, f"no caches or VCS files ({junk or 'none'})")
        outside = [n for n in names if n not in ("manifest.toml", "metadata.toml", "sign.toml") and not n.startswith("payload/")]
        check(not outside, f"nothing outside manifest/metadata/payload ({outside or 'none'})")

        metadata = tomllib.loads(z.read("metadata.toml").decode("utf-8"))
        payload = metadata.get("payload", {})
        check(payload.get("hash_algorithm") == "sha256", "metadata.toml: [payload] hash_algorithm = \"sha256\"")
        computed = payload_hash(z)
        check(payload.get("hash") == computed, f"metadata.toml: the payload hash matches the payload ({computed})")

        plugin = tomllib.loads(z.read(f"{base}/plugin.toml").decode("utf-8"))
        p = plugin.get("plugin", {})
        check(p.get("id") == PLUGIN_ID, "plugin.toml: id is the folder's name")
        check(p.get("version") == manifest["version"], f"plugin.toml: version {p.get('version')!r} is the package's")
        entry = p.get("entry", "")
        module, _, cls = entry.partition(":")
        check(module == f"plugins.{PLUGIN_ID}" and cls != "", f"plugin.toml: entry {entry!r} names plugins.<id>:<Class>")
        sdk = p.get("sdk", {})
        check(isinstance(sdk.get("supported"), str) and in_range(sdk["supported"], HOST_SDK_VERSION), f"[plugin.sdk] supported {sdk.get('supported')!r} holds the host's SDK 0.1.0")
        check(not sdk.get("conflicts"), "no [plugin.sdk] conflicts")
        runtime = plugin.get("plugin_runtime", {})
        check(runtime.get("enabled") is True and runtime.get("auto_start") is True, "[plugin_runtime] enabled and auto_start")

        source = z.read(f"{base}/__init__.py").decode("utf-8")
        tree = ast.parse(source)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        check(cls in classes, f"__init__.py defines the entry class {cls}")
        klass = classes[cls]
        check(any(isinstance(b, ast.Name) and b.id == "NekoPluginBase" for b in klass.bases), f"{cls} subclasses NekoPluginBase")
        check(any(isinstance(d, ast.Name) and d.id == "neko_plugin" for d in klass.decorator_list), f"{cls} is decorated with @neko_plugin")
        hooks = {}
        for item in klass.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in item.decorator_list:
                    if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "lifecycle":
                        for kw in d.keywords:
                            if kw.arg == "id" and isinstance(kw.value, ast.Constant):
                                hooks[kw.value.value] = item
        check({"startup", "shutdown"} <= set(hooks), f"@lifecycle hooks startup and shutdown ({sorted(hooks)})")
        check(isinstance(hooks["startup"], ast.AsyncFunctionDef), "startup is async (the host awaits it)")
        for hook in ("startup", "shutdown"):
            a = hooks[hook].args
            check(len(a.args) == 1 and not a.kwonlyargs and a.vararg is None, f"{hook} takes no arguments but self (the host passes none)")
        check(f"{base}/static/index.html" in names, "the static page register_static_ui serves")
        for kind in ("manifest", "agent"):
            check(f"{base}/schemas/{kind}.schema.json" in names, f"the editors' schema schemas/{kind}.schema.json, which the files the plugin writes name")
        linux = f"{base}/bin/linux-x86_64/neko-sidecar"
        windows = f"{base}/bin/windows-x86_64/neko-sidecar.exe"
        check(linux in names and z.read(linux)[:4] == b"\x7fELF", "the Linux x86_64 executable")
        if release:
            check(elf_is_static(z.read(linux)), "the Linux executable is static (no dynamic loader)")
            check(windows in names and z.read(windows)[:2] == b"MZ", "the Windows x86_64 executable")
    if release:
        sums = package.parent / "SHA256SUMS"
        digest = hashlib.sha256(package.read_bytes()).hexdigest()
        check(sums.is_file() and f"{digest}  {package.name}" in sums.read_text().splitlines(), "SHA256SUMS lists the package with its hash")
    print(f"{package.name}: the layout of package-format.md, {package.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
