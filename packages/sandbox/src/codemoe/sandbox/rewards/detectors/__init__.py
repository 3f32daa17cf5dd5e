"""Hack detectors: reward components worth 1 when they find evidence of reward hacking, else 0.

Each quotes its evidence (file, line, what it saw) in the explanation. ``hack_penalty`` sums them.
"""

from codemoe.sandbox.rewards.detectors.base import Detector, DetectorConfig
from codemoe.sandbox.rewards.detectors.early_exit import EarlyExit
from codemoe.sandbox.rewards.detectors.hardcoded import HardcodedTests
from codemoe.sandbox.rewards.detectors.memorised import MemorisedAnswers, MemorisedAnswersConfig
from codemoe.sandbox.rewards.detectors.module_state import TestOnlyState
from codemoe.sandbox.rewards.detectors.runner_tampering import RunnerTampering
from codemoe.sandbox.rewards.detectors.special_casing import SpecialCasing, SpecialCasingConfig
from codemoe.sandbox.rewards.detectors.tampering import TestTampering, TestTamperingConfig
from codemoe.sandbox.rewards.detectors.weakened import WeakenedAsserts

__all__ = [
    "Detector",
    "DetectorConfig",
    "EarlyExit",
    "HardcodedTests",
    "MemorisedAnswers",
    "MemorisedAnswersConfig",
    "RunnerTampering",
    "SpecialCasing",
    "SpecialCasingConfig",
    "TestOnlyState",
    "TestTampering",
    "TestTamperingConfig",
    "WeakenedAsserts",
]
