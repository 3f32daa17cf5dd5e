"""Grading programs: the one place that turns "this program against these checks" into sandbox requests.

Every executor (``local``, ``remote``) is a verifier in the sense of ``codemoe.core.contracts``:
:meth:`Grading.check_programs` takes checks (objects with ``task_id``, ``program``, ``tests`` and
``index``; core's ``ProgramCheck`` is one) and gives one :class:`ProgramVerdict` per check. The
RL trainer's scorer and the evaluator's grader both come here, so a sample is graded the same way
for its reward and for pass@k. This module does not import codemoe-core: the contract is met by
names and fields, which ``tests/test_contracts.py`` checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, Limits

__all__ = ["Grading", "ProgramVerdict", "program_request"]


def program_request(check: Any, limits: Limits) -> ExecutionRequest:
    """The ``asserts`` execution of ``check.program`` followed by ``check.tests``."""
    return ExecutionRequest(
        files={"program.py": check.program, "checks.py": check.tests},
        runner="asserts",
        limits=limits,
        id=f"{check.task_id}#{check.index}",
    )


@dataclass(frozen=True)
class ProgramVerdict:
    """The verdict on one check: the execution's result, and the program it ran."""

    task_id: str
    program: str
    result: ExecutionResult

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def reason(self) -> str:
        return self.result.reason

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr

    @property
    def duration_s(self) -> float:
        return self.result.duration_s

    @property
    def tests(self) -> dict[str, str]:
        return dict(self.result.tests)

    @property
    def passed(self) -> bool:
        return self.result.passed

    def to_reward_input(self) -> Any:
        """The :class:`~codemoe.sandbox.rewards.RewardInput` of this run: the checks count as one test."""
        from codemoe.sandbox.rewards.inputs import reward_input_from_results

        return reward_input_from_results(
            after=self.result, files_after={"program.py": self.program}, task_id=self.task_id, single_test="checks"
        )


class Grading:
    """``check_programs`` for an executor with ``run_batch`` (a base of the sandbox's executors)."""

    def check_programs(
        self, checks: Sequence[Any], *, timeout_s: float = 10.0, memory_mb: int = 1024
    ) -> list[ProgramVerdict]:
        """Run every check's program against its tests, as many at once as the executor runs."""
        limits = Limits(timeout_s=timeout_s, cpu_s=timeout_s, memory_mb=memory_mb)
        results = self.run_batch([program_request(check, limits) for check in checks])
        return [
            ProgramVerdict(task_id=check.task_id, program=check.program, result=result)
            for check, result in zip(checks, results, strict=True)
        ]
