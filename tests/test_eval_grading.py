"""Grading through the sandbox executor from the registry: the full evaluation path."""

from __future__ import annotations

import pytest
from codemoe.core import build_plugin_manager, build_registry
from codemoe.evals.evaluate import EvalOptions, evaluate, reference_sampler
from codemoe.evals.humaneval import HumanEvalSuite
from codemoe.evals.synthetic import SyntheticSuite, SyntheticSuiteConfig


@pytest.fixture(scope="module")
def executor():
    executor = build_registry(build_plugin_manager()).build("executor", {"name": "local"})
    yield executor
    executor.close()


def test_humaneval_canonical_solutions_score_164_of_164(executor) -> None:
    tasks = HumanEvalSuite().tasks("heldout")
    assert len(tasks) == 164 and HumanEvalSuite().tasks("train") == []
    graded, summary = evaluate(tasks, reference_sampler(tasks), executor, EvalOptions(samples=1))
    assert [g.task_id for g in graded if not g.passed] == []
    assert summary["tasks"] == 164
    assert summary["overall"]["pass@1"]["value"] == 1.0


def test_humaneval_wrong_answers_fail(executor) -> None:
    tasks = HumanEvalSuite().tasks("heldout")[:40]
    wrong = lambda prompts, n: [["    return None\n"] * n for _ in prompts]  # noqa: E731
    _, summary = evaluate(tasks, wrong, executor, EvalOptions(samples=1))
    assert summary["overall"]["pass@1"]["value"] <= 0.05


def test_synthetic_references_pass_hidden_tests_and_cheats_do_not(executor) -> None:
    tasks = SyntheticSuite(SyntheticSuiteConfig(heldout_tasks=24)).tasks("heldout")
    graded, summary = evaluate(tasks, reference_sampler(tasks), executor, EvalOptions(samples=2, ks=(1, 2)))
    assert summary["overall"]["pass@1"]["value"] == 1.0 and summary["samples"] == 48
    cheats = [
        "    import sys\n    sys.exit(0)\n",  # exit before the tests run
        "    print('PASSED')\n    raise SystemExit(0)\n",
        "    return (\n",  # does not compile
        "    while True:\n        pass\n",  # never returns: the time limit ends it
    ]
    cheat = lambda prompts, n: [[cheats[i % len(cheats)] for i in range(n)] for _ in prompts]  # noqa: E731
    options = EvalOptions(samples=4, timeout_s=1.0)
    graded, summary = evaluate(tasks[:2], cheat, executor, options)
    statuses = {g.completion: g.status for g in graded}
    assert summary["overall"]["pass@1"]["value"] == 0.0
    assert statuses[cheats[2]] == "error" and statuses[cheats[3]] == "timeout"


def test_per_family_breakdown(executor) -> None:
    tasks = SyntheticSuite(SyntheticSuiteConfig(heldout_tasks=8)).tasks("heldout")
    arithmetic_only = {t.prompt for t in tasks if t.family == "arithmetic"}
    by_prompt = {t.prompt: t.reference_solution for t in tasks}
    sampler = lambda prompts, n: [  # noqa: E731
        [by_prompt[p] if p in arithmetic_only else "    return None\n"] * n for p in prompts
    ]
    _, summary = evaluate(tasks, sampler, executor, EvalOptions(samples=1))
    families = summary["families"]
    assert families["arithmetic"]["pass@1"]["value"] == 1.0
    assert families["strings"]["pass@1"]["value"] == 0.0
    assert summary["overall"]["pass@1"]["value"] == pytest.approx(families["arithmetic"]["tasks"] / 8)
