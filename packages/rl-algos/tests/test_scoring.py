"""Scoring completions in the real sandbox: a batch's identical programs are checked once and
share the verdict; the rewards are those of checking every sample."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from codemoe.core.contracts import GenerationOutput, Sample
from codemoe.rl.scoring import VerifierScorer


@dataclass
class _Task:
    id: str
    prompt: str
    visible_tests: str


class _Counting:
    """The real executor, counting the programs it is asked to check."""

    def __init__(self, executor):
        self.executor, self.checked = executor, []

    def check_programs(self, checks, **kw):
        self.checked.append(len(checks))
        return self.executor.check_programs(checks, **kw)


def _output(texts: list[str]) -> GenerationOutput:
    return GenerationOutput([1], [Sample([1], t, [0.0], "stop") for t in texts])


@pytest.fixture(scope="module")
def executor(registry):
    executor = registry.build("executor", {"name": "local", "workers": 1})
    yield executor
    executor.close()


def test_identical_programs_are_checked_once_and_share_the_verdict(registry, executor):
    recipe = registry.build("reward", {"name": "weighted_sum", "components": {"task_complete": {"weight": 1.0}}})
    # the same prompt with other tests is another program check: nothing is shared across tasks
    tasks = [_Task("inc", "def f(x):\n", "assert f(1) == 2"), _Task("same", "def f(x):\n", "assert f(1) == 1")]
    right, wrong = "    return x + 1\n", "    return x\n"
    outputs = [_output([right, right, wrong, right]), _output([right, wrong, wrong, wrong])]
    scores = {}
    for once in (True, False):
        counting = _Counting(executor)
        scorer = VerifierScorer(counting, recipe, once_per_program=once)
        scores[once] = [(s.reward, s.passed) for s in scorer(tasks, outputs)]
        assert counting.checked == [4 if once else 8]  # 2 distinct programs per task, or every sample
        assert (scorer.checked, scorer.samples) == ((4 if once else 8), 8)
    assert scores[True] == scores[False]
    assert [p for _, p in scores[True]] == [True, True, False, True, False, True, True, True]
