"""``codemoe tasks validate``: prove that every task is solvable and graded correctly.

For each task two executions run in one batch through the sandbox executor: the visible and hidden
tests on the original repository and on the repository with the gold patch applied. A task is
valid when the gold patch applies; every ``fail_to_pass`` test fails (or does not exist) before and
passes after; every ``pass_to_pass`` test passes both times; the task has hidden tests, they all
pass with the gold patch and at least one fails on the original; every visible test passes with the
gold patch; and the repository does not already contain the hidden tests (an overlay may replace
a visible test file, as SWE-bench's ``test_patch`` does, but must change it).

A task with a decoy patch (the obvious first fix of a multi-round task) gets a third execution: the
decoy must apply, must not solve the task, and some visible test must fail with it, so that an
agent that tries it sees why it is wrong.

A task that judges only its listed tests (``judged_tests: listed``, every SWE-bench instance by
default) is judged as SWE-bench judges it: by ``fail_to_pass`` and ``pass_to_pass`` alone. Any
other test that fails, before or after the gold patch (an unrelated test that needs a missing
dependency, a flaky one), is a warning, not a problem. A setup command that fails is a problem that
names the command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from codemoe.sandbox.agent.environment import grading_request, pytest_args
from codemoe.sandbox.agent.patches import PatchError
from codemoe.sandbox.agent.task_setup import SETUP_FAILED
from codemoe.sandbox.agent.tasks import Task
from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, Executor, Limits

__all__ = ["TaskReport", "check_task", "setup_failure", "unjudged_failures", "validate_tasks"]


@dataclass
class TaskReport:
    """The verdict on one task, with every problem found."""

    task_id: str
    type: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # failing tests the task does not judge
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


_EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*Error: ")  # "ModuleNotFoundError: No module named ..."
_HIDDEN_MODULE_HINT = (" (the sandbox shows executions only part of site-packages: name what the setup imports, "
                       "its build backend too, in the executor's site_packages, e.g. tasks validate --site-packages "
                       "pytest,pip,setuptools)")


def setup_failure(result: ExecutionResult) -> str | None:
    """What a run's failing setup command said (the command, its status, the telling line of its
    output: the last exception line, else the last line), or None when its setup did not fail."""
    text = f"{result.stderr}\n{result.stdout}"
    at = text.find(SETUP_FAILED)
    if at < 0:
        return None
    first, *rest = [line.strip() for line in text[at:].splitlines() if line.strip()]
    if not rest:
        return first
    telling = next((line for line in reversed(rest) if _EXCEPTION_LINE.search(line)), rest[-1])
    hint = _HIDDEN_MODULE_HINT if "No module named" in telling else ""
    return f"{first} ({telling}){hint}"


def check_task(task: Task, before: ExecutionResult, after: ExecutionResult) -> list[str]:
    """The problems shown by the two grading runs (original, gold) of ``task``."""
    for label, result in (("before", before), ("with", after)):
        failure = setup_failure(result)
        if failure is not None:
            return [f"{task.id}: {failure} ({label} the gold patch)"]
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
    if task.judged_tests == "listed":
        return problems
    problems += [f"hidden {t} is {o} with the gold patch" for t, o in sorted(hidden_after.items()) if o != "passed"]
    if hidden_after and all(b.get(t) == "passed" for t in hidden_after):
        problems.append("every hidden test already passes on the original repository")
    problems += [f"visible {t} is {o} with the gold patch" for t, o in sorted(a.items())
                 if not task.is_hidden(t) and o not in ("passed", "skipped")]
    return problems


def unjudged_failures(task: Task, before: ExecutionResult, after: ExecutionResult) -> list[str]:
    """Warnings: the tests outside fail_to_pass and pass_to_pass that fail with the gold patch, or on
    both sides, for a task that judges only its listed tests (SWE-bench reports, never judges, them)."""
    if task.judged_tests != "listed":
        return []
    listed = {*task.fail_to_pass, *task.pass_to_pass}
    bad = ("passed", "skipped")
    warnings = []
    for test_id in sorted(set(before.tests) | set(after.tests)):
        was, now = before.tests.get(test_id, "missing"), after.tests.get(test_id, "missing")
        if test_id in listed or now in bad:
            continue
        side = "before and after" if was not in bad else "after"
        warnings.append(f"{test_id} fails {side} the gold patch ({was} -> {now}); not judged: not in fail_to_pass or pass_to_pass")
    return warnings


def check_decoy(task: Task, decoy: ExecutionResult) -> list[str]:
    """The problems shown by the grading run of ``task``'s decoy patch: it must fail a visible test."""
    outcomes = decoy.tests
    required = [*task.fail_to_pass, *task.pass_to_pass, *(t for t in outcomes if task.is_hidden(t))]
    problems = []
    if required and all(outcomes.get(t) == "passed" for t in required):
        problems.append("the decoy patch solves the task")
    if not any(o not in ("passed", "skipped") for t, o in outcomes.items() if not task.is_hidden(t)):
        problems.append("no visible test fails with the decoy patch, so nothing shows an agent it is wrong")
    return problems


def validate_tasks(tasks: list[Task], executor: Executor, *, memory_mb: int = 1024) -> list[TaskReport]:
    """Validate ``tasks`` with two executions each (three with a decoy), all in one batch; one report per task, in order."""
    reports = [TaskReport(task.id, task.type, _static_problems(task)) for task in tasks]
    requests: list[ExecutionRequest] = []
    owners: list[tuple[int, int, bool]] = []  # task index, its first request, whether a decoy run follows
    for index, task in enumerate(tasks):
        patched = {}
        for which, apply in (("gold", task.gold_files), ("decoy", task.decoy_files)):
            try:
                patched[which] = apply()
            except PatchError as exc:
                reports[index].problems.append(f"the {which} patch does not apply: {exc}")
        decoy = patched.get("decoy")
        if reports[index].problems:
            continue
        limits = Limits(timeout_s=task.timeout_s, cpu_s=task.timeout_s, memory_mb=memory_mb)
        owners.append((index, len(requests), decoy is not None))
        requests += [grading_request(task, task.repo_files(), limits, "before"), grading_request(task, patched["gold"], limits, "gold")]
        if decoy is not None:
            requests.append(grading_request(task, decoy, limits, "decoy"))
    results = executor.run_batch(requests) if requests else []
    for index, first, has_decoy in owners:
        before, after = results[first], results[first + 1]
        report = reports[index]
        report.problems += check_task(tasks[index], before, after)
        if not report.problems:
            report.warnings += unjudged_failures(tasks[index], before, after)
        report.tests_before, report.tests_after = dict(before.tests), dict(after.tests)
        report.duration_s = before.duration_s + after.duration_s
        if has_decoy:
            report.problems += check_decoy(tasks[index], results[first + 2])
            report.duration_s += results[first + 2].duration_s
    return reports
