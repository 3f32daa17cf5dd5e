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
    """``scorer(tasks, outputs) -> scores`` for tasks with ``prompt``, ``visible_tests`` and ``id``.

    ``once_per_program`` (the default): samples of a batch whose whole program is the same (a
    group's samples often are: 4.5 distinct programs in 8 at the quickstart's SFT checkpoint, fewer
    as RL sharpens the policy) are checked once and share that verdict, so the sandbox runs only the
    distinct programs, and the reward recipe (whose hack detectors parse the program) weighs each
    verdict once. A check is a function of the program and the tests, so this changes no reward
    unless the program's outcome is itself random (it then gets one draw for all its copies).
    ``False`` checks every sample on its own.
    """

    def __init__(
        self,
        verifier: Verifier,
        recipe: Any,
        *,
        timeout_s: float = 5.0,
        memory_mb: int = 1024,
        once_per_program: bool = True,
    ) -> None:
        self.verifier, self.recipe = verifier, recipe
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.once_per_program = once_per_program
        self.checked = self.samples = 0  # programs sent to the verifier and samples scored, over the run

    def __call__(self, tasks: Sequence[Any], outputs: Sequence[Any]) -> list[Score]:
        programs = [(task, task.prompt + sample.text) for task, out in zip(tasks, outputs) for sample in out.samples]
        first: dict[tuple[str, str, str], int] = {}  # (task id, tests, program) -> its check's number
        checks, of_sample = [], []
        for task, program in programs:
            key = (task.id, task.visible_tests, program)
            if not self.once_per_program or key not in first:
                first[key] = len(checks)
                checks.append(ProgramCheck(task_id=task.id, program=program, tests=task.visible_tests, index=len(checks)))
            of_sample.append(first[key])
        verdicts = self.verifier.check_programs(checks, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        self.checked, self.samples = self.checked + len(checks), self.samples + len(programs)
        weighed: dict[int, Score] = {}  # a check's score: the recipe (its detectors parse the program) runs once
        scores = []
        for i in of_sample:
            if i not in weighed:
                verdict = verdicts[i]
                recipe = self.recipe(verdict.to_reward_input())
                weighed[i] = Score(reward=float(recipe.total), passed=verdict.passed, components=logged_values(recipe))
            score = weighed[i]
            scores.append(Score(reward=score.reward, passed=score.passed, components=dict(score.components)))
        return scores
