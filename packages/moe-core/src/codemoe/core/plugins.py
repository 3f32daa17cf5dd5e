"""Building the plugin manager and the registry.

Nothing happens at import: :func:`build_plugin_manager` adds the hook specs, loads every
distribution's ``codemoe`` entry point (codemoe's own packages use exactly the same path as a third
party), registers them, and calls ``check_pending()`` so that a misspelled hook fails at start-up.
``CODEMOE_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point name.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy
from codemoe.core import hookspecs
from codemoe.core.errors import PluginError, did_you_mean
from codemoe.core.hookspecs import PROJECT
from codemoe.core.registry import Registry

if TYPE_CHECKING:  # runs.py imports this module
    from codemoe.core.runs import RunContext, StageInfo

__all__ = [
    "ENTRY_POINT_GROUP",
    "Hooks",
    "PluginInfo",
    "PluginManager",
    "build_plugin_manager",
    "build_registry",
    "plugin_infos",
    "preset_dirs",
]

ENTRY_POINT_GROUP = "codemoe"
DISABLE_ENV = "CODEMOE_DISABLE_PLUGINS"


def disabled_plugins(env: str | None = None) -> set[str]:
    """Plugin names listed in ``CODEMOE_DISABLE_PLUGINS`` (comma separated)."""
    raw = os.environ.get(DISABLE_ENV, "") if env is None else env
    return {name.strip() for name in raw.split(",") if name.strip()}


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus the distribution each entry-point plugin came from."""

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self.distributions: dict[str, importlib.metadata.Distribution] = {}


def build_plugin_manager(
    extra_plugins: Iterable[tuple[str, object]] = (),
    *,
    entry_points: bool = True,
) -> PluginManager:
    """Build a checked plugin manager.

    :param extra_plugins: (name, plugin object) pairs registered after the entry points, for
        tests and embedding applications.
    :param entry_points: load the ``codemoe`` entry-point group (turn off only in tests).
    :raises PluginError: a plugin fails to import, or implements a hook that has no spec.
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    for name in disabled_plugins():
        pm.set_blocked(name)
    if entry_points:
        _load_entry_points(pm)
    for name, plugin in extra_plugins:
        if not pm.is_blocked(name):
            _register(pm, plugin, name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(_pending_message(pm, exc)) from exc
    return pm


def _load_entry_points(pm: PluginManager) -> None:
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if pm.is_blocked(ep.name) or pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party plugin must say who it is
            dist = ep.dist.name if ep.dist else "?"
            raise PluginError(
                f"plugin '{ep.name}' ({ep.value}, distribution {dist}) failed to import: "
                f"{type(exc).__name__}: {exc}. Fix it, or set {DISABLE_ENV}={ep.name} to skip it."
            ) from exc
        _register(pm, plugin, ep.name)
        if ep.dist is not None:
            pm.distributions[ep.name] = ep.dist


def _register(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin '{name}': {exc}") from exc
    except ValueError as exc:
        raise PluginError(f"plugin '{name}' cannot be registered: {exc}") from exc


def _pending_message(pm: pluggy.PluginManager, exc: pluggy.PluginValidationError) -> str:
    known = sorted(name for name in dir(pm.hook) if name.startswith("codemoe_") and getattr(pm.hook, name).has_spec())

    lines = []
    for name in dir(pm.hook):
        caller = getattr(pm.hook, name)
        if not isinstance(caller, pluggy.HookCaller) or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            lines.append(
                f"plugin '{impl.plugin_name}' implements unknown hook '{name}'{did_you_mean(name, known)}"
            )
    detail = "; ".join(lines) or str(exc)
    return f"{detail}. Known hooks: {', '.join(known)}."


def build_registry(pm: pluggy.PluginManager) -> Registry:
    """Call every plugin's ``codemoe_register_components`` and return the filled registry.

    Plugins are called one at a time (in registration order) so each component records the plugin
    that registered it, and a duplicate (kind, name) names both plugins. The registry also holds
    the plugins' shipped preset folders (:func:`preset_dirs`), where nested presets are found.
    """
    registry = Registry()
    for impl in pm.hook.codemoe_register_components.get_hookimpls():
        with registry.registering_as(impl.plugin_name):
            impl.function(**{arg: registry for arg in impl.argnames})
    registry.preset_dirs = preset_dirs(pm)
    return registry


def preset_dirs(pm: pluggy.PluginManager) -> list[Path]:
    """The ``presets/`` folder next to each plugin's module, in registration order.

    A package ships its pipelines and presets as package data there (``codemoe/core/presets/
    models/tiny.yaml``), so an installed package finds them without a checkout; a third-party
    plugin does the same. The overlay folder (a checkout's ``registry/``) comes before them.
    """
    out = []
    for _, plugin in pm.list_name_plugin():
        module = inspect.getmodule(plugin)
        source = getattr(module, "__file__", None)
        folder = Path(source).parent / "presets" if source else None
        if folder is not None and folder.is_dir() and folder not in out:
            out.append(folder)
    return out


class Hooks:
    """Typed, keyword-only facade over ``pm.hook`` for the lifecycle hooks.

    Each method calls the spec of the same name in :mod:`codemoe.core.hookspecs` (``before_stage``
    calls ``codemoe_before_stage``), so a call site is type-checked against the spec's types.
    """

    def __init__(self, pm: PluginManager) -> None:
        self.pm = pm
        self._hook = pm.hook

    def before_stage(self, *, ctx: RunContext, stage: StageInfo) -> None:
        self._hook.codemoe_before_stage(ctx=ctx, stage=stage)

    def after_stage(self, *, ctx: RunContext, stage: StageInfo, result: dict[str, Any]) -> None:
        self._hook.codemoe_after_stage(ctx=ctx, stage=stage, result=result)

    def after_train_step(self, *, ctx: RunContext, stage: StageInfo, step: int, metrics: dict[str, float]) -> None:
        self._hook.codemoe_after_train_step(ctx=ctx, stage=stage, step=step, metrics=metrics)

    def after_rollout_batch(self, *, ctx: RunContext, stage: StageInfo, step: int, batch: object) -> None:
        self._hook.codemoe_after_rollout_batch(ctx=ctx, stage=stage, step=step, batch=batch)


@dataclass
class PluginInfo:
    """What ``codemoe plugins`` prints for one plugin."""

    name: str
    distribution: str
    version: str
    hooks: list[str]
    components: list[str] = field(default_factory=list)


def plugin_infos(pm: PluginManager, registry: Registry | None = None) -> list[PluginInfo]:
    """One :class:`PluginInfo` per registered plugin, sorted by name."""
    out = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist = pm.distributions.get(name)
        hooks = sorted(caller.name for caller in (pm.get_hookcallers(plugin) or []))
        components = [
            f"{c.kind}:{c.name}" for c in (registry.components() if registry else []) if c.plugin == name
        ]
        out.append(
            PluginInfo(
                name=name,
                distribution=dist.metadata["Name"] if dist else "-",
                version=dist.version if dist else "-",
                hooks=hooks,
                components=components,
            )
        )
    return sorted(out, key=lambda info: info.name)
