#!/usr/bin/env python3
"""The neko_sidecar plugin driven through its lifecycle as N.E.K.O's host
drives it, against the stand-in main_server (`neko-sidecar dev-server`).

    lifecycle.py PACKAGE.neko-plugin STAND_IN_BIN [--wine]

What N.E.K.O does, and what this does in its place (upstream
Project-N-E-K-O/N.E.K.O; sdk_double/ says where the SDK's part is read):
- install: the package's payload/plugins/<id>/ written file by file with a
  plain open("wb"), so the executable loses its exec bit
  (plugin/neko_plugin_cli/core/install.py extract_member @53e030d2); here
  the same, into <root>/.neko-plugin-installations/plugins/neko_sidecar/.
- the plugin's process: multiprocessing.Process(daemon=False)
  (plugin/core/host.py @685f1382); entry "plugins.neko_sidecar:..."
  imported and the class called with the context (host.py:619); the hooks
  found by their @lifecycle metadata; startup called with no arguments and
  awaited within 10 s (host.py:863-867, plugin/settings.py:210); shutdown
  after the command loop, sync or async, within the 1.5 s stop budget
  (host.py:1452-1457, 1712-1746).
- the environment: inherited, with NEKO_MAIN_SERVER_PORT as N.E.K.O's
  launcher exports it (launcher_core/runtime.py:1935-1937).

Three runs on one installation (the first start writes the defaults, the
later ones keep them):
1. startup, then stop: tools registered (the seeded example, and the
   servers of an mcp_adapter config imported), then one clear: none left,
   no sidecar process left, within the budget.
2. startup, then the plugin's process SIGKILLed (no hook runs): the
   sidecar notices by itself, clears and exits.
3. mcp_adapter's inject_mcp turned on: the import manifest is removed, so
   those servers' tools are not registered by us as well.

With --wine, the installed Linux executable is replaced by a wrapper that
runs the package's Windows .exe under Wine (`. .ci/windows-env` first):
the plugin's Python stays on Linux, so its Windows-only lines
(CREATE_NO_WINDOW, taskkill) are not run; what is shown is the .exe
following the pipe (closed, or its holder killed) and clearing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN_ID = "neko_sidecar"
SOURCE = "plugin:neko_sidecar"
STOP_BUDGET = 1.5  # plugin/settings.py:224, lifecycle_service.py:1079


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install(package: Path, root: Path) -> Path:
    """As upstream's installer: every payload/plugins entry written with a
    plain open("wb") (no mode kept)."""
    target = root / ".neko-plugin-installations" / "plugins"
    with zipfile.ZipFile(package) as z:
        for name in z.namelist():
            parts = Path(name).parts
            if len(parts) < 4 or parts[:2] != ("payload", "plugins") or name.endswith("/"):
                continue
            out = target.joinpath(*parts[2:])
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(name) as src, out.open("wb") as dst:
                dst.write(src.read())
    plugin = target / PLUGIN_ID
    exe = plugin / "bin" / "linux-x86_64" / "neko-sidecar"
    assert not os.access(exe, os.X_OK), "the installer keeps no exec bit; the plugin must set it"
    return plugin


class Logger:
    """loguru-like, as ctx.logger is: messages collected for the checks."""

    def __init__(self, path: Path):
        self.path = path

    def _log(self, level: str, msg: str, *args) -> None:
        text = msg.format(*args) if args else msg
        with self.path.open("a", encoding="utf-8") as f:
            f.write(f"{level} {text}\n")

    def info(self, msg, *args):
        self._log("INFO", msg, *args)

    def warning(self, msg, *args):
        self._log("WARNING", msg, *args)

    def error(self, msg, *args):
        self._log("ERROR", msg, *args)

    def debug(self, msg, *args):
        self._log("DEBUG", msg, *args)

    def exception(self, msg, *args):
        self._log("ERROR", msg, *args)


class Ctx:
    def __init__(self, root: Path, log: Path):
        self.plugin_id = PLUGIN_ID
        self.plugin_dir = root / ".neko-plugin-installations" / "plugins" / PLUGIN_ID
        self.state_dir = root / "plugins" / PLUGIN_ID
        self.logger = Logger(log)
        self.metadata = {}


def hooks_of(cls) -> dict[str, str]:
    """Hook id -> method name, from the decorators' metadata."""
    from plugin.sdk.plugin import EVENT_META_ATTR

    found = {}
    for attr, value in inspect.getmembers_static(cls):
        meta = getattr(value, EVENT_META_ATTR, None)
        if meta is not None and meta.event_type == "lifecycle":
            found[meta.id] = attr
    return found


def plugin_process(root: str, log: str, commands, events) -> None:
    """The plugin's process, as the host runs it: import the entry, make
    the instance, startup; wait for STOP; shutdown."""
    root_p = Path(root)
    sys.path.insert(0, str(HERE / "sdk_double"))
    sys.path.insert(0, str(root_p / ".neko-plugin-installations"))
    import importlib
    import tomllib

    manifest = tomllib.loads((root_p / ".neko-plugin-installations" / "plugins" / PLUGIN_ID / "plugin.toml").read_text())
    module_name, _, class_name = manifest["plugin"]["entry"].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    from plugin.sdk.plugin import NEKO_PLUGIN_TAG

    assert getattr(cls, NEKO_PLUGIN_TAG, None) is True, "the entry class is not @neko_plugin"
    hooks = hooks_of(cls)
    assert {"startup", "shutdown"} <= set(hooks), hooks
    instance = cls(Ctx(root_p, Path(log)))

    async def call(name: str, timeout: float) -> None:
        result = getattr(instance, hooks[name])()
        if inspect.isawaitable(result):
            await asyncio.wait_for(result, timeout)

    try:
        asyncio.run(call("startup", 10.0))
    except BaseException as e:  # the host logs it as a startup error
        events.put(("startup_failed", repr(e)))
        return
    events.put(("started", instance._proc.pid if instance._proc else None))
    commands.get()  # STOP
    began = time.monotonic()
    asyncio.run(call("shutdown", STOP_BUDGET))
    events.put(("stopped", time.monotonic() - began))


def tools_of_source(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tools", timeout=5) as r:
        body = json.load(r)
    return {
        t["name"]
        for tools in body["tools_by_role"].values()
        for t in tools
        if t.get("source") == SOURCE
    }


def wait_for(what: str, cond, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone too
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def sidecars_under(root: Path) -> list[int]:
    """Processes running an executable installed under `root` (the Linux
    binary, the wrapper, or Wine running the .exe)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "neko-sidecar" in cmdline and " run " in cmdline and (str(root) in cmdline or str(root).replace("/", "\\") in cmdline):
            found.append(int(proc.name))
    return found


def main() -> int:
    package, stand_in = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    wine = "--wine" in sys.argv[3:]
    within = 90.0 if wine else 20.0
    root = Path(tempfile.mkdtemp(prefix="neko-plugin-test-"))
    plugin = install(package, root)
    if wine:
        exe = plugin / "bin" / "windows-x86_64" / "neko-sidecar.exe"
        assert exe.is_file(), "the package holds the Windows executable"
        wrapper = plugin / "bin" / "linux-x86_64" / "neko-sidecar"
        wrapper.write_text(f'#!/bin/sh\nexec wine "{exe}" "$@"\n')

    # An mcp_adapter runtime config beside ours, with one stdio server: the
    # stand-in MCP server of the sidecar's own binary (Linux, or the .exe).
    mcp_cmd = str(stand_in)
    if wine:  # a Windows path, as a Windows user's adapter config has
        mcp_cmd = subprocess.run(["winepath", "-w", str(plugin / "bin" / "windows-x86_64" / "neko-sidecar.exe")], capture_output=True, text=True, check=True).stdout.strip()
    adapter = root / "plugins" / "mcp_adapter" / "config" / "plugin.toml"
    adapter.parent.mkdir(parents=True)

    def write_adapter(inject: bool) -> None:
        adapter.write_text(
            '[plugin]\nid = "mcp_adapter"\n\n'
            f"[mcp_servers.demo]\ntransport = \"stdio\"\ncommand = {json.dumps(mcp_cmd)}\nargs = [\"dev-mcp\"]\n\n"
            f"[mcp_adapter]\ntool_timeout = 60\ninject_mcp = {'true' if inject else 'false'}\n"
        )

    write_adapter(False)

    port = free_port()
    server = subprocess.Popen([str(stand_in), "dev-server", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ["NEKO_MAIN_SERVER_PORT"] = str(port)
    os.environ.pop("RUST_LOG", None)
    log = root / "plugin.log"
    ctx = multiprocessing.get_context("fork")
    failures = []
    try:
        wait_for("the stand-in", lambda: _answers(port), 10)

        def start():
            commands, events = ctx.Queue(), ctx.Queue()
            proc = ctx.Process(target=plugin_process, args=(str(root), str(log), commands, events), daemon=False)
            proc.start()
            kind, value = events.get(timeout=30)
            assert kind == "started", f"startup failed: {value}\n{log.read_text() if log.exists() else ''}"
            return proc, commands, events, value

        # 1. startup, then stop.
        proc, commands, events, pid = start()
        agent = root / "plugins" / PLUGIN_ID / "config" / "agent.toml"
        text = agent.read_text()
        assert f'source = "{SOURCE}"' in text and "[main_server]\nurl" not in text, text
        assert 'manifest_dirs = ["../data/tools"]' in text, text
        # Each file the plugin wrote names the plugin's copy of its editors'
        # schema (`#:schema`, taplo's form), the executable's own.
        tools = root / "plugins" / PLUGIN_ID / "data" / "tools"
        for written, kind in ((agent, "agent"), (tools / "convert_units.toml", "manifest"), (tools / "neko_mcp_adapter.toml", "manifest")):
            lines = [l for l in written.read_text().splitlines()[:2] if l.startswith("#:schema ")]
            assert lines, f"{written} names no schema in its first two lines"
            named = Path(urllib.request.url2pathname(urllib.parse.urlparse(lines[0].split(" ", 1)[1]).path))
            own = subprocess.run([str(stand_in), "schema", "config" if kind == "agent" else "manifest"], capture_output=True, check=True).stdout
            assert named.is_file() and named.read_bytes() == own, f"{written}: {named} is not `neko-sidecar schema`'s {kind} schema"
        assert os.access(plugin / "bin" / "linux-x86_64" / "neko-sidecar", os.X_OK), "exec bit set by the plugin"
        wait_for("convert_units and the adapter's tools", lambda: {"convert_units", "demo_echo"} <= tools_of_source(port), within)
        assert sidecars_under(root), "the sidecar runs (and is seen by the process check)"
        commands.put("STOP")
        kind, took = events.get(timeout=10)
        proc.join(10)
        assert kind == "stopped" and took < STOP_BUDGET, (kind, took)
        assert tools_of_source(port) == set(), tools_of_source(port)
        assert not alive(pid) and sidecars_under(root) == [], sidecars_under(root)
        print(f"ok 1: startup registered, shutdown cleared in {took:.2f} s, no process left")

        # The user's edits survive a restart: agent.toml is not rewritten.
        agent.write_text(text + "\n# edited by the user\n")

        # 2. the plugin's process killed outright.
        proc, commands, events, pid = start()
        wait_for("the tools again", lambda: "convert_units" in tools_of_source(port), within)
        assert agent.read_text().endswith("# edited by the user\n"), "agent.toml kept"
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(5)
        wait_for("the sidecar to clear by itself", lambda: tools_of_source(port) == set(), within)
        wait_for("the sidecar to exit", lambda: not alive(pid) and sidecars_under(root) == [], within)
        print("ok 2: the plugin's process killed: the sidecar cleared and exited by itself")

        # 3. inject_mcp on: the adapter's servers are not imported by us.
        write_adapter(True)
        proc, commands, events, pid = start()
        wait_for("convert_units", lambda: "convert_units" in tools_of_source(port), within)
        time.sleep(1.5)
        names = tools_of_source(port)
        assert not any(n.startswith("demo_") for n in names), names
        assert not (root / "plugins" / PLUGIN_ID / "data" / "tools" / "neko_mcp_adapter.toml").exists()
        assert "inject_mcp" in log.read_text()
        commands.put("STOP")
        events.get(timeout=10)
        proc.join(10)
        assert tools_of_source(port) == set() and sidecars_under(root) == []
        print("ok 3: with inject_mcp on, the adapter's servers are left to mcp_adapter")
    except BaseException as e:
        failures.append(e)
        print(f"FAIL: {e!r}\n--- plugin log ---\n{log.read_text() if log.exists() else ''}", file=sys.stderr)
    finally:
        for pid in sidecars_under(root):
            os.kill(pid, signal.SIGKILL)
        server.kill()
        server.wait()
    if failures:
        print(f"(left for a look: {root})", file=sys.stderr)
        return 1
    shutil.rmtree(root, ignore_errors=True)
    print(f"lifecycle ({'Windows .exe under Wine' if wine else 'Linux'}): 3 runs ok")
    return 0


def _answers(port: int) -> bool:
    try:
        tools_of_source(port)
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
