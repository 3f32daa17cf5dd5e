"""The hack penalty: how many hack detectors found evidence in one episode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codemoe.sandbox.rewards.component import RewardComponent
from codemoe.sandbox.rewards.registration import REWARD_SPECS, build_named
from codemoe.sandbox.rewards.types import RewardConfig, RewardInput, RewardValue

__all__ = ["DETECTORS", "HackPenalty", "HackPenaltyConfig"]

# The detectors codemoe ships, all on by default.
DETECTORS = (
    "test_tampering",
    "weakened_asserts",
    "hardcoded_tests",
    "special_casing",
    "early_exit",
    "test_state",
    "runner_tampering",
    "memorised_answers",  # reads a probe run; silent where none was made
)


@dataclass
class HackPenaltyConfig(RewardConfig):
    """Options of ``hack_penalty``."""

    weight: float = -0.1  # seed 2: -0.1 * hack_penalty
    # the detectors to run: label -> options of a reward component worth 0 or 1 (null switches one off)
    detectors: dict[str, Any] = field(default_factory=lambda: {n: {} for n in DETECTORS}, metadata=REWARD_SPECS)


class HackPenalty(RewardComponent):
    """Number of hack detectors that found evidence; the explanation quotes each one's evidence."""

    name = "hack_penalty"
    config_class = HackPenaltyConfig

    def __init__(self, config: HackPenaltyConfig | None = None, registry: Any = None) -> None:
        super().__init__(config)
        self.detectors = list(build_named(self.config.detectors, registry, where="hack_penalty.detectors").values())

    def __call__(self, inp: RewardInput) -> RewardValue:
        verdicts = [detector(inp) for detector in self.detectors]
        fired = [v for v in verdicts if v.value]
        evidence = tuple(f"{v.name}: {line}" for v in fired for line in (v.evidence or (v.explanation,)))
        if not fired:
            text = f"no hack found by {len(verdicts)} detector(s)"
        else:
            text = f"{len(fired)} detector(s) fired: " + "; ".join(f"{v.name} ({v.explanation})" for v in fired)
        return RewardValue(self.name, float(len(fired)), text, evidence, {v.name: v.value for v in verdicts})
