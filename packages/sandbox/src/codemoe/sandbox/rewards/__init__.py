"""Reward components and reward-hacking defenses (kind ``reward`` in the codemoe registry).

A component reads a :class:`RewardInput` (tests before/after, visible and hidden, files, tool calls,
steps) and returns a :class:`RewardValue`; a recipe (``weighted_sum``, the presets in
``registry/rewards/``) weighs components into a :class:`RewardResult`::

    recipe = registry.build("reward", spec)      # or build_reward(spec) without codemoe-core
    result = recipe(reward_input)                # result.total, result.components, result.explanations
"""

from codemoe.sandbox.rewards.component import RewardComponent
from codemoe.sandbox.rewards.inputs import reward_input_from_results
from codemoe.sandbox.rewards.registration import (
    BuiltinRewards,
    RewardSpecError,
    build_reward,
)
from codemoe.sandbox.rewards.types import (
    DEFAULT_TEST_PATTERNS,
    RewardConfig,
    RewardInput,
    RewardResult,
    RewardValue,
    ToolCall,
    outcome_passed,
)

__all__ = [
    "DEFAULT_TEST_PATTERNS",
    "BuiltinRewards",
    "RewardComponent",
    "RewardConfig",
    "RewardInput",
    "RewardResult",
    "RewardSpecError",
    "RewardValue",
    "ToolCall",
    "build_reward",
    "outcome_passed",
    "reward_input_from_results",
]
