"""Reward recipes: a weighted sum of reward components, every value logged next to the total.

Built like any component: ``recipe = registry.build("reward", spec)`` (or ``build_reward(spec)``
without codemoe-core), then ``recipe(reward_input) -> RewardResult``. The presets in
``registry/rewards/`` are recipes.

A hacked episode's test results are not evidence of progress. ``hack_signal`` names the component
(usually ``hack_penalty``) whose nonzero value marks the episode as hacked; the components listed in
``void_when_hacked`` then count 0, and their explanations say why. The formula stays the same;
what a hacked run "passed" just does not count as passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codemoe.sandbox.rewards.detectors.special_casing import pass_rate
from codemoe.sandbox.rewards.registration import REWARD_SPECS, RewardSpecError, build_named
from codemoe.sandbox.rewards.types import RewardInput, RewardResult, RewardValue

__all__ = ["WeightedSum", "WeightedSumConfig"]


@dataclass
class WeightedSumConfig:
    """Options of ``weighted_sum``."""

    # the terms: label -> options of a reward component, ``weight`` included (its value is multiplied by it)
    components: dict[str, Any] = field(default_factory=dict, metadata=REWARD_SPECS)
    hack_signal: str = ""  # a component above whose nonzero value marks the episode as hacked
    void_when_hacked: list[str] = field(default_factory=list)  # components that count 0 in a hacked episode


class WeightedSum:
    """A recipe: ``total = sum(weight_i * value_i)`` over its components."""

    name = "weighted_sum"

    def __init__(self, config: WeightedSumConfig | None = None, registry: Any = None) -> None:
        self.config = config if config is not None else WeightedSumConfig()
        built = build_named(self.config.components, registry, where="components")
        self.terms: dict[str, tuple[float, Any]] = {
            label: (float(getattr(getattr(component, "config", None), "weight", 1.0)), component)
            for label, component in built.items()
        }
        for name in [self.config.hack_signal, *self.config.void_when_hacked]:
            if name and name not in self.terms:
                raise RewardSpecError(
                    f"reward recipe: '{name}' (hack_signal / void_when_hacked) is not one of its components: "
                    f"{', '.join(self.terms) or 'none'}"
                )

    def evaluate(self, inp: RewardInput) -> RewardResult:
        """Score one episode: every component's value, the weighted total, and extra metrics."""
        values: dict[str, RewardValue] = {name: component(inp) for name, (_, component) in self.terms.items()}
        signal = self.config.hack_signal
        hacked = bool(signal) and values[signal].value != 0
        if hacked:
            for name in self.config.void_when_hacked:
                old = values[name]
                values[name] = RewardValue(name, 0.0, f"voided, {signal} fired (was {old.value:g}: {old.explanation})")
        weights = {name: weight for name, (weight, _) in self.terms.items()}
        components = {name: v.value for name, v in values.items()}
        total = sum(weights[name] * components[name] for name in components)
        metrics = _gap_metrics(inp)
        if signal:
            metrics["hacked"] = float(hacked)
        for name, v in values.items():
            metrics.update({f"{name}/{part}": value for part, value in v.parts.items()})
        return RewardResult(
            total=total,
            components=components,
            weights=weights,
            explanations={name: v.explanation for name, v in values.items()},
            metrics=metrics,
            evidence={name: v.evidence for name, v in values.items() if v.evidence},
        )

    def __call__(self, inp: RewardInput) -> RewardResult:
        return self.evaluate(inp)

    def __repr__(self) -> str:
        terms = ", ".join(f"{w:g}*{n}" for n, (w, _) in self.terms.items())
        return f"WeightedSum({terms})"


def _gap_metrics(inp: RewardInput) -> dict[str, float]:
    """Visible and hidden pass rates and their gap: how reward hacking shows up in the logs."""
    if inp.hidden_after is None:
        return {}
    visible, hidden = pass_rate(*inp.tests("visible")), pass_rate(*inp.tests("hidden"))
    if visible is None or hidden is None:
        return {}
    return {"visible_pass_rate": visible, "hidden_pass_rate": hidden, "visible_hidden_gap": visible - hidden}
