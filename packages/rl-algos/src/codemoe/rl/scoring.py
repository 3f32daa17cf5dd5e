"""Scoring function-level samples: each program checked against the task's visible tests by the
verifier (kind ``executor``), the verdict weighed by the reward recipe (kind ``reward``).

Both come from the registry and meet this module only through ``codemoe.core.contracts``: it names
what to check (:class:`~codemoe.core.contracts.ProgramCheck`), the verifier decides how. Hidden tests
are never run here: they are the evaluation's.

The module does not import torch (a scorer in a child process of its own,
:mod:`codemoe.rl.scoring_process`, runs it without): :meth:`VerifierScorer.weigh` works on plain
values, and :meth:`VerifierScorer.__call__` wraps its answers as the trainer's ``Score``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codemoe.core.contracts import ProgramCheck, Verifier

__all__ = ["ScoringItem", "VerifierScorer", "Weighing", "logged_values", "scoring_items"]

# one task's samples to score: (task id, prompt, visible tests, each sample's completion text)
ScoringItem = tuple[str, str, str, list[str]]
# one sample's score as plain values: (reward, passed, logged components)
Weighed = tuple[float, bool, dict[str, float]]


def scoring_items(tasks: Sequence[Any], outputs: Sequence[Any]) -> list[ScoringItem]:
    """What a scorer needs of ``tasks`` and the engine's ``outputs``, as plain values (no hidden
    test, no token id): the program of a sample is its task's prompt followed by its text."""
    return [
        (task.id, task.prompt, task.visible_tests, [sample.text for sample in out.samples])
        for task, out in zip(tasks, outputs, strict=True)
    ]


def logged_values(recipe: Any) -> dict[str, float]:
    """What the trainer logs of a recipe's result (``reward/<name>``, the step's mean): every
    component's value and the recipe's extra metrics (``hacked``, each hack detector's
    ``hack_penalty/<detector>``), which are not part of the total."""
    return {**recipe.components, **getattr(recipe, "metrics", {})}


class Weighing:
    """The trainer's scorer contract, ``scorer(tasks, outputs) -> scores``, over a subclass's
    :meth:`weigh` of plain values (in this process, or in a child's)."""

    def weigh(self, items: Sequence[ScoringItem]) -> list[Weighed]:
        raise NotImplementedError

    def __call__(self, tasks: Sequence[Any], outputs: Sequence[Any]) -> list[Any]:
        from codemoe.rl.rollout import Score

        return [
            Score(reward=reward, passed=passed, components=components)
            for reward, passed, components in self.weigh(scoring_items(tasks, outputs))
        ]


class VerifierScorer(Weighing):
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

    def weigh(self, items: Sequence[ScoringItem]) -> list[Weighed]:
        """One ``(reward, passed, components)`` per sample of ``items``, in order."""
        programs = [(task_id, tests, prompt + text) for task_id, prompt, tests, texts in items for text in texts]
        first: dict[tuple[str, str, str], int] = {}  # (task id, tests, program) -> its check's number
        checks, of_sample = [], []
        for key in programs:
            task_id, tests, program = key
            if not self.once_per_program or key not in first:
                first[key] = len(checks)
                checks.append(ProgramCheck(task_id=task_id, program=program, tests=tests, index=len(checks)))
            of_sample.append(first[key])
        verdicts = self.verifier.check_programs(checks, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        self.checked, self.samples = self.checked + len(checks), self.samples + len(programs)
        weighed: dict[int, Weighed] = {}  # a check's score: the recipe (its detectors parse the program) runs once
        scores = []
        for i in of_sample:
            if i not in weighed:
                verdict = verdicts[i]
                recipe = self.recipe(verdict.to_reward_input())
                weighed[i] = (float(recipe.total), bool(verdict.passed), logged_values(recipe))
            reward, passed, components = weighed[i]
            scores.append((reward, passed, dict(components)))
        return scores
