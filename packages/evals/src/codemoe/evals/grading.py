"""Grading completions in the sandbox: one HumanEval-style ``asserts`` execution per sample.

The executor comes from the registry (kind ``executor``), so grading runs wherever the sandbox does:
the local worker pool by default, a remote sandbox service when configured. The sandbox package
is imported only here, inside functions, because evals must not need it to be imported.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

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
    executor: Any,
    tasks: Sequence[CodeTask],
    completions: Mapping[str, Sequence[str]],
    *,
    tests: str = "hidden",
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    chunk: int = 256,
    advance: Callable[[int], Any] | None = None,
) -> list[GradedSample]:
    """Run every completion of every task against the task's ``tests`` ('hidden' or 'visible').

    ``completions`` maps task id -> list of completions (text following the task's prompt).
    Requests go to ``executor.run_batch`` in chunks of ``chunk``; ``advance(n)`` is called after each.
    """
    from codemoe.sandbox.api import ExecutionRequest, Limits

    if tests not in ("hidden", "visible"):
        raise ValueError(f"tests must be 'hidden' or 'visible', got {tests!r}")
    limits = Limits(timeout_s=timeout_s, cpu_s=timeout_s, memory_mb=memory_mb)
    jobs: list[tuple[CodeTask, int, str]] = [
        (task, i, text) for task in tasks for i, text in enumerate(completions.get(task.id, ()))
    ]
    graded: list[GradedSample] = []
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        requests = [
            ExecutionRequest(
                files={"program.py": task.solution_program(text), "checks.py": getattr(task, f"{tests}_tests")},
                runner="asserts",
                limits=limits,
                id=f"{task.id}#{i}",
            )
            for task, i, text in part
        ]
        for (task, i, text), result in zip(part, executor.run_batch(requests), strict=True):
            output = "\n".join(s for s in (result.stderr, result.stdout) if s)
            graded.append(
                GradedSample(
                    task_id=task.id,
                    family=task.family,
                    index=i,
                    completion=text,
                    status=result.status,
                    reason=result.reason,
                    output=_tail(output),
                    duration_s=round(float(result.duration_s), 4),
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
