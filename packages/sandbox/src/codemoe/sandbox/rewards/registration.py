"""The reward components codemoe ships, their registration, and building them without codemoe-core.

:func:`register_rewards` puts every built-in component into a registry (kind ``reward``).
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

__all__ = [
    "REWARDS",
    "REWARD_SPECS",
    "BuiltinRewards",
    "RewardSpecError",
    "build_named",
    "build_reward",
    "register_rewards",
    "spec_name",
]

# Field metadata marking a config field that holds a mapping of reward specs (label -> options);
# a component with such a field is given the registry when it is built.
REWARD_SPECS = {"reward_specs": True}

_M = "codemoe.sandbox.rewards"

# name -> (factory, config class, summary). Factories and configs are "module:attr" strings so that
# listing components imports nothing.
REWARDS: dict[str, tuple[str, str, str]] = {
    "compile_errors": (
        f"{_M}.verifiable:CompileErrors",
        f"{_M}.verifiable:CompileErrorsConfig",
        "changed Python files that do not byte-compile, plus build errors (count)",
    ),
    "compile_success": (
        f"{_M}.verifiable:CompileSuccess",
        f"{_M}.types:RewardConfig",
        "1 when the change compiles and builds, else 0",
    ),
    "test_pass_rate": (
        f"{_M}.verifiable:TestPassRate",
        f"{_M}.verifiable:TestsConfig",
        "fraction of the (visible) tests passing after the change",
    ),
    "hidden_pass_rate": (
        f"{_M}.verifiable:HiddenPassRate",
        f"{_M}.verifiable:HiddenPassRateConfig",
        "fraction of the hidden tests passing (evaluation)",
    ),
    "newly_passing": (
        f"{_M}.verifiable:NewlyPassing",
        f"{_M}.verifiable:NewlyPassingConfig",
        "tests failing before the change and passing after (count)",
    ),
    "regressions": (
        f"{_M}.verifiable:Regressions",
        f"{_M}.verifiable:RegressionsConfig",
        "tests passing before the change and failing or gone after (count)",
    ),
    "all_pass": (
        f"{_M}.verifiable:AllPass",
        f"{_M}.verifiable:AllPassConfig",
        "1 when every test passes after the change, else 0",
    ),
    "task_complete": (
        f"{_M}.verifiable:TaskComplete",
        f"{_M}.verifiable:TestsConfig",
        "1 when the change compiles and every test passes, else 0",
    ),
    "step_cost": (f"{_M}.verifiable:StepCost", f"{_M}.verifiable:StepCostConfig", "actions the agent took (count)"),
    "format_errors": (
        f"{_M}.verifiable:FormatErrors",
        f"{_M}.verifiable:FormatErrorsConfig",
        "malformed tool calls (count)",
    ),
    "complexity": (
        f"{_M}.quality:Complexity",
        f"{_M}.quality:ComplexityConfig",
        "cyclomatic complexity over a threshold in changed functions (radon)",
    ),
    "lint_warnings": (
        f"{_M}.quality:LintWarnings",
        f"{_M}.quality:LintWarningsConfig",
        "ruff warnings in the changed files (count)",
    ),
    "static_rules": (
        f"{_M}.quality:StaticRules",
        f"{_M}.quality:StaticRulesConfig",
        "violations of codemoe's static rules: bare except, eval, global ... (count)",
    ),
    "test_tampering": (
        f"{_M}.detectors:TestTampering",
        f"{_M}.detectors:TestTamperingConfig",
        "hack detector: test files modified, deleted or shadowed (conftest, sitecustomize)",
    ),
    "weakened_asserts": (
        f"{_M}.detectors:WeakenedAsserts",
        f"{_M}.detectors:DetectorConfig",
        "hack detector: asserts removed or always true, skips inserted, failures swallowed",
    ),
    "hardcoded_tests": (
        f"{_M}.detectors:HardcodedTests",
        f"{_M}.detectors:DetectorConfig",
        "hack detector: test names, inputs or expected outputs hard-coded in the solution",
    ),
    "special_casing": (
        f"{_M}.detectors:SpecialCasing",
        f"{_M}.detectors:SpecialCasingConfig",
        "hack detector: the solution compares its inputs with the visible tests' inputs",
    ),
    "early_exit": (
        f"{_M}.detectors:EarlyExit",
        f"{_M}.detectors:DetectorConfig",
        "hack detector: early exit or faked test output (executor nonce, exit calls)",
    ),
    "test_state": (
        f"{_M}.detectors:TestOnlyState",
        f"{_M}.detectors:DetectorConfig",
        "hack detector: state that outlives a call and makes the next call answer differently",
    ),
    "runner_tampering": (
        f"{_M}.detectors:RunnerTampering",
        f"{_M}.detectors:DetectorConfig",
        "hack detector: code reaching into the test runner in-process (builtins, frames, fds, hooks, conftest)",
    ),
    "hack_penalty": (
        f"{_M}.penalty:HackPenalty",
        f"{_M}.penalty:HackPenaltyConfig",
        "number of hack detectors that found evidence",
    ),
    "weighted_sum": (
        f"{_M}.recipe:WeightedSum",
        f"{_M}.recipe:WeightedSumConfig",
        "recipe: weighted sum of reward components, each value logged next to the total",
    ),
}


def register_rewards(registry: Any) -> None:
    """Register every built-in reward component (kind ``reward``)."""
    for name, (factory, config, summary) in REWARDS.items():
        registry.register("reward", name, factory, config, summary=summary)


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
        if kind != "reward" or name not in REWARDS:
            raise RewardSpecError(
                f"'{where or kind}': unknown {kind} '{name}'. Built-in reward components: {', '.join(REWARDS)}. "
                "Pass registry=<codemoe registry> to use components other plugins register."
            )
        factory, config, _ = REWARDS[name]
        return _Entry(factory, config)

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
