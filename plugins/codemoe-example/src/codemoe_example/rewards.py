"""A reward component from a plugin: ``concise``, for use inside a recipe such as ``weighted_sum``.

A reward component is a factory ``Component(config)`` whose object is called with the sandbox's
``RewardInput`` (test outcomes before and after, the files before and after, the tool-call log) and
returns a ``RewardValue`` (name, value, one-line explanation). Inside a recipe it is one more part::

    reward:
      name: weighted_sum
      components:
        task_complete: {weight: 1.0}
        concise: {weight: 0.1, max_lines: 40}

The recipe is built with the run's registry, so it finds this component by name; the options are
checked at start-up like any built-in's. Only building the value needs codemoe-sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ConciseConfig:
    """Options of the ``concise`` reward component."""

    weight: float = 1.0  # its weight inside a recipe
    max_lines: int = 40  # lines a change may add at full value


class Concise:
    """1.0 for a change that adds at most ``max_lines`` lines, ``max_lines / added`` beyond that."""

    name = "concise"

    def __init__(self, config: ConciseConfig | None = None) -> None:
        self.config = config or ConciseConfig()

    def __call__(self, inp: Any) -> Any:
        from codemoe.sandbox.rewards.types import RewardValue

        before = inp.files_before
        added = sum(
            max(0, len(text.splitlines()) - len(before.get(path, "").splitlines()))
            for path, text in inp.files_after.items()
        )
        value = 1.0 if added <= self.config.max_lines else self.config.max_lines / added
        return RewardValue(self.name, value, f"{added} lines added (full value up to {self.config.max_lines})")
