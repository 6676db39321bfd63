"""What the plugin's Hosted UI panel reads and does, over the running
sidecar's loopback admin listener.

Nothing here keeps a copy of the sidecar's state: every read is a request
to the sidecar (``GET /status``, ``POST /ui/calls``), every action one
(``POST /ui/call``, ``POST /ui/mcp/restart``; a sign-in is the sidecar's
own link, ``/oauth/login/NAME``, opened in the browser), made at the moment the
panel asks. The routes that act or show what the model read want the
inspector page's own Origin and a token; the plugin makes a token at every
start and hands it to the sidecar in ``NEKO_SIDECAR_ADMIN_TOKEN`` (the
sidecar keeps it from its handlers and MCP servers), so the plugin proves
itself as the page does.

Failures are data, never exceptions: each answer carries an ``error`` with
a ``key`` of the plugin's i18n catalogue (the panel shows it in the user's
language) and the sidecar's own English ``detail``.

Standard library only (urllib): the plugin ships no dependencies.
"""

from __future__ import annotations

import base64
import json
import secrets
import urllib.error
import urllib.request
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

ADMIN_TOKEN_ENV = "NEKO_SIDECAR_ADMIN_TOKEN"
# A live sidecar answers at once; this only bounds a wedged one.
READ_TIMEOUT_SECONDS = 3.0
# A tool call may take its own time (the sidecar bounds it by the tool's
# timeout_seconds, at most 300 s).
CALL_TIMEOUT_SECONDS = 310.0
DEFAULT_ADMIN = "127.0.0.1:48931"
# The largest answer read from the admin listener (a call's raw answer may
# carry two pictures of 2 MiB of base64 each).
MAX_ANSWER_BYTES = 16 * 1024 * 1024
PICTURE_MIMES = ("image/png", "image/jpeg")
# The panel shows this many of the newest calls.
PANEL_CALLS = 50


def new_token() -> str:
    """128 random bits as hex: what the sidecar accepts in
    NEKO_SIDECAR_ADMIN_TOKEN (32 to 256 of A-Z a-z 0-9 - _)."""
    return secrets.token_hex(16)


def admin_address(agent_toml: Path) -> tuple[str | None, str | None]:
    """The admin listener's ``HOST:PORT`` from the agent config, or why
    there is none (an i18n key)."""
    try:
        with agent_toml.open("rb") as f:
            admin = tomllib.load(f).get("admin", {})
    except FileNotFoundError:
        return DEFAULT_ADMIN, None
    except (OSError, tomllib.TOMLDecodeError):
        return None, "errors.configUnreadable"
    listen = admin.get("listen", DEFAULT_ADMIN) if isinstance(admin, dict) else DEFAULT_ADMIN
    if not isinstance(listen, str):
        return None, "errors.configUnreadable"
    if listen == "":
        return None, "errors.adminOff"
    if listen.endswith(":0"):
        return None, "errors.adminEphemeral"
    return listen, None


def error(key: str, detail: str = "") -> dict:
    return {"key": key, "detail": detail}


class Admin:
    """The sidecar's admin listener at ``http://ADDRESS``, with the token
    of this start."""

    def __init__(self, address: str, token: str | None):
        self.base = f"http://{address}"
        self.token = token

    def _send(self, method: str, path: str, body: object | None, timeout: float) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("content-type", "application/json")
            # The gate of the routes that act: the page's own Origin and
            # its token.
            req.add_header("origin", self.base)
            if self.token:
                req.add_header("x-neko-token", self.token)
        # The sidecar is on this machine: never through a proxy.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=timeout) as resp:
                code, raw = resp.status, resp.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as e:
            code, raw = e.code, e.read(MAX_ANSWER_BYTES + 1)
        if len(raw) > MAX_ANSWER_BYTES:
            raise OSError(f"the answer of {path} is larger than {MAX_ANSWER_BYTES} bytes")
        text = raw.decode("utf-8", errors="replace")
        try:
            return code, json.loads(text)
        except json.JSONDecodeError:
            return code, text

    def get(self, path: str) -> tuple[int, object]:
        return self._send("GET", path, None, READ_TIMEOUT_SECONDS)

    def post(self, path: str, body: object, timeout: float = READ_TIMEOUT_SECONDS) -> tuple[int, object]:
        return self._send("POST", path, body, timeout)


def refused(code: int, answer: object) -> dict:
    """An admin route's refusal, as an error for the panel."""
    detail = answer.get("error") if isinstance(answer, dict) else None
    key = "errors.refused" if code in (400, 403) else "errors.sidecarAnswer"
    return error(key, f"HTTP {code}: {detail if detail is not None else answer}")


def read_state(admin: Admin | None, why_no_admin: str | None) -> dict:
    """``status`` (``/status`` as the sidecar answered it), ``schemas``
    (each tool's parameters, from ``/ui/tools``) and ``calls`` (the call
    history), or the error that kept them."""
    if admin is None:
        return {"status": None, "calls": None, "error": error(why_no_admin or "errors.adminOff")}
    try:
        code, status = admin.get("/status")
    except OSError as e:
        return {"status": None, "calls": None, "error": error("errors.unreachable", str(e))}
    if code != 200 or not isinstance(status, dict):
        return {"status": None, "calls": None, "error": refused(code, status)}
    # Each tool's schema, for the try-a-tool form.
    try:
        code, tools = admin.get("/ui/tools")
    except OSError as e:
        return {"status": status, "calls": None, "error": error("errors.unreachable", str(e))}
    schemas = {
        t["name"]: t.get("parameters") or {}
        for t in (tools if code == 200 and isinstance(tools, list) else [])
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    }
    try:
        code, calls = admin.post("/ui/calls", {})
    except OSError as e:
        return {"status": status, "calls": None, "error": error("errors.unreachable", str(e))}
    if code != 200:
        return {"status": status, "schemas": schemas, "calls": None, "error": refused(code, calls)}
    if isinstance(calls, dict) and isinstance(calls.get("calls"), list):
        # The newest only: the whole ring (with its pictures) would make
        # every refresh of the panel heavy; `status --calls` has the rest.
        calls = dict(calls, calls=calls["calls"][:PANEL_CALLS])
    return {"status": status, "schemas": schemas, "calls": calls, "error": None}


def pictures_of(raw: object) -> list[dict]:
    """The pictures of a callback's raw answer (as the sidecar sent them
    to main_server) as data URLs the panel shows."""
    if not isinstance(raw, dict) or not isinstance(raw.get("body"), str):
        return []
    try:
        body = json.loads(raw["body"])
    except json.JSONDecodeError:
        return []
    images = body.get("images") if isinstance(body, dict) else None
    out = []
    for image in images if isinstance(images, list) else []:
        if not isinstance(image, dict) or not isinstance(image.get("data_b64"), str):
            continue
        data = image["data_b64"]
        mime = image.get("mime")
        if mime not in PICTURE_MIMES:
            try:
                head = base64.b64decode(data[:16] + "=" * (-len(data[:16]) % 4))
            except ValueError:
                continue
            mime = "image/jpeg" if head.startswith(b"\xff\xd8") else "image/png"
        out.append({"mime": mime, "bytes": len(data), "src": f"data:{mime};base64,{data}"})
    return out


def try_tool(admin: Admin | None, why_no_admin: str | None, tool: str, arguments: object) -> dict:
    """Calls ``tool`` through the sidecar as main_server would (the
    sidecar's ``POST /ui/call``, the one ``neko-sidecar call`` matches):
    what the model reads, and its pictures."""
    if admin is None:
        return {"ok": False, "error": error(why_no_admin or "errors.adminOff")}
    # The call history marks the calls tried from the panel as such.
    request: dict = {"tool": tool, "by": "panel"}
    if isinstance(arguments, str):
        request["raw_arguments"] = arguments if arguments.strip() else "{}"
    elif isinstance(arguments, dict):
        request["arguments"] = arguments
    else:
        return {"ok": False, "error": error("errors.argumentsNotObject", type(arguments).__name__)}
    try:
        code, answer = admin.post("/ui/call", request, timeout=CALL_TIMEOUT_SECONDS)
    except OSError as e:
        return {"ok": False, "error": error("errors.unreachable", str(e))}
    if code != 200 or not isinstance(answer, dict):
        return {"ok": False, "error": refused(code, answer)}
    if not answer.get("called"):
        # The arguments fail the schema: what a model's call would read.
        return {
            "ok": True,
            "called": False,
            "model_text": answer.get("message", ""),
            "is_error": True,
            "pictures": [],
        }
    read = answer.get("answer") or {}
    return {
        "ok": True,
        "called": True,
        "model_text": read.get("model_text", ""),
        "is_error": bool(read.get("is_error")),
        "took_ms": read.get("took_ms"),
        "warnings": read.get("warnings") or [],
        "pictures": pictures_of(answer.get("raw")),
    }


def restart_server(admin: Admin | None, why_no_admin: str | None, server: str) -> dict:
    if admin is None:
        return {"ok": False, "error": error(why_no_admin or "errors.adminOff")}
    try:
        code, answer = admin.post("/ui/mcp/restart", {"server": server})
    except OSError as e:
        return {"ok": False, "error": error("errors.unreachable", str(e))}
    if code == 404:
        return {"ok": False, "error": error("errors.noSuchServer", server)}
    if code != 200:
        return {"ok": False, "error": refused(code, answer)}
    return {"ok": True, "server": server}


def sign_in(admin: Admin | None, why_no_admin: str | None, server: str) -> dict:
    """Where the user signs in to the MCP server ``server`` (OAuth): the
    link its ``/status`` shows (``sign_in.link``, the admin listener's
    ``/oauth/login/NAME``, which starts the sign-in and sends the browser on
    to the authorization server), or why there is none."""
    if admin is None:
        return {"ok": False, "error": error(why_no_admin or "errors.adminOff")}
    try:
        code, status = admin.get("/status")
    except OSError as e:
        return {"ok": False, "error": error("errors.unreachable", str(e))}
    if code != 200 or not isinstance(status, dict):
        return {"ok": False, "error": refused(code, status)}
    servers = status.get("mcp_servers") if isinstance(status.get("mcp_servers"), list) else []
    found = next((m for m in servers if isinstance(m, dict) and m.get("name") == server), None)
    if found is None:
        return {"ok": False, "error": error("errors.noSuchServer", server)}
    state = found.get("sign_in") if isinstance(found.get("sign_in"), dict) else {}
    link = state.get("link")
    if state.get("state") != "needs_sign_in" or not isinstance(link, str):
        detail = state.get("reason") or state.get("state") or ""
        return {"ok": False, "error": error("errors.noSignIn", str(detail))}
    # Only the sidecar's own page is opened: the browser goes on from there.
    if not link.startswith(admin.base + "/oauth/login/"):
        return {"ok": False, "error": error("errors.sidecarAnswer", "the sign-in link is not the admin listener's")}
    return {"ok": True, "server": server, "url": link}
