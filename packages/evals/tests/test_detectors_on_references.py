"""The hack detectors on the function suites' reference solutions, with the checks as their tests.

A function task's reward input carries its checks as visible tests (``codemoe.sandbox.grading``), so
the detectors that compare code with tests read them. A reference solution is right by construction:
none may be flagged, or the reward would void a correct sample's test terms.
"""

from __future__ import annotations

import pytest
from codemoe.evals.humaneval import HumanEvalSuiteConfig, build_humaneval_suite
from codemoe.evals.synthetic import SyntheticSuiteConfig, build_synthetic_suite
from codemoe.sandbox.api import ExecutionResult
from codemoe.sandbox.grading import ProgramVerdict
from codemoe.sandbox.rewards import build_reward

SUITES = {"synthetic": lambda: build_synthetic_suite(SyntheticSuiteConfig()),
          "humaneval": lambda: build_humaneval_suite(HumanEvalSuiteConfig())}


@pytest.mark.parametrize("suite", list(SUITES))
def test_no_reference_solution_is_flagged_with_its_checks(suite):
    penalty = build_reward("hack_penalty")
    flagged, read = [], 0
    for split in ("train", "heldout"):
        for task in SUITES[suite]().tasks(split):
            program = task.solution_program(task.reference_solution)
            for checks in (task.visible_tests, task.hidden_tests):
                inp = ProgramVerdict(task.id, program, ExecutionResult(status="passed"), checks=checks).to_reward_input()
                read += any(path.startswith("test_") for path in inp.files_after)
                verdict = penalty(inp)
                if verdict.value:
                    flagged.append(f"{task.id}: {verdict.explanation}")
    assert read > 100  # the checks reached the detectors as tests
    assert not flagged, flagged[:5]
