"""Grading completions: each task's prompt plus a completion, checked against the task's tests.

The verifier comes from the registry (kind ``executor``), so grading runs wherever the sandbox does:
the local worker pool by default, a remote sandbox service when configured. This module names what
to check (:class:`~codemoe.core.contracts.ProgramCheck`); how it runs is the verifier's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from codemoe.core.contracts import ProgramCheck, Verifier
from codemoe.evals.passk import TaskOutcome
from codemoe.evals.tasks import CodeTask

__all__ = ["GradedSample", "grade", "outcomes"]

_OUTPUT_CHARS = 2000  # output kept per sample for reports and human review


@dataclass(frozen=True)
class GradedSample:
    """One completion and its verdict on the task's tests."""

    task_id: str
    family: str
    index: int  # sample number within the task
    completion: str
    status: str  # the sandbox status: passed, failed, error, timeout, memory, output-limit, killed
    reason: str  # why it did not pass ("" when it did)
    output: str  # the tail of stderr and stdout
    duration_s: float
    # an agent episode's facts (codemoe.evals.agent_metrics.episode_facts); None for a completion
    episode: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GradedSample:
        return cls(**{k: v for k, v in data.items() if k != "passed"})


def _tail(text: str) -> str:
    return text if len(text) <= _OUTPUT_CHARS else "..." + text[-_OUTPUT_CHARS:]


def grade(
    verifier: Verifier,
    tasks: Sequence[CodeTask],
    completions: Mapping[str, Sequence[str]],
    *,
    tests: str = "hidden",
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    chunk: int = 256,
    advance: Callable[[int], Any] | None = None,
) -> list[GradedSample]:
    """Check every completion of every task against the task's ``tests`` ('hidden' or 'visible').

    ``completions`` maps task id -> list of completions (text following the task's prompt).
    Checks go to ``verifier.check_programs`` in chunks of ``chunk``; ``advance(n)`` is called after each.
    """
    if tests not in ("hidden", "visible"):
        raise ValueError(f"tests must be 'hidden' or 'visible', got {tests!r}")
    jobs: list[tuple[CodeTask, int, str]] = [
        (task, i, text) for task in tasks for i, text in enumerate(completions.get(task.id, ()))
    ]
    graded: list[GradedSample] = []
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        checks = [
            ProgramCheck(task_id=task.id, program=task.solution_program(text), tests=getattr(task, f"{tests}_tests"), index=i)
            for task, i, text in part
        ]
        verdicts = verifier.check_programs(checks, timeout_s=timeout_s, memory_mb=memory_mb)
        for (task, i, text), verdict in zip(part, verdicts, strict=True):
            output = "\n".join(s for s in (verdict.stderr, verdict.stdout) if s)
            graded.append(
                GradedSample(
                    task_id=task.id,
                    family=task.family,
                    index=i,
                    completion=text,
                    status=verdict.status,
                    reason=verdict.reason,
                    output=_tail(output),
                    duration_s=round(float(verdict.duration_s), 4),
                )
            )
        if advance is not None:
            advance(len(part))
    return graded


def outcomes(tasks: Sequence[CodeTask], graded: Sequence[GradedSample]) -> list[TaskOutcome]:
    """Per-task (n, c) counts, in the order of ``tasks``; tasks without samples are left out."""
    n: dict[str, int] = defaultdict(int)
    c: dict[str, int] = defaultdict(int)
    for sample in graded:
        n[sample.task_id] += 1
        c[sample.task_id] += sample.passed
    return [TaskOutcome(t.id, t.family, n[t.id], c[t.id]) for t in tasks if n[t.id]]
