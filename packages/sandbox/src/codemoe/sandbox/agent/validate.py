"""``codemoe tasks validate``: prove that every task is solvable and graded correctly.

For each task two executions run in one batch through the sandbox executor: the visible and hidden
tests on the original repository and on the repository with the gold patch applied. A task is
valid when the gold patch applies; every ``fail_to_pass`` test fails (or does not exist) before and
passes after; every ``pass_to_pass`` test passes both times; the task has hidden tests, they all
pass with the gold patch and at least one fails on the original; every visible test passes with the
gold patch; and the repository does not already contain the hidden tests (an overlay may replace
a visible test file, as SWE-bench's ``test_patch`` does, but must change it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from codemoe.sandbox.agent.environment import grading_request, pytest_args
from codemoe.sandbox.agent.patches import PatchError
from codemoe.sandbox.agent.tasks import Task
from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, Executor, Limits

__all__ = ["TaskReport", "check_task", "validate_tasks"]


@dataclass
class TaskReport:
    """The verdict on one task, with every problem found."""

    task_id: str
    type: str
    problems: list[str] = field(default_factory=list)
    tests_before: dict[str, str] = field(default_factory=dict)
    tests_after: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0  # execution time of both runs

    @property
    def ok(self) -> bool:
        return not self.problems


def _static_problems(task: Task) -> list[str]:
    problems = []
    try:
        pytest_args(task.test_command)
    except ValueError as exc:
        problems.append(str(exc))
    if not task.fail_to_pass:
        problems.append("fail_to_pass is empty")
    if not task.hidden_files:
        problems.append("no hidden tests")
    repo = task.repo_files()
    leaked = sorted(path for path, text in task.hidden_files.items() if repo.get(path) == text)
    if leaked:
        problems.append(f"the repository already contains the hidden tests {leaked}")
    if task.type == "clarification-needed" and not task.clarification:
        problems.append("a clarification-needed task needs a clarification text")
    return problems


def check_task(task: Task, before: ExecutionResult, after: ExecutionResult) -> list[str]:
    """The problems shown by the two grading runs (original, gold) of ``task``."""
    problems = []
    b, a = before.tests, after.tests
    for test_id in task.fail_to_pass:
        if b.get(test_id) == "passed":
            problems.append(f"fail_to_pass {test_id} already passes before the gold patch")
        if a.get(test_id) != "passed":
            problems.append(f"fail_to_pass {test_id} is {a.get(test_id, 'missing')} with the gold patch")
    for test_id in task.pass_to_pass:
        for label, outcomes in (("before", b), ("after", a)):
            if outcomes.get(test_id) != "passed":
                problems.append(f"pass_to_pass {test_id} is {outcomes.get(test_id, 'missing')} {label} the gold patch")
    hidden_after = {t: o for t, o in a.items() if task.is_hidden(t)}
    if not hidden_after:
        problems.append(f"no hidden test ran with the gold patch (status {after.status}: {after.reason})")
    problems += [f"hidden {t} is {o} with the gold patch" for t, o in sorted(hidden_after.items()) if o != "passed"]
    if hidden_after and all(b.get(t) == "passed" for t in hidden_after):
        problems.append("every hidden test already passes on the original repository")
    problems += [f"visible {t} is {o} with the gold patch" for t, o in sorted(a.items())
                 if not task.is_hidden(t) and o not in ("passed", "skipped")]
    return problems


def validate_tasks(tasks: list[Task], executor: Executor, *, memory_mb: int = 1024) -> list[TaskReport]:
    """Validate ``tasks`` with two executions each, all in one batch; one report per task, in order."""
    reports = [TaskReport(task.id, task.type, _static_problems(task)) for task in tasks]
    requests: list[ExecutionRequest] = []
    owners: list[int] = []
    for index, task in enumerate(tasks):
        try:
            gold = task.gold_files()
        except PatchError as exc:
            reports[index].problems.append(f"the gold patch does not apply: {exc}")
            continue
        if reports[index].problems:
            continue
        limits = Limits(timeout_s=task.timeout_s, cpu_s=task.timeout_s, memory_mb=memory_mb)
        requests += [grading_request(task, task.repo_files(), limits, "before"), grading_request(task, gold, limits, "gold")]
        owners.append(index)
    results = executor.run_batch(requests) if requests else []
    for n, index in enumerate(owners):
        before, after = results[2 * n], results[2 * n + 1]
        report = reports[index]
        report.problems += check_task(tasks[index], before, after)
        report.tests_before, report.tests_after = dict(before.tests), dict(after.tests)
        report.duration_s = before.duration_s + after.duration_s
    return reports
