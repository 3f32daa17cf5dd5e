"""Building reward components from their specs, with or without codemoe-core.

The built-in components (kind ``reward``) are rows of the sandbox plugin's registration table
(:data:`codemoe.sandbox.plugin.COMPONENTS`).

Composite components (a recipe, the hack penalty) hold their parts as a mapping ``label -> options``
(``{test_pass_rate: {weight: 0.3}}``; a ``name`` option picks a component other than the label, and
``null`` drops the entry), so that every option can be overridden on the command line
(``reward.components.test_pass_rate.weight=0.4``). They build their parts with :func:`build_named`,
which uses the registry they were given (so third-party components work inside them) or, when none
was given, :class:`BuiltinRewards`: the same table, for the sandbox installed without codemoe-core.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codemoe.sandbox.plugin import COMPONENTS

__all__ = [
    "REWARD_SPECS",
    "BuiltinRewards",
    "RewardSpecError",
    "build_named",
    "build_reward",
    "spec_name",
]

# Field metadata marking a config field that holds a mapping of reward specs (label -> options);
# a component with such a field is given the registry when it is built, and codemoe-core's config
# validation checks every entry at start-up ("kind" and "by_label" are the words it reads).
REWARD_SPECS = {"reward_specs": True, "kind": "reward", "by_label": True}

# name -> (factory, config): the reward rows of the sandbox plugin's one registration table.
_BUILTIN: dict[str, tuple[str, str]] = {
    name: (factory, config) for kind, name, factory, config, _ in COMPONENTS if kind == "reward"
}


class RewardSpecError(ValueError):
    """A reward spec names an unknown component or option; the message lists the valid ones."""


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class _Entry:
    factory: str
    config: str

    def config_class(self) -> type:
        return _resolve(self.config)


class BuiltinRewards:
    """A stand-in for the codemoe registry that knows the built-in reward components only."""

    def get(self, kind: str, name: str, *, where: str = "") -> _Entry:
        if kind != "reward" or name not in _BUILTIN:
            raise RewardSpecError(
                f"'{where or kind}': unknown {kind} '{name}'. Built-in reward components: {', '.join(_BUILTIN)}. "
                "Pass registry=<codemoe registry> to use components other plugins register."
            )
        return _Entry(*_BUILTIN[name])

    def build(self, kind: str, spec: Mapping[str, Any] | str, *, where: str = "", **kwargs: Any) -> Any:
        name = spec if isinstance(spec, str) else spec.get("name")
        entry = self.get(kind, str(name), where=where)
        cls = entry.config_class()
        values = {} if isinstance(spec, str) else {k: v for k, v in spec.items() if k != "name"}
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise RewardSpecError(f"'{where}': {kind} '{name}' has no option(s) {unknown}; it accepts {sorted(fields)}")
        return _resolve(entry.factory)(cls(**values), **kwargs)


def spec_name(spec: Mapping[str, Any] | str) -> str:
    """The component name a reward spec selects (a bare name or ``spec["name"]``)."""
    return spec if isinstance(spec, str) else str(spec.get("name", ""))


def build_reward(spec: Mapping[str, Any] | str, registry: Any = None, *, where: str = "reward") -> Any:
    """Build one reward component from its spec.

    A component whose config holds reward specs (a field with ``metadata=REWARD_SPECS``) is given the
    registry too, so that it can build them the same way.
    """
    registry = registry if registry is not None else BuiltinRewards()
    cls = registry.get("reward", spec_name(spec), where=where).config_class()
    nested = cls is not None and any(f.metadata.get("reward_specs") for f in dataclasses.fields(cls))
    kwargs = {"registry": registry} if nested else {}
    return registry.build("reward", spec, where=where, **kwargs)


def build_named(specs: Mapping[str, Any], registry: Any = None, *, where: str) -> dict[str, Any]:
    """Build ``label -> options`` into ``label -> component``; ``None`` options drop the entry."""
    built = {}
    for label, options in specs.items():
        if options is None:
            continue
        if not isinstance(options, Mapping):
            raise RewardSpecError(
                f"'{where}.{label}': expected a mapping of options (or null to drop it), got {options!r}"
            )
        built[str(label)] = build_reward({"name": str(label), **options}, registry, where=f"{where}.{label}")
    return built
