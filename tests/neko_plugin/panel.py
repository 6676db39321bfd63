#!/usr/bin/env python3
"""The plugin's Hosted UI Python (the ``dashboard`` context and each
``@ui.action`` entry) driven as the Plugin Manager drives it, through the
SDK double (sdk_double/), against a running sidecar and the stand-in
main_server. No package build: the plugin's source folder is installed as
the host would, with the given executable as its bundled one.

    panel.py SIDECAR_BIN

What holds (each an assertion):
1. the host finds what plugin.toml names: the context ``dashboard`` and the
   five actions, their labels tr(...) references of the catalogue;
2. the context's state is the sidecar's own: its ``status`` is /status
   (tools with state, role, handler, file and line, calls; MCP servers with
   phase, transport, tools), its ``calls`` the call history; and the token
   the plugin handed the sidecar opens the gated routes (no handler sees it);
3. try-a-tool answers as ``neko-sidecar call`` does (the model's text, the
   failure flag, the pictures), and the call shows in the history;
4. restart one MCP server: a new process, the restart counted;
5. the tools folder and the inspector's address;
6. a remote MCP server that needs an OAuth sign-in (a stand-in here that
   answers 401 and publishes its metadata): the state shows "needs
   sign-in" with the sidecar's link, and ``sign_in`` opens that link, which
   sends the browser on to the authorization server with PKCE (S256);
   a server that needs none, and one that does not exist, are refused;
7. the sidecar killed (a crash): the panel says it is not running, with
   its exit status and its last stderr lines; a start that fails (a bad
   agent.toml): likewise, with the config's error.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import threading
import tomllib
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PLUGIN_SRC = REPO / "packaging" / "neko-plugin" / "neko_sidecar"
PLUGIN_ID = "neko_sidecar"

# A tool with a schema, answering what it got; one that answers a picture;
# one that fails; one that shows whether it can see the admin token.
TOOLS = r'''
[[tool]]
name = "greet"
description = "Greets someone."
timeout_seconds = 5
handler = { type = "exec", command = ["PYTHON", "handlers/greet.py"] }
[tool.parameters]
type = "object"
required = ["name"]
properties = { name = { type = "string" }, times = { type = "integer" } }

[[tool]]
name = "photo"
description = "A small picture."
timeout_seconds = 5
handler = { type = "exec", command = ["PYTHON", "handlers/photo.py"] }

[[tool]]
name = "broken"
description = "Always fails."
timeout_seconds = 5
handler = { type = "exec", command = ["PYTHON", "handlers/broken.py"] }

[[tool]]
name = "env_probe"
description = "Says whether it sees the admin token."
timeout_seconds = 5
handler = { type = "exec", command = ["PYTHON", "handlers/env_probe.py"] }

[[mcp_server]]
name = "dev"
command = ["SIDECAR", "dev-mcp"]
include = ["echo"]
'''

HANDLERS = {
    "greet.py": 'import json, sys\ncall = json.load(sys.stdin)\nprint(json.dumps({"output": "hello " + call["arguments"]["name"], "is_error": False}))\n',
    # A 2x2 PNG, made here so the test needs no image library.
    "photo.py": (
        "import base64, json, struct, sys, zlib\n"
        "sys.stdin.read()\n"
        "def chunk(kind, data):\n"
        "    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)\n"
        "raw = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * 2 for _ in range(2))\n"
        "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 2, 2, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n"
        "print(json.dumps({'output': 'a red square', 'is_error': False, 'images': [{'data_b64': base64.b64encode(png).decode(), 'mime': 'image/png'}]}))\n"
    ),
    "broken.py": 'import json, sys\nsys.stdin.read()\nprint(json.dumps({"output": {"error": "the disk is full"}, "is_error": True, "error": "the disk is full"}))\n',
    "env_probe.py": 'import json, os, sys\nsys.stdin.read()\nprint(json.dumps({"output": "token seen" if os.environ.get("NEKO_SIDECAR_ADMIN_TOKEN") else "no token", "is_error": False}))\n',
}


class NeedsSignIn(BaseHTTPRequestHandler):
    """A remote MCP server that needs an OAuth sign-in, and its
    authorization server, as far as the sidecar looks before a sign-in: every
    POST to /mcp answers 401 with its challenge; the protected resource
    metadata (RFC 9728) and the authorization server's (RFC 8414)."""

    def _json(self, code: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        challenge = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
        self._json(401, {"error": "invalid_token"}, {"www-authenticate": challenge})

    def do_GET(self):
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        if self.path == "/.well-known/oauth-protected-resource/mcp":
            self._json(200, {"resource": f"{base}/mcp", "authorization_servers": [base]})
        elif self.path == "/.well-known/oauth-authorization-server":
            self._json(
                200,
                {
                    "issuer": base,
                    "authorization_endpoint": f"{base}/authorize",
                    "token_endpoint": f"{base}/token",
                    "response_types_supported": ["code"],
                    "code_challenge_methods_supported": ["S256"],
                },
            )
        else:
            self._json(404, {"error": "not_found"})

    def log_message(self, *_):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Logger:
    def __init__(self):
        self.lines: list[str] = []

    def _log(self, level, msg, *args):
        self.lines.append(f"{level} {msg.format(*args) if args else msg}")

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
    def __init__(self, root: Path):
        self.plugin_id = PLUGIN_ID
        self.plugin_dir = root / ".neko-plugin-installations" / "plugins" / PLUGIN_ID
        self.state_dir = root / "plugins" / PLUGIN_ID
        self.logger = Logger()
        self.metadata = {}


def install(root: Path, sidecar: Path) -> Path:
    """The plugin's source folder as the installer lays it out, the given
    executable as the bundled Linux one (without its exec bit, as the
    installer writes it)."""
    target = root / ".neko-plugin-installations" / "plugins" / PLUGIN_ID
    shutil.copytree(PLUGIN_SRC, target, ignore=shutil.ignore_patterns("__pycache__"))
    exe = target / "bin" / "linux-x86_64" / "neko-sidecar"
    exe.parent.mkdir(parents=True)
    exe.write_bytes(sidecar.read_bytes())
    return target


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def wait_for(what: str, cond, within: float = 20.0):
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except OSError as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


def stable(status: dict) -> dict:
    """What /status says that does not move between two reads a moment
    apart."""
    return {
        "version": status["version"],
        "source": status["source"],
        "tools": sorted((t["name"], t["state"], t.get("role"), t.get("target"), t.get("declared_at"), t["calls"]) for t in status["tools"]),
        "mcp_servers": sorted((m["name"], m["phase"], m["transport"], tuple(m["tools"]), m["restarts"]) for m in status.get("mcp_servers", [])),
    }


def cli_call(sidecar: Path, admin: str, tool: str, args: dict) -> dict:
    out = subprocess.run([str(sidecar), "call", tool, "--args", json.dumps(args), "--admin", admin], capture_output=True, text=True, timeout=30)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def main() -> int:
    sidecar = Path(sys.argv[1]).resolve()
    root = Path(tempfile.mkdtemp(prefix="neko-panel-test-"))
    plugin_dir = install(root, sidecar)
    port, admin_port = free_port(), free_port()
    admin = f"127.0.0.1:{admin_port}"
    server = subprocess.Popen([str(sidecar), "dev-server", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ["NEKO_MAIN_SERVER_PORT"] = str(port)
    os.environ.pop("RUST_LOG", None)
    # `open_inspector` opens the user's browser; here a command that
    # does nothing stands in for it.
    os.environ["BROWSER"] = "true"

    # The plugin's state as a first start leaves it, with our tools and an
    # admin port of this test's own.
    state = root / "plugins" / PLUGIN_ID
    tools = state / "data" / "tools"
    (tools / "handlers").mkdir(parents=True)
    (tools / "t.toml").write_text(TOOLS.replace("PYTHON", sys.executable).replace("SIDECAR", str(sidecar)))
    for name, text in HANDLERS.items():
        (tools / "handlers" / name).write_text(text)
    agent = state / "config" / "agent.toml"
    agent.parent.mkdir(parents=True)
    agent.write_text(
        f'source = "plugin:{PLUGIN_ID}"\nmanifest_dirs = ["../data/tools"]\n\n'
        '[shutdown]\ndeadline = "800ms"\n\n'
        f'[admin]\nlisten = "{admin}"\ncall_history = 50\n'
    )

    sys.path.insert(0, str(HERE / "sdk_double"))
    sys.path.insert(0, str(root / ".neko-plugin-installations"))
    import importlib

    from plugin.sdk.plugin import EVENT_META_ATTR, UI_ACTION_META_ATTR, UI_CONTEXT_META_ATTR

    manifest = tomllib.loads((plugin_dir / "plugin.toml").read_text())
    module_name, _, class_name = manifest["plugin"]["entry"].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    ctx = Ctx(root)
    plugin = cls(ctx)
    en = json.loads((plugin_dir / "i18n" / "en.json").read_text())
    failures = 0
    try:
        # 1. What the host finds.
        contexts = {getattr(m, UI_CONTEXT_META_ATTR)["id"]: name for name, m in inspect.getmembers(cls) if hasattr(m, UI_CONTEXT_META_ATTR)}
        panel_surface = manifest["plugin"]["ui"]["panel"][0]
        assert manifest["plugin"]["ui"]["enabled"] is True
        assert panel_surface["entry"] == "ui/panel.tsx" and (plugin_dir / panel_surface["entry"]).is_file()
        assert panel_surface["context"] in contexts, (panel_surface, contexts)
        assert (plugin_dir / manifest["plugin"]["ui"]["guide"][0]["entry"]).is_file()
        actions = {}
        for name, member in inspect.getmembers(cls):
            meta = getattr(member, UI_ACTION_META_ATTR, None)
            if meta is not None:
                entry = getattr(member, EVENT_META_ATTR)
                assert entry.event_type == "plugin_entry", entry.event_type
                assert meta["label"]["$i18n"] in en, meta["label"]
                actions[entry.id] = name
        assert set(actions) == {"try_tool", "restart_server", "sign_in", "tools_folder", "open_inspector"}, actions
        print("ok 1: the host finds the dashboard context and five actions, labels from the catalogue")

        async def run(coro):
            return await asyncio.wait_for(coro, 60)

        def act(entry: str, **args):
            result = asyncio.run(run(getattr(plugin, actions[entry])(**args)))
            return result.value

        def dashboard():
            return asyncio.run(run(getattr(plugin, contexts["dashboard"])()))

        asyncio.run(run(plugin.startup()))
        base = f"http://{admin}"
        wait_for("every tool registered and dev ready", lambda: get_json(base + "/status")["ready"] and any(m["phase"] == "ready" for m in get_json(base + "/status")["mcp_servers"]))

        # 2. The state is the sidecar's own.
        before = stable(get_json(base + "/status"))
        s = dashboard()
        after = stable(get_json(base + "/status"))
        assert s["running"] is True and s["error"] is None, s["error"]
        assert before == after == stable(s["status"]), (before, stable(s["status"]))
        names = {t["name"]: t for t in s["status"]["tools"]}
        assert set(names) == {"greet", "photo", "broken", "env_probe", "dev_echo"}, names
        assert names["greet"]["declared_at"].endswith("t.toml:2:1"), names["greet"]
        assert names["dev_echo"]["target"].startswith("mcp dev "), names["dev_echo"]
        assert s["schemas"]["greet"]["required"] == ["name"], s["schemas"]
        assert (s["calls"]["capacity"], s["calls"]["recorded"], s["calls"]["calls"]) == (50, 0, []), s["calls"]
        assert s["inspector_url"] == base + "/"
        # The gated routes open with the plugin's token, and with no other.
        req = urllib.request.Request(base + "/ui/calls", data=b"{}", method="POST", headers={"origin": base, "x-neko-token": "0" * 32})
        try:
            urllib.request.urlopen(req, timeout=5)
            raise AssertionError("a wrong token opened /ui/calls")
        except urllib.error.HTTPError as e:
            assert e.code == 403, e.code
        print("ok 2: the state is /status and the call history, read with the plugin's token")

        # 3. Try a tool: what `neko-sidecar call` shows.
        for tool, args in [("greet", {"name": "Ada"}), ("broken", {}), ("photo", {}), ("env_probe", {})]:
            panel_answer = act("try_tool", tool=tool, arguments=args)
            cli = cli_call(sidecar, admin, tool, args)
            assert panel_answer["ok"] and panel_answer["called"], panel_answer
            assert panel_answer["model_text"] == cli["model_text"], (panel_answer, cli)
            assert panel_answer["is_error"] == cli["is_error"], (panel_answer, cli)
            assert len(panel_answer["pictures"]) == len(cli["images"]), (panel_answer, cli)
        assert act("try_tool", tool="greet", arguments={"name": "Ada"})["model_text"] == "hello Ada"
        shot = act("try_tool", tool="photo", arguments={})["pictures"][0]
        assert shot["mime"] == "image/png" and shot["src"].startswith("data:image/png;base64,iVBORw0KGgo"), shot
        assert act("try_tool", tool="env_probe", arguments={})["model_text"] == "no token"
        # The model's own JSON text, and arguments that fail the schema.
        assert act("try_tool", tool="greet", arguments='{"name": "Bo"}')["model_text"] == "hello Bo"
        bad = act("try_tool", tool="greet", arguments={})
        assert bad["ok"] and bad["called"] is False and "name" in bad["model_text"], bad
        missing = act("try_tool", tool="nope", arguments={})
        assert not missing["ok"] and "no tool named `nope`" in missing["error"]["detail"], missing
        s = dashboard()
        history = s["calls"]["calls"]
        assert [c["tool"] for c in history[:2]] == ["greet", "env_probe"], [c["tool"] for c in history]
        assert history[0]["answer"]["text"] == "hello Bo", history[0]
        # Who made each call: the panel's tries and `neko-sidecar call`'s,
        # never the model's.
        assert history[0]["by"] == "panel", history[0]
        assert {c["by"] for c in history} == {"panel", "cli"}, [c["by"] for c in history]
        photo_calls = [c for c in history if c["tool"] == "photo"]
        assert photo_calls and photo_calls[0]["pictures"][0]["data_b64"], photo_calls
        if os.environ.get("NEKO_PANEL_STATE_OUT"):
            # A fixture for rendering the panel by hand (docs/neko-panel.png).
            Path(os.environ["NEKO_PANEL_STATE_OUT"]).write_text(json.dumps(s, ensure_ascii=False))
        print("ok 3: try-a-tool answers as `neko-sidecar call` does (text, failure, pictures); the calls show in the history")

        # 4. Restart one MCP server.
        old_pid = next(m for m in get_json(base + "/status")["mcp_servers"] if m["name"] == "dev")["pid"]
        assert act("restart_server", server="dev") == {"ok": True, "server": "dev"}
        wait_for("dev in a new process", lambda: any(m["name"] == "dev" and m["phase"] == "ready" and m["pid"] not in (None, old_pid) and m["restarts"] == 1 for m in get_json(base + "/status")["mcp_servers"]))
        nope = act("restart_server", server="nope")
        assert not nope["ok"] and nope["error"]["key"] == "errors.noSuchServer", nope
        print("ok 4: one MCP server restarted from the panel (a new process, counted)")

        # 5. The tools folder and the inspector.
        folder = act("tools_folder")
        assert Path(folder["tools_folder"]) == tools and Path(folder["config_path"]) == agent, folder
        opened = act("open_inspector")
        assert opened["ok"] and opened["url"] == base + "/", opened
        print("ok 5: the tools folder's path, the inspector's address")

        # 6. A server that needs a sign-in, added to the tools folder (the
        # sidecar reloads it): its state, and the Sign in action.
        oauth = ThreadingHTTPServer(("127.0.0.1", 0), NeedsSignIn)
        threading.Thread(target=oauth.serve_forever, daemon=True).start()
        oauth_base = f"http://127.0.0.1:{oauth.server_address[1]}"
        (tools / "secure.toml").write_text(
            f'[[mcp_server]]\nname = "secure"\nurl = "{oauth_base}/mcp"\n\n[mcp_server.oauth]\nclient_id = "panel-client"\n'
        )
        link = base + "/oauth/login/secure"

        def secure_needs_sign_in():
            for m in dashboard()["status"].get("mcp_servers", []):
                if m["name"] == "secure" and (m.get("sign_in") or {}).get("state") == "needs_sign_in":
                    return m
            return None

        secure = wait_for("secure needs a sign-in", secure_needs_sign_in)
        assert secure["sign_in"]["link"] == link, secure
        answer = act("sign_in", server="secure")
        assert answer == {"ok": True, "server": "secure", "url": link, "opened": answer["opened"]}, answer
        # The link starts the sign-in: to the authorization server, with PKCE.
        no_redirect = urllib.request.build_opener(urllib.request.ProxyHandler({}), type("NoRedirect", (urllib.request.HTTPRedirectHandler,), {"redirect_request": lambda *a, **k: None})())
        try:
            no_redirect.open(link, timeout=5)
            raise AssertionError("the sign-in link did not redirect")
        except urllib.error.HTTPError as e:
            assert e.code == 303, e.code
            to = e.headers["location"]
        assert to.startswith(oauth_base + "/authorize?") and "code_challenge_method=S256" in to and "client_id=panel-client" in to, to
        none = act("sign_in", server="dev")
        assert not none["ok"] and none["error"]["key"] == "errors.noSignIn", none
        nope = act("sign_in", server="nope")
        assert not nope["ok"] and nope["error"]["key"] == "errors.noSuchServer", nope
        oauth.shutdown()
        # A fresh start without it, so that the last words below are of a
        # start (the panel keeps the last 20 lines of stderr).
        (tools / "secure.toml").unlink()
        plugin.shutdown()
        asyncio.run(run(plugin.startup()))
        wait_for("dev ready again", lambda: any(m["name"] == "dev" and m["phase"] == "ready" for m in get_json(base + "/status")["mcp_servers"]))
        print("ok 6: a server that needs a sign-in shows it with the sidecar's link; Sign in opens it, on to the authorization server with S256")

        # 7. The sidecar crashes: the panel says so, with its last words.
        pid = plugin._proc.pid
        os.kill(pid, signal.SIGKILL)
        plugin._proc.wait(5)
        s = dashboard()
        assert s["running"] is False and s["status"] is None, s
        assert s["exit_status"] == -signal.SIGKILL, s["exit_status"]
        assert s["error"]["key"] == "errors.notRunning", s["error"]
        assert any("admin endpoints listening" in line for line in s["stderr"]), s["stderr"]
        assert act("try_tool", tool="greet", arguments={"name": "x"})["error"]["key"] == "errors.notRunning"
        # A start that fails: the config's own error, in the stderr lines.
        # The plugin's own messages follow the user's language (here LANG,
        # as on a Linux desktop), through its catalogue and the SDK's
        # i18n: English so far, Chinese now; the sidecar's lines stay as
        # it wrote them.
        assert any(" neko-sidecar: config " in line for line in ctx.logger.lines), ctx.logger.lines
        agent.write_text(agent.read_text() + "\n[admin]\nbogus = 1\n")
        plugin._proc = None
        saved = {k: os.environ.pop(k, None) for k in ("LC_ALL", "LC_MESSAGES", "LANG")}
        os.environ["LANG"] = "zh_CN.UTF-8"
        seen = len(ctx.logger.lines)
        try:
            asyncio.run(run(plugin.startup()))
            raise AssertionError("a broken agent.toml started")
        except RuntimeError as e:
            assert str(e).startswith("neko-sidecar 启动后立即退出，状态 78："), e
            assert "agent.toml" in str(e), e
            # This run's lines only, not those of the run before it.
            assert "tool registered" not in str(e), e
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v
        assert any(" neko-sidecar：配置 " in line for line in ctx.logger.lines[seen:]), ctx.logger.lines[seen:]
        s = dashboard()
        assert s["running"] is False and s["exit_status"] == 78, (s["exit_status"], s["stderr"])
        assert s["start_error"] and "agent.toml" in "\n".join(s["stderr"]), s
        print("ok 7: a crashed sidecar and a failed start show as not running, with the exit status and stderr (the plugin's messages in the user's language)")
    except BaseException as e:
        failures += 1
        import traceback

        traceback.print_exc()
        print("--- plugin log ---\n" + "\n".join(ctx.logger.lines), file=sys.stderr)
    finally:
        try:
            plugin.shutdown()
        except Exception:
            pass
        server.kill()
        server.wait()
    if failures:
        print(f"panel: FAILED (left for a look: {root})", file=sys.stderr)
        return 1
    shutil.rmtree(root, ignore_errors=True)
    print("panel: the Hosted UI's Python against a running sidecar: 7 checks ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
