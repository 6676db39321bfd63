"""neko-sidecar as a N.E.K.O plugin: starts the bundled executable with the
plugin, stops it with the plugin, and nothing else.

Written to N.E.K.O's plugin SDK as upstream has it (Project-N-E-K-O/N.E.K.O):
the base class and decorators from ``plugin.sdk.plugin``
(plugin/sdk/plugin/__init__.py @42b5e27b, decorators.py @0acd4438), the
paths from the base class (plugin/sdk/plugin/base.py @0a46eaa5: ``plugin_dir``
is the installed payload, replaced by an upgrade; ``runtime_config_path`` and
``data_path()`` are the plugin's own state, which survives it). The host
calls ``startup`` with no arguments and awaits it (10 s), and ``shutdown``
with none, inside a stop budget of 1.5 s (plugin/core/host.py @685f1382).

The panel: N.E.K.O's Hosted UI (plugin.toml's ``[plugin.ui]``; upstream
docs/plugins/hosted-ui.md @685f1382) shows ``ui/panel.tsx`` with the state of
``dashboard`` below and calls the entries marked ``@ui.action``; both read
the running sidecar over its admin listener (``panel``), so Python holds no
copy of the sidecar's state. A host whose SDK has no ``ui`` (before Hosted
UI) gets the static page instead, as before.

Dying together: the sidecar runs with ``--stop-on-stdin-eof`` and its stdin
is a pipe only this process holds. The shutdown hook closes it; if this
process is killed outright (no hook runs, and N.E.K.O ends no plugin's
children), the pipe closes with it and the sidecar stops by itself, on every
platform, with its tools unregistered.
"""

from __future__ import annotations

import asyncio
import collections
import os
import platform
import shutil
import subprocess
import sys
import threading
import webbrowser
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from plugin.sdk.plugin import NekoPluginBase, lifecycle, neko_plugin

from . import panel

try:
    # Hosted UI: the SDK's `ui` decorators, `tr` (plugin-local i18n
    # references) and `plugin_entry` (plugin/sdk/plugin/__init__.py
    # @685f1382).
    from plugin.sdk.plugin import Ok, plugin_entry, tr, ui

    HOSTED_UI = True
except ImportError:  # A host before Hosted UI: the static page instead.
    HOSTED_UI = False

    def _keep(*_args, **_kwargs):
        return lambda fn: fn

    class ui:  # type: ignore[no-redef]
        context = staticmethod(_keep)
        action = staticmethod(_keep)

    plugin_entry = _keep

    def tr(key, *, default="", **_params):  # type: ignore[no-redef]
        return default or key

    def Ok(value):  # type: ignore[no-redef]
        return value

PLUGIN_ID = "neko_sidecar"
SOURCE = f"plugin:{PLUGIN_ID}"
# The shutdown hook's share of N.E.K.O's 1.5 s stop budget: the sidecar's
# own deadline (800 ms, in the default agent.toml) fits inside it.
STOP_WAIT_SECONDS = 1.0
# The first line of the manifest this plugin owns in the tools folder; a
# file without it is the user's and is never touched.
MANAGED_MARK = "# neko_sidecar plugin: managed file"
MCP_IMPORT_MANIFEST = "neko_mcp_adapter.toml"
# Windows: no console window for the sidecar (as qq_auto_reply starts NapCat).
CREATE_NO_WINDOW = 0x08000000


def english(key: str, default: str, **params: object) -> str:
    """A message in English, where no catalogue is at hand (`key` names it
    in i18n/*.json)."""
    return default.format(**params) if params else default


def user_locale() -> str | None:
    """The user's language, as the plugin's log and error messages follow
    it: the POSIX locale variables where they are set (LC_ALL, LC_MESSAGES,
    LANG), else the system's own (Windows: the user's default locale), as
    `zh-CN` and the like; None when there is none (the catalogue's default
    locale then, English)."""
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var, "")
        if value:
            break
    else:
        try:
            import locale
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                value = locale.getdefaultlocale()[0] or ""
        except (ValueError, AttributeError):
            value = ""
    value = value.split(".", 1)[0].split("@", 1)[0]
    if not value or value in ("C", "POSIX"):
        return None
    return value.replace("_", "-")


def bundled_executable(plugin_dir: Path, say=english) -> Path:
    """The executable shipped for this platform, or a RuntimeError that
    says what is shipped (in the words of `say`)."""
    machine = platform.machine().lower()
    arch = {"x86_64": "x86_64", "amd64": "x86_64"}.get(machine)
    if sys.platform == "win32":
        system, name = "windows", "neko-sidecar.exe"
    elif sys.platform.startswith("linux"):
        system, name = "linux", "neko-sidecar"
    elif sys.platform == "darwin":
        raise RuntimeError(
            say(
                "startError.noMacos",
                "neko-sidecar: no macOS build is bundled in this package (it holds "
                "Windows x86_64 and Linux x86_64). Build it from source "
                "(cargo install --path .) and run `neko-sidecar run` beside N.E.K.O.",
            )
        )
    else:
        raise RuntimeError(say("startError.noBuild", "neko-sidecar: no build for {platform} is bundled", platform=sys.platform))
    if arch is None:
        raise RuntimeError(
            say(
                "startError.noArch",
                "neko-sidecar: no build for {system} {machine} is bundled (only x86_64)",
                system=system,
                machine=platform.machine(),
            )
        )
    exe = plugin_dir / "bin" / f"{system}-{arch}" / name
    if not exe.is_file():
        raise RuntimeError(say("startError.missing", "neko-sidecar: the bundled executable {path} is missing", path=exe))
    return exe


def toml_string(value: str) -> str:
    """A TOML basic string holding `value` (Windows paths have backslashes)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def truthy_flag(value: object) -> bool:
    """mcp_adapter's ``inject_mcp`` as N.E.K.O reads it
    (main_routers/mcp_chat_injection_router.py ``_coerce_enabled_flag``
    @580037b1)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "y", "on"}
    return False


def relative_to(path: Path, base: Path) -> str:
    """`path` relative to the folder `base` (what the sidecar resolves a
    relative path against), so the files keep working when N.E.K.O's data
    folder moves; absolute where no relative path exists (another drive)."""
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return str(path)


def schema_line(plugin_dir: Path, kind: str) -> str:
    """The `#:schema` line that points taplo (and the editors built on it,
    VS Code's Even Better TOML among them) at the plugin's copy of the
    JSON Schema of a manifest or of the agent config, as a file URL (the
    one form of an absolute path it reads on every system); empty when the
    plugin has no such file."""
    schema = Path(plugin_dir) / "schemas" / f"{kind}.schema.json"
    return f"#:schema {schema.resolve().as_uri()}\n" if schema.is_file() else ""


def default_agent_toml(tools_dir: Path, config_dir: Path, schema: str = "") -> str:
    return f"""{schema}# neko-sidecar's config, written by the N.E.K.O plugin on its first start and
# never again: edit it freely (restart the plugin to apply); delete it to get
# this default back. Every key: agent.toml.example in the sidecar's README.

# The tag of every tool this sidecar registers; main_server evicts a dead
# callback's tools only for "plugin:" sources.
source = "{SOURCE}"

# Tool manifests: every *.toml file in this folder, applied within a second
# of a save. neko_mcp_adapter.toml in it is the plugin's (see its first line).
# (Relative to this file's folder: {tools_dir})
manifest_dirs = [{toml_string(relative_to(tools_dir, config_dir))}]

# [main_server] url is not set: the sidecar goes where N.E.K.O says, the port
# its launcher exports (NEKO_MAIN_SERVER_PORT), else 48911.

[shutdown]
# N.E.K.O gives a stopping plugin 1.5 s: unregistering fits in this.
deadline = "800ms"

[admin]
# The inspector page and /status: open http://127.0.0.1:48931/ in a browser.
listen = "127.0.0.1:48931"
# The sidecar's identity token (owner-only, removed at stop), with which
# `neko-sidecar call` checks that the admin port is this sidecar's.
token_file = "admin.token"
"""


@neko_plugin
class NekoSidecarPlugin(NekoPluginBase):
    """Starts ``neko-sidecar run`` in ``startup`` and stops it in ``shutdown``."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self._proc: subprocess.Popen | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        # The admin token of this start (handed to the sidecar), and how the
        # last run ended, for the panel.
        self._admin_token: str | None = None
        self._last_exit: int | None = None
        self._start_error: str | None = None

    # ------------------------------------------------------------------
    # Where things are

    def _config_dir(self) -> Path:
        # The plugin's own config folder, next to the runtime plugin.toml
        # N.E.K.O keeps for it; never plugin_dir, which an upgrade replaces.
        return Path(self.runtime_config_path).parent

    def _mcp_adapter_config(self) -> Path | None:
        """mcp_adapter's runtime config: the same place as ours with its id
        in place of ours (``<state>/plugins/mcp_adapter/config/plugin.toml``),
        else the plugin.toml of N.E.K.O's built-in mcp_adapter, from which
        that runtime config is seeded."""
        ours = Path(self.runtime_config_path)
        parts = list(ours.parts)
        candidates: list[Path] = []
        for i in range(len(parts) - 1, -1, -1):
            if parts[i] == self.plugin_id:
                candidates.append(Path(*parts[:i], "mcp_adapter", *parts[i + 1 :]))
                break
        for entry in sys.path:
            if entry:
                candidates.append(Path(entry) / "plugins" / "mcp_adapter" / "plugin.toml")
        for path in candidates:
            if path.is_file():
                return path
        return None

    # ------------------------------------------------------------------
    # First start and every start

    def _prepare(self) -> Path:
        """Writes what is missing (the default agent.toml, the tools folder
        with its example) and the managed mcp_adapter import; returns the
        agent.toml."""
        config_dir = self._config_dir()
        config_dir.mkdir(parents=True, exist_ok=True)
        tools_dir = Path(self.data_path("tools"))
        agent_toml = config_dir / "agent.toml"
        if not tools_dir.exists():
            self._seed_tools(tools_dir)
        if not agent_toml.exists():
            schema = schema_line(Path(self.plugin_dir), "agent")
            agent_toml.write_text(default_agent_toml(tools_dir, config_dir, schema), encoding="utf-8")
            self.logger.info(self._say("log.wroteConfig", "neko-sidecar: wrote the default config {path}", path=agent_toml))
        self.logger.info(
            self._say("log.paths", "neko-sidecar: config {config}, tools folder {tools}", config=agent_toml, tools=tools_dir)
        )
        self._sync_mcp_import(tools_dir)
        return agent_toml

    def _seed_tools(self, tools_dir: Path) -> None:
        """The tools folder with one example that needs nothing installed:
        convert_units, run by the Python that runs N.E.K.O."""
        tools_dir.mkdir(parents=True, exist_ok=True)
        examples = Path(self.plugin_dir) / "examples"
        python = sys.executable
        if getattr(sys, "frozen", False) or not python or not (examples / "convert_units.py").is_file():
            self.logger.info(
                self._say("log.noPython", "neko-sidecar: no Python interpreter to run the example tool; tools folder left empty")
            )
            return
        (tools_dir / "handlers").mkdir(exist_ok=True)
        (tools_dir / "schemas").mkdir(exist_ok=True)
        shutil.copyfile(examples / "convert_units.py", tools_dir / "handlers" / "convert_units.py")
        shutil.copyfile(
            examples / "convert_units.schema.json",
            tools_dir / "schemas" / "convert_units.schema.json",
        )
        (tools_dir / "convert_units.toml").write_text(
            schema_line(Path(self.plugin_dir), "manifest")
            + "# An example tool, written by the neko_sidecar plugin on its first start:\n"
            "# an exec handler in Python (N.E.K.O's own). Edit or delete it freely.\n\n"
            "[[tool]]\n"
            'name = "convert_units"\n'
            'description = "Convert a quantity between units of length, mass or temperature."\n'
            "timeout_seconds = 5\n"
            'parameters_file = "schemas/convert_units.schema.json"\n'
            f'handler = {{ type = "exec", command = [{toml_string(python)}, "handlers/convert_units.py"] }}\n',
            encoding="utf-8",
        )

    def _sync_mcp_import(self, tools_dir: Path) -> None:
        """The manifest that imports mcp_adapter's servers: written while
        mcp_adapter has a config and its own chat injection is off; removed
        otherwise (with inject_mcp on, mcp_adapter registers those servers'
        tools itself, under plugin:mcp_adapter, and ours would be a second
        copy of each). A file without the mark is the user's: left alone."""
        manifest = tools_dir / MCP_IMPORT_MANIFEST
        ours = not manifest.exists() or manifest.read_text(encoding="utf-8", errors="replace").startswith(MANAGED_MARK)
        if not ours:
            self.logger.info(self._say("log.importYours", "neko-sidecar: {path} is yours (no managed mark): left as it is", path=manifest))
            return
        source = self._mcp_adapter_config()
        why_not = None
        if source is None:
            why_not = self._say("log.noAdapterConfig", "N.E.K.O's MCP adapter has no config here")
        else:
            try:
                with source.open("rb") as f:
                    adapter = tomllib.load(f).get("mcp_adapter", {})
            except (OSError, tomllib.TOMLDecodeError) as e:
                adapter = {}
                self.logger.warning(self._say("log.cannotRead", "neko-sidecar: cannot read {path}: {error}", path=source, error=e))
            if isinstance(adapter, dict) and truthy_flag(adapter.get("inject_mcp", False)):
                why_not = self._say(
                    "log.injectOn",
                    "the MCP adapter's own chat injection (inject_mcp) is on and registers "
                    "its servers' tools itself; importing them too would list each tool twice",
                )
        if why_not is not None:
            if manifest.exists():
                manifest.unlink()
            self.logger.info(self._say("log.notImporting", "neko-sidecar: not importing the MCP adapter's servers: {why}", why=why_not))
            return
        text = (
            f"{MANAGED_MARK} (rewritten at every start; delete this line to keep your edits).\n"
            + schema_line(Path(self.plugin_dir), "manifest")
            + "# The MCP servers of N.E.K.O's MCP adapter, bridged by the sidecar; removed\n"
            "# while the adapter's own chat injection (inject_mcp) is on.\n\n"
            "[[mcp_import]]\n"
            f"# {source}\n"
            f"path = {toml_string(relative_to(source, tools_dir))}\n"
        )
        if not manifest.exists() or manifest.read_text(encoding="utf-8") != text:
            manifest.write_text(text, encoding="utf-8")
        self.logger.info(self._say("log.importing", "neko-sidecar: importing the MCP adapter's servers from {path}", path=source))

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self._admin_token:
            env[panel.ADMIN_TOKEN_ENV] = self._admin_token
        if not env.get("NEKO_MAIN_SERVER_PORT"):
            # Where N.E.K.O's own code puts main_server when the launcher
            # exported nothing (its config module also reads the desktop
            # app's port_config.json, config/network.py @1136f662).
            try:
                from config import MAIN_SERVER_PORT  # N.E.K.O's config package

                env["NEKO_MAIN_SERVER_PORT"] = str(int(MAIN_SERVER_PORT))
            except Exception:
                pass
        return env

    # ------------------------------------------------------------------
    # Hooks

    @lifecycle(id="startup")
    async def startup(self):
        if self._proc is not None and self._proc.poll() is None:
            return
        self._start_error = None
        self._last_exit = None
        try:
            await self._start()
        except Exception as e:
            self._start_error = str(e)
            raise

    async def _start(self):
        exe = bundled_executable(Path(self.plugin_dir), self._say)
        if sys.platform != "win32":
            # N.E.K.O's installer writes files with a plain open("wb"): the
            # executable arrives without its exec bit.
            if not os.access(exe, os.X_OK):
                try:
                    exe.chmod(exe.stat().st_mode | 0o755)
                except OSError as e:
                    raise RuntimeError(
                        self._say("startError.notExecutable", "neko-sidecar: cannot make {path} executable: {error}", path=exe, error=e)
                    ) from e
        agent_toml = self._prepare()
        self._admin_token = panel.new_token()
        argv = [str(exe), "run", "--config", str(agent_toml), "--stop-on-stdin-eof"]
        # The tail of this run only: a failed start must not show the lines
        # of the run before it.
        self._stderr_tail = collections.deque(maxlen=20)
        extra = {"creationflags": CREATE_NO_WINDOW} if sys.platform == "win32" else {}
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=str(agent_toml.parent),
            env=self._environment(),
            **extra,
        )
        relay = threading.Thread(
            target=self._relay_stderr, args=(self._proc, self._stderr_tail), name="neko-sidecar-log", daemon=True
        )
        relay.start()
        self.logger.info(self._say("log.started", "neko-sidecar: started {exe} (pid {pid})", exe=exe, pid=self._proc.pid))
        try:
            code = self._proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            if not HOSTED_UI:
                # The static page only where the host has no Hosted UI.
                self.register_static_ui("static")
            return
        # Its last lines (why it stopped) may still be in the pipe: the
        # relay ends at the pipe's end, which the exit brings.
        relay.join(timeout=2)
        tail = "\n".join(self._stderr_tail)
        self._proc = None
        self._last_exit = code
        raise RuntimeError(
            self._say("startError.exitedAtOnce", "neko-sidecar exited at once with status {status}:\n{tail}", status=code, tail=tail)
        )

    @lifecycle(id="shutdown")
    def shutdown(self):
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()  # the stop request: unregister, then exit
        except OSError:
            pass
        try:
            proc.wait(timeout=STOP_WAIT_SECONDS)
            self._last_exit = proc.returncode
            self.logger.info(self._say("log.stopped", "neko-sidecar: stopped (status {status})", status=proc.returncode))
            return
        except subprocess.TimeoutExpired:
            pass
        self.logger.warning(self._say("log.killing", "neko-sidecar: still running after its stop budget; killing it"))
        if sys.platform == "win32":
            subprocess.run(
                ["taskkill", "/PID", str(proc.pid), "/T", "/F"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                creationflags=CREATE_NO_WINDOW,
                check=False,
            )
        else:
            proc.kill()
        try:
            proc.wait(timeout=0.3)
        except subprocess.TimeoutExpired:
            pass

    def _relay_stderr(self, proc: subprocess.Popen, tail: "collections.deque[str]") -> None:
        """The sidecar's log lines into the plugin's log (N.E.K.O's plugin
        manager shows it); the last ones are kept in `tail` (its run's own)
        for a failed start."""
        for raw in proc.stderr:
            line = raw.decode("utf-8", errors="replace").rstrip()
            if line:
                tail.append(line)
                self.logger.info(f"[neko-sidecar] {line}")

    # ------------------------------------------------------------------
    # The Hosted UI panel (ui/panel.tsx) and guide (docs/guide.tsx)

    def _say(self, key: str, default: str, **params: object) -> str:
        """A log or error message of the plugin in the user's language
        (user_locale), from the plugin's catalogue through the SDK's
        `self.i18n.t` (plugin/sdk/shared/i18n.py @685f1382, upstream's
        fallback: the locale, its base, zh-CN for any Chinese, the default
        locale, en); English where the host has no catalogue. What the
        sidecar itself writes (relayed as `[neko-sidecar] ...`) and what the
        model reads stay English."""
        t = getattr(getattr(self, "i18n", None), "t", None)
        if callable(t):
            try:
                return t(key, locale=user_locale(), default=default, **params)
            except Exception:
                pass
        return english(key, default, **params)

    def _agent_toml(self) -> Path:
        return self._config_dir() / "agent.toml"

    def _admin(self) -> tuple[panel.Admin | None, str | None]:
        """The running sidecar's admin listener, or why it cannot be
        reached (an i18n key)."""
        if self._proc is None or self._proc.poll() is not None:
            return None, "errors.notRunning"
        address, why = panel.admin_address(self._agent_toml())
        if address is None:
            return None, why
        return panel.Admin(address, self._admin_token), None

    def _dashboard(self) -> dict:
        proc = self._proc
        running = proc is not None and proc.poll() is None
        if proc is not None and not running:
            self._last_exit = proc.returncode
        address, _ = panel.admin_address(self._agent_toml())
        admin, why = self._admin()
        state = {
            "running": running,
            "pid": proc.pid if running else None,
            "exit_status": None if running else self._last_exit,
            "start_error": None if running else self._start_error,
            # The sidecar's last log lines: what it said before it stopped.
            "stderr": [] if running else list(self._stderr_tail),
            "inspector_url": f"http://{address}/" if address else None,
            "config_path": str(self._agent_toml()),
            "tools_folder": str(Path(self.data_path("tools"))),
            "mcp_import_manifest": str(Path(self.data_path("tools")) / MCP_IMPORT_MANIFEST),
            "mcp_adapter_config": str(self._mcp_adapter_config() or ""),
        }
        state.update(panel.read_state(admin, why) if running else {"status": None, "calls": None, "error": panel.error("errors.notRunning")})
        return state

    @ui.context(id="dashboard", title=tr("panel.title", default="neko-sidecar"))
    async def dashboard(self):
        return await asyncio.to_thread(self._dashboard)

    @ui.action(label=tr("actions.tryTool.label", default="Try"), tone="primary", group="tools", order=10, refresh_context=True)
    @plugin_entry(
        id="try_tool",
        name=tr("entries.tryTool.name", default="Try a sidecar tool"),
        description=tr(
            "entries.tryTool.description",
            default="Calls one of neko-sidecar's tools as main_server would, and answers with what the model reads.",
        ),
        input_schema={
            "type": "object",
            "properties": {
                "tool": {"type": "string", "description": tr("entries.tryTool.fields.tool", default="The tool's name")},
                "arguments": {
                    "type": ["object", "string"],
                    "description": tr("entries.tryTool.fields.arguments", default="The arguments (an object, or the model's JSON text)"),
                },
            },
            "required": ["tool"],
        },
    )
    async def try_tool(self, tool: str, arguments: object = None, **_):
        admin, why = self._admin()
        return Ok(await asyncio.to_thread(panel.try_tool, admin, why, tool, {} if arguments is None else arguments))

    @ui.action(label=tr("actions.restartServer.label", default="Restart"), tone="warning", group="servers", order=20, refresh_context=True)
    @plugin_entry(
        id="restart_server",
        name=tr("entries.restartServer.name", default="Restart an MCP server"),
        description=tr(
            "entries.restartServer.description",
            default="Stops one MCP server of neko-sidecar and starts it again at once; its tools stay registered.",
        ),
        input_schema={
            "type": "object",
            "properties": {"server": {"type": "string", "description": tr("entries.restartServer.fields.server", default="The MCP server's name")}},
            "required": ["server"],
        },
    )
    async def restart_server(self, server: str, **_):
        admin, why = self._admin()
        return Ok(await asyncio.to_thread(panel.restart_server, admin, why, server))

    @ui.action(label=tr("actions.signIn.label", default="Sign in"), tone="primary", group="servers", order=25, refresh_context=True)
    @plugin_entry(
        id="sign_in",
        name=tr("entries.signIn.name", default="Sign in to an MCP server"),
        description=tr(
            "entries.signIn.description",
            default="Opens the sign-in page (OAuth) of an MCP server that needs one, in the browser on this machine.",
        ),
        input_schema={
            "type": "object",
            "properties": {"server": {"type": "string", "description": tr("entries.signIn.fields.server", default="The MCP server's name")}},
            "required": ["server"],
        },
    )
    async def sign_in(self, server: str, **_):
        admin, why = self._admin()
        answer = await asyncio.to_thread(panel.sign_in, admin, why, server)
        if answer.get("ok"):
            # The consent happens in the user's browser, on this machine: the
            # redirect comes back to the sidecar's loopback listener.
            answer["opened"] = bool(await asyncio.to_thread(webbrowser.open, answer["url"]))
        return Ok(answer)

    @ui.action(label=tr("actions.toolsFolder.label", default="Tools folder"), group="files", order=30, refresh_context=False)
    @plugin_entry(
        id="tools_folder",
        name=tr("entries.toolsFolder.name", default="Show the tools folder"),
        description=tr("entries.toolsFolder.description", default="Where neko-sidecar's tool manifests and its config are on this machine."),
        input_schema={"type": "object", "properties": {}},
    )
    async def tools_folder(self, **_):
        return Ok({"ok": True, "tools_folder": str(Path(self.data_path("tools"))), "config_path": str(self._agent_toml())})

    @ui.action(label=tr("actions.openInspector.label", default="Open the inspector"), group="files", order=40, refresh_context=False)
    @plugin_entry(
        id="open_inspector",
        name=tr("entries.openInspector.name", default="Open the inspector page"),
        description=tr("entries.openInspector.description", default="Opens neko-sidecar's inspector page in the browser."),
        input_schema={"type": "object", "properties": {}},
    )
    async def open_inspector(self, **_):
        address, why = panel.admin_address(self._agent_toml())
        if address is None:
            return Ok({"ok": False, "error": panel.error(why or "errors.adminOff")})
        url = f"http://{address}/"
        # N.E.K.O is a desktop program: the page opens in the user's browser
        # (on this machine, as the sidecar's listener is loopback only).
        opened = await asyncio.to_thread(webbrowser.open, url)
        return Ok({"ok": True, "url": url, "opened": bool(opened)})
