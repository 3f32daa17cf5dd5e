"""The synthetic suite: shape of each task, split without leakage, reference solutions correct."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from codemoe.core import build_plugin_manager, build_registry
from codemoe.evals import CodeTask, Suite, SyntheticSuite, SyntheticSuiteConfig, program
from codemoe.evals.synthetic_families import FAMILIES


def _passes(task: CodeTask, completion: str, tests: str) -> bool:
    """Run the graded program in-process (suite-generated code only)."""
    try:
        exec(compile(program(task, completion, tests), task.id, "exec"), {})
    except Exception:
        return False
    return True


@pytest.fixture(scope="module")
def suite() -> SyntheticSuite:
    return SyntheticSuite()


def test_every_task_has_two_examples_and_at_least_ten_hidden_tests(suite: SyntheticSuite) -> None:
    tasks = suite.tasks("train") + suite.tasks("heldout")
    assert isinstance(suite, Suite)
    assert len(tasks) > 400
    for task in tasks:
        assert task.prompt.count(">>> ") == 2
        assert task.visible_tests.count("assert ") == 2
        assert task.hidden_tests.count("assert ") >= 10
        assert task.prompt.startswith(f"def {task.entry_point}(")
        # short, regular bodies a tiny model can learn
        assert task.reference_solution.count("\n") <= 3


def test_reference_solutions_pass_and_other_functions_fail(suite: SyntheticSuite) -> None:
    tasks = suite.tasks("heldout")
    for task in tasks:
        assert _passes(task, task.reference_solution, task.visible_tests + task.hidden_tests), task.id
    wrong = sum(
        _passes(task, other.reference_solution.replace(other.entry_point, task.entry_point), task.hidden_tests)
        for task, other in itertools.pairwise(tasks)
    )
    assert wrong == 0


def test_splits_share_no_function_and_are_deterministic(suite: SyntheticSuite) -> None:
    train, heldout = suite.tasks("train"), suite.tasks("heldout")
    assert {t.entry_point for t in train}.isdisjoint(t.entry_point for t in heldout)
    assert {t.reference_solution for t in train}.isdisjoint(t.reference_solution for t in heldout)
    assert {t.prompt for t in train}.isdisjoint(t.prompt for t in heldout)
    assert 0.12 < len(heldout) / (len(train) + len(heldout)) < 0.28
    assert [t.id for t in SyntheticSuite().tasks("heldout")] == [t.id for t in heldout]
    other_seed = SyntheticSuite(SyntheticSuiteConfig(seed=1)).tasks("heldout")
    assert {t.id for t in other_seed} != {t.id for t in heldout}


def test_subsets_are_family_balanced() -> None:
    suite = SyntheticSuite(SyntheticSuiteConfig(train_tasks=40, heldout_tasks=12))
    counts = Counter(t.family for t in suite.tasks("train"))
    assert sum(counts.values()) == 40
    assert set(counts) == set(FAMILIES)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert len(suite.tasks("heldout")) == 12


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="hidden_tests"):
        SyntheticSuite(SyntheticSuiteConfig(hidden_tests=3))
    with pytest.raises(ValueError, match="valid families"):
        SyntheticSuite(SyntheticSuiteConfig(families=["algebra"]))
    with pytest.raises(ValueError, match="valid splits"):
        SyntheticSuite().tasks("test")


def test_suite_builds_from_the_registry() -> None:
    registry = build_registry(build_plugin_manager())
    suite = registry.build("suite", {"name": "synthetic", "families": ["strings"], "heldout_tasks": 5})
    tasks = suite.tasks("heldout")
    assert len(tasks) == 5 and {t.family for t in tasks} == {"strings"}
