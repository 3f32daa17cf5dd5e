"""The base of hack detectors: a reward component worth 1 when it finds evidence, else 0."""

from __future__ import annotations

from dataclasses import dataclass

from codemoe.sandbox.rewards.component import RewardComponent
from codemoe.sandbox.rewards.types import RewardConfig, RewardInput, RewardValue

__all__ = ["Detector", "DetectorConfig"]


@dataclass
class DetectorConfig(RewardConfig):
    """Options every hack detector accepts."""

    weight: float = -1.0  # used alone in a recipe, a detected hack costs one point


class Detector(RewardComponent):
    """A hack detector. Subclasses set ``name``, ``what`` and define ``evidence``.

    The value is 1.0 when ``evidence`` returns anything, else 0.0; the explanation quotes the first
    findings (file, line, what was seen) so a reviewer can check the verdict.
    """

    config_class = DetectorConfig
    what = "reward hacking"  # the hack, in a few words, for explanations

    def evidence(self, inp: RewardInput) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__} must define evidence()")

    def __call__(self, inp: RewardInput) -> RewardValue:
        found = self.evidence(inp)
        if not found:
            return RewardValue(self.name, 0.0, f"no sign of {self.what}")
        more = f" (+{len(found) - 2} more)" if len(found) > 2 else ""
        return RewardValue(self.name, 1.0, f"{self.what}: " + "; ".join(found[:2]) + more, tuple(found))
