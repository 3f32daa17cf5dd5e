"""Conformance contract for task suites (kind ``suite``), on top of the core kit (:mod:`codemoe.core.testing`)::

    from codemoe.evals.testing import SuiteContract

    class TestMySuite(SuiteContract):
        name = "my-suite"

A suite hands out ``tasks(split)`` for the splits ``train`` and ``heldout``: non-empty, ids unique,
no task in both (no leakage), the same tasks in the same order every time, an unknown split an
error naming the valid ones; and for function-level suites every sampled task's reference solution
passes its own visible and hidden tests in the sandbox (through the ``codemoe_executor`` fixture;
nothing runs on the host).
"""

from __future__ import annotations

from typing import Any, ClassVar

try:
    import pytest
except ImportError as exc:  # the kit is a pytest plugin: its users test with pytest
    raise ImportError("the codemoe conformance kit needs pytest: pip install 'codemoe-evals[testing]'") from exc
from codemoe.core.contracts import ProgramCheck
from codemoe.core.testing import ComponentContract
from codemoe.evals.tasks import SPLITS

__all__ = ["SuiteContract"]


class SuiteContract(ComponentContract):
    """A task suite: ``factory(config) -> Suite`` (see :class:`codemoe.evals.tasks.Suite`)."""

    kind = "suite"
    function_level: ClassVar[bool] = True  # tasks have a prompt, a reference solution and assert tests
    checked_tasks: ClassVar[int] = 6  # reference solutions run per split
    filled_splits: ClassVar[tuple[str, ...]] = SPLITS  # splits that must hold tasks (an eval-only suite: heldout)

    def test_splits_are_disjoint_unique_and_stable(self, registry: Any, spec: dict[str, Any]) -> None:
        suite = self.build(registry, spec)
        ids = {}
        for split in SPLITS:
            tasks = suite.tasks(split)
            assert tasks or split not in self.filled_splits, f"split '{split}' is empty"
            ids[split] = [t.id for t in tasks]
            assert len(set(ids[split])) == len(ids[split]), f"split '{split}' repeats task ids"
            assert all(str(t.prompt).strip() for t in tasks), f"split '{split}' has a task with an empty prompt"
        assert any(ids.values()), "every split is empty"
        overlap = set(ids["train"]) & set(ids["heldout"])
        assert not overlap, f"tasks in both train and heldout: {sorted(overlap)[:5]}"
        again = self.build(registry, spec)
        assert [t.id for t in again.tasks("heldout")] == ids["heldout"], "the same config drew other held-out tasks"

    def test_unknown_split_names_the_valid_ones(self, registry: Any, spec: dict[str, Any]) -> None:
        with pytest.raises(Exception) as info:
            self.build(registry, spec).tasks("no-such-split")
        message = str(info.value)
        assert "no-such-split" in message and all(s in message for s in SPLITS), message

    def test_reference_solutions_pass_their_tests(self, registry: Any, spec: dict[str, Any], codemoe_executor: Any) -> None:
        if not self.function_level:
            return
        suite = self.build(registry, spec)
        checks = [
            ProgramCheck(t.id, t.solution_program(t.reference_solution), f"{t.visible_tests}\n{t.hidden_tests}")
            for split in SPLITS for t in suite.tasks(split)[: self.checked_tasks]
        ]
        verdicts = codemoe_executor.check_programs(checks, timeout_s=10.0)
        failed = [(c.task_id, v.status, v.reason) for c, v in zip(checks, verdicts) if not v.passed]
        assert not failed, f"reference solutions that fail their own tests: {failed[:3]}"
