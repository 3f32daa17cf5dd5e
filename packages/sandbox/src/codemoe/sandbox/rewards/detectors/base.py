"""The base of hack detectors: a reward component worth 1 when it finds evidence, else 0."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
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
        try:
            found = self.evidence(inp)
        except RecursionError:  # valid code nested past the interpreter's depth (a sum of 500 terms)
            found = _deeper(self.evidence, inp)
        if not found:
            return RewardValue(self.name, 0.0, f"no sign of {self.what}")
        more = f" (+{len(found) - 2} more)" if len(found) > 2 else ""
        return RewardValue(self.name, 1.0, f"{self.what}: " + "; ".join(found[:2]) + more, tuple(found))


DEEP_LIMIT = 50_000  # the recursion limit a detector's second reading runs under
_DEEP = threading.Lock()


def _deeper(evidence: Callable[[RewardInput], list[str]], inp: RewardInput) -> list[str]:
    """``evidence`` read again under a higher recursion limit (the interpreter's own Python calls,
    which are what a detector's walk of the tree recurses through, take no C stack); code nested
    deeper still is evidence itself: what a detector cannot read, it cannot clear."""
    with _DEEP:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, DEEP_LIMIT))
        try:
            return evidence(inp)
        except RecursionError:
            return [f"the change's code is nested deeper than {DEEP_LIMIT} calls of this detector can read"]
        finally:
            sys.setrecursionlimit(limit)
