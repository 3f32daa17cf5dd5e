"""Scoring function-level samples: each program checked against the task's visible tests by the
verifier (kind ``executor``), the verdict weighed by the reward recipe (kind ``reward``).

Both come from the registry and meet this module only through ``codemoe.core.contracts``: it names
what to check (:class:`~codemoe.core.contracts.ProgramCheck`), the verifier decides how. Hidden tests
are never run here: they are the evaluation's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codemoe.core.contracts import ProgramCheck, Verifier
from codemoe.rl.rollout import Score

__all__ = ["VerifierScorer", "logged_values"]


def logged_values(recipe: Any) -> dict[str, float]:
    """What the trainer logs of a recipe's result (``reward/<name>``, the step's mean): every
    component's value and the recipe's extra metrics (``hacked``, each hack detector's
    ``hack_penalty/<detector>``), which are not part of the total."""
    return {**recipe.components, **getattr(recipe, "metrics", {})}


class VerifierScorer:
    """``scorer(tasks, outputs) -> scores`` for tasks with ``prompt``, ``visible_tests`` and ``id``."""

    def __init__(self, verifier: Verifier, recipe: Any, *, timeout_s: float = 5.0, memory_mb: int = 1024) -> None:
        self.verifier, self.recipe = verifier, recipe
        self.timeout_s, self.memory_mb = timeout_s, memory_mb

    def __call__(self, tasks: Sequence[Any], outputs: Sequence[Any]) -> list[Score]:
        programs = [(task, task.prompt + sample.text) for task, out in zip(tasks, outputs) for sample in out.samples]
        checks = [
            ProgramCheck(task_id=task.id, program=program, tests=task.visible_tests, index=i)
            for i, (task, program) in enumerate(programs)
        ]
        verdicts = self.verifier.check_programs(checks, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        scores = []
        for verdict in verdicts:
            recipe = self.recipe(verdict.to_reward_input())
            scores.append(Score(reward=float(recipe.total), passed=verdict.passed, components=logged_values(recipe)))
        return scores
