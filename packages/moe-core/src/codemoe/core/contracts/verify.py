"""The grading contract: what a trainer or an evaluator needs from whatever runs code (kind ``executor``).

A consumer names *what* to check, a program and the checks it must pass, as a :class:`ProgramCheck`;
the verifier decides *how*: the sandbox's executors (``local``, ``remote``) build the isolated
execution, run it and hand back a :class:`Verdict` per check, in order. The consumer never builds a
sandbox request, so the RL trainer and the evaluator grade the same way, and an executor from a
plugin that implements :class:`Verifier` grades for both.

A verdict also carries what the reward recipe (kind ``reward``) scores: ``to_reward_input()``. The
recipe and the verifier come from the same package, so core never looks inside that object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ProgramCheck", "Verdict", "Verifier"]


@dataclass(frozen=True)
class ProgramCheck:
    """One program to run against checks: a task's prompt plus a completion, and the task's tests."""

    task_id: str  # the task the program answers (reward inputs and reports name it)
    program: str  # the whole program text (``program.py``)
    tests: str  # assert-style checks run after the program, in its namespace (``checks.py``)
    index: int = 0  # the sample's number within its task; the execution is named ``<task_id>#<index>``

    @property
    def id(self) -> str:
        return f"{self.task_id}#{self.index}"


@runtime_checkable
class Verdict(Protocol):
    """The outcome of one check."""

    status: str  # passed, failed, error, timeout, memory, output-limit, killed
    reason: str  # why it did not pass, in one line ("" when it did)
    stdout: str
    stderr: str
    duration_s: float
    tests: Mapping[str, str]  # test id -> outcome, where the runner reports tests one by one

    @property
    def passed(self) -> bool: ...

    def to_reward_input(self) -> object:
        """What the reward recipe of the verifier's package scores for this check."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Grades programs; the sandbox's executors are verifiers."""

    def check_programs(
        self, checks: Sequence[ProgramCheck], *, timeout_s: float = 10.0, memory_mb: int = 1024
    ) -> Sequence[Verdict]:
        """One :class:`Verdict` per check, in order; a failing program is a verdict, never an exception.

        ``timeout_s`` bounds each program's wall-clock and CPU time, ``memory_mb`` its memory.
        """
        ...

    def close(self) -> None:
        """Free the workers; the verifier is unusable afterwards."""
        ...
