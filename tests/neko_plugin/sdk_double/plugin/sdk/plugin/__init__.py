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
"""

from __future__ import annotations

from pathlib import Path
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


class NekoPluginBase:
    def __init__(self, ctx):
        self._host_ctx = ctx
        self.ctx = ctx
        self.logger = ctx.logger
        self._static_ui_config: dict[str, Any] | None = None

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
