"""The smallest faithful double of N.E.K.O's plugin SDK that the
neko_sidecar plugin's hooks need (tests/neko_plugin/lifecycle.py). Names,
signatures and behaviour follow upstream Project-N-E-K-O/N.E.K.O; never
kinder than it:

- ``plugin.sdk.plugin`` exports ``NekoPluginBase``, ``neko_plugin`` and
  ``lifecycle`` (plugin/sdk/plugin/__init__.py @42b5e27b).
- ``lifecycle(*, id, name=None, description="", metadata=None)`` with ``id``
  one of startup, shutdown, reload, freeze, unfreeze, config_change
  (plugin/sdk/plugin/decorators.py @0acd4438); the host finds hooks through
  the decorator's metadata, not by method name (plugin/sdk/shared/core/base.py
  ``collect_entries`` @0aafba32).
- ``NekoPluginBase(ctx)``: ``logger`` is ``ctx.logger`` (loguru-like);
  ``plugin_id``; ``plugin_dir`` is the installed payload and ``config_dir``
  only an alias of it; ``runtime_config_path`` and ``data_path(*parts)``
  are the plugin's state; ``register_static_ui(directory="static", *,
  index_file="index.html", cache_control=...)`` returns False unless
  ``config_dir/directory/index_file`` exists (plugin/sdk/plugin/base.py
  @0a46eaa5). The double resolves the paths from the context directly
  (upstream's resolvers, plugin/sdk/shared/core/base_runtime.py, read the
  host's context the same way); it creates no directory the real one
  would not (data_path() only names a path).
- Hosted UI (docs/plugins/hosted-ui.md @685f1382): ``ui.context(*, id="main",
  title=None)`` and ``ui.action(*, id=None, label=None, icon=None,
  tone="default", group=None, order=0, confirm=False,
  refresh_context=True)`` set their metadata dicts on the function
  (``__neko_ui_context__``, ``__neko_ui_action__``; plugin/sdk/plugin/ui.py
  @685f1382), which the host finds (plugin/core/host.py:700-790);
  ``plugin_entry(*, id, name, description, input_schema, ...)`` marks an
  entry (event type "plugin_entry"); ``tr(key, *, default="", **params)``
  is the JSON-compatible reference ``{"$i18n": key, "default": ...}``
  (plugin/sdk/shared/i18n.py @685f1382); ``Ok(value)`` the result type
  (plugin/sdk/shared/models/result.py); ``self.i18n`` the plugin's
  catalogue from ``[plugin.i18n]`` (i18n/<locale>.json beside plugin.toml)
  with upstream's fallback order (the locale, its base, zh-CN for any
  Chinese, the default locale, en).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

# plugin/sdk/shared/constants.py @685f1382
NEKO_PLUGIN_META_ATTR = "__neko_plugin_meta__"
NEKO_PLUGIN_TAG = "__neko_plugin__"
EVENT_META_ATTR = "__neko_event_meta__"

_LIFECYCLE_IDS = ("startup", "shutdown", "reload", "freeze", "unfreeze", "config_change")


class EventMeta:
    def __init__(self, *, event_type: str, id: str, name: str, description: str, metadata: dict | None):
        self.event_type = event_type
        self.id = id
        self.name = name
        self.description = description
        self.metadata = dict(metadata or {})


def neko_plugin(cls):
    """The class marker (plugin/sdk/shared/core/decorators.py:279 @685f1382)."""
    setattr(cls, NEKO_PLUGIN_TAG, True)
    return cls


def lifecycle(
    *,
    id: Literal["startup", "shutdown", "reload", "freeze", "unfreeze", "config_change"],
    name: str | None = None,
    description: str = "",
    metadata: dict[str, object] | None = None,
):
    if id not in _LIFECYCLE_IDS:
        raise ValueError(f"unknown lifecycle id {id!r}")

    def wrap(fn):
        setattr(fn, EVENT_META_ATTR, EventMeta(event_type="lifecycle", id=id, name=name or id, description=description, metadata=metadata))
        return fn

    return wrap


UI_CONTEXT_META_ATTR = "__neko_ui_context__"
UI_ACTION_META_ATTR = "__neko_ui_action__"
I18N_REF_KEY = "$i18n"


def _ui_context(*, id: str = "main", title: object | None = None):
    def wrap(fn):
        setattr(fn, UI_CONTEXT_META_ATTR, {"id": str(id or "main"), "title": title})
        return fn

    return wrap


def _ui_action(*, id: str | None = None, label: object | None = None, icon: str | None = None, tone: str = "default", group: str | None = None, order: int = 0, confirm: object = False, refresh_context: bool = True):
    def wrap(fn):
        setattr(fn, UI_ACTION_META_ATTR, {"id": id, "label": label, "icon": icon, "tone": tone, "group": group, "order": int(order), "confirm": confirm, "refresh_context": bool(refresh_context)})
        return fn

    return wrap


ui = SimpleNamespace(context=_ui_context, action=_ui_action, UI_CONTEXT_META_ATTR=UI_CONTEXT_META_ATTR, UI_ACTION_META_ATTR=UI_ACTION_META_ATTR)


def tr(key: str, *, default: str = "", **params: Any) -> dict[str, Any]:
    key = str(key or "").strip()
    if not key:
        raise ValueError("i18n key must be non-empty")
    ref: dict[str, Any] = {I18N_REF_KEY: key}
    if default:
        ref["default"] = str(default)
    if params:
        ref["params"] = dict(params)
    return ref


def plugin_entry(*, id: str | None = None, name: object | None = None, description: object = "", input_schema: dict | None = None, **_rest):
    def wrap(fn):
        setattr(fn, EVENT_META_ATTR, EventMeta(event_type="plugin_entry", id=id or fn.__name__, name=name or id, description=description, metadata={"input_schema": input_schema or {}}))
        return fn

    return wrap


@dataclass(frozen=True)
class Ok:
    value: Any


class PluginI18n:
    def __init__(self, messages: dict[str, dict], default_locale: str = "en"):
        self.messages = messages
        self.default_locale = default_locale

    def t(self, key: str, *, locale: str | None = None, default: str = "", **params: object) -> str:
        candidates = []
        for c in [locale, locale.split("-", 1)[0] if locale and "-" in locale else None, "zh-CN" if locale and locale.lower().startswith("zh") else None, self.default_locale, "en"]:
            if c and c not in candidates:
                candidates.append(c)
        for c in candidates:
            value = self.messages.get(c, {}).get(key)
            if isinstance(value, str):
                return value.format(**params) if params else value
        return default or key


class NekoPluginBase:
    def __init__(self, ctx):
        self._host_ctx = ctx
        self.ctx = ctx
        self.logger = ctx.logger
        self._static_ui_config: dict[str, Any] | None = None
        self.i18n = self._load_i18n()

    def _load_i18n(self) -> PluginI18n:
        import tomllib

        try:
            meta = tomllib.loads((self.plugin_dir / "plugin.toml").read_text(encoding="utf-8")).get("plugin", {}).get("i18n", {})
        except (OSError, tomllib.TOMLDecodeError):
            meta = {}
        folder = self.plugin_dir / str(meta.get("locales_dir") or "i18n")
        messages = {}
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            messages[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        return PluginI18n(messages, str(meta.get("default_locale") or "en"))

    @property
    def plugin_id(self) -> str:
        return str(getattr(self.ctx, "plugin_id", "plugin"))

    @property
    def plugin_dir(self) -> Path:
        return Path(self.ctx.plugin_dir)

    @property
    def config_dir(self) -> Path:
        return self.plugin_dir

    @property
    def storage_dir(self) -> Path:
        return Path(self.ctx.state_dir)

    @property
    def runtime_config_path(self) -> Path:
        return Path(self.ctx.state_dir) / "config" / "plugin.toml"

    def data_path(self, *parts: str) -> Path:
        base = Path(self.ctx.state_dir) / "data"
        return base.joinpath(*parts) if parts else base

    def cache_path(self, *parts: str) -> Path:
        base = Path(self.ctx.state_dir) / "cache"
        return base.joinpath(*parts) if parts else base

    def register_static_ui(self, directory: str = "static", *, index_file: str = "index.html", cache_control: str = "public, max-age=3600") -> bool:
        static_dir = self.config_dir / directory
        if not static_dir.is_dir() or not (static_dir / index_file).is_file():
            return False
        self._static_ui_config = {"enabled": True, "directory": str(static_dir), "index_file": index_file, "cache_control": cache_control, "plugin_id": self.plugin_id}
        return True

    def get_static_ui_config(self) -> dict[str, Any] | None:
        return self._static_ui_config
