"""Scoring function-level samples: run each in the sandbox against the task's visible tests, then
weigh the outcome with a reward recipe.

The executor (kind ``executor``) and the recipe (kind ``reward``) come from the registry; the
sandbox's request and reward-input types are imported inside the call, because rl-algos must not
need the sandbox package to be imported. Hidden tests are never run here: they are the
evaluation's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codemoe.rl.rollout import Score

__all__ = ["SandboxScorer"]


class SandboxScorer:
    """``scorer(tasks, outputs) -> scores`` for tasks with ``prompt``, ``visible_tests`` and ``id``."""

    def __init__(self, executor: Any, recipe: Any, *, timeout_s: float = 5.0, memory_mb: int = 1024) -> None:
        self.executor, self.recipe = executor, recipe
        self.timeout_s, self.memory_mb = timeout_s, memory_mb

    def __call__(self, tasks: Sequence[Any], outputs: Sequence[Any]) -> list[Score]:
        from codemoe.sandbox.api import ExecutionRequest, Limits
        from codemoe.sandbox.rewards.inputs import reward_input_from_results

        limits = Limits(timeout_s=self.timeout_s, cpu_s=self.timeout_s, memory_mb=self.memory_mb)
        jobs = [(task, task.prompt + sample.text) for task, out in zip(tasks, outputs) for sample in out.samples]
        requests = [
            ExecutionRequest(
                files={"program.py": program, "checks.py": task.visible_tests},
                runner="asserts",
                limits=limits,
                id=f"{task.id}#{i}",
            )
            for i, (task, program) in enumerate(jobs)
        ]
        scores = []
        for (task, program), result in zip(jobs, self.executor.run_batch(requests), strict=True):
            reward_input = reward_input_from_results(
                after=result, files_after={"program.py": program}, task_id=task.id, single_test="checks"
            )
            recipe = self.recipe(reward_input)
            scores.append(
                Score(reward=float(recipe.total), passed=result.status == "passed", components=recipe.components)
            )
        return scores
