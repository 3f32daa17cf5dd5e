"""codemoe-rl-algos: SFT warm-up, the RL trainer, and the policy-gradient family as registered strategies.

Importing the package does not import torch (the plugin lists components without it); the names
below load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AdvantageInput": "codemoe.rl.advantages",
    "AdvantageOutput": "codemoe.rl.advantages",
    "Algorithm": "codemoe.rl.algorithm",
    "AlgorithmConfig": "codemoe.rl.algorithm",
    "HealthConfig": "codemoe.rl.diagnostics",
    "HealthMonitor": "codemoe.rl.diagnostics",
    "HealthWarning": "codemoe.rl.diagnostics",
    "PhaseConfig": "codemoe.rl.sft",
    "RLConfig": "codemoe.rl.trainer",
    "RLStage": "codemoe.rl.stages",
    "RLStageConfig": "codemoe.rl.stages",
    "RLTrainer": "codemoe.rl.trainer",
    "Rollouts": "codemoe.rl.rollout",
    "SFTConfig": "codemoe.rl.sft",
    "SFTStage": "codemoe.rl.stages",
    "SFTStageConfig": "codemoe.rl.stages",
    "SFTTrainer": "codemoe.rl.sft",
    "VerifierScorer": "codemoe.rl.scoring",
    "Score": "codemoe.rl.rollout",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'codemoe.rl' has no attribute '{name}'")
