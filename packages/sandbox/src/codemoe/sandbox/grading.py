"""Grading programs: the one place that turns "this program against these checks" into sandbox requests.

Every executor (``local``, ``remote``) is a verifier in the sense of ``codemoe.core.contracts``:
:meth:`Grading.check_programs` takes checks (objects with ``task_id``, ``program``, ``tests`` and
``index``; core's ``ProgramCheck`` is one) and gives one :class:`ProgramVerdict` per check. The
RL trainer's scorer and the evaluator's grader both come here, so a sample is graded the same way
for its reward and for pass@k. This module does not import codemoe-core: the contract is met by
names and fields, which ``tests/test_contracts.py`` checks.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, Limits
from codemoe.sandbox.rewards.static import parse

__all__ = ["Grading", "ProgramVerdict", "program_request"]


def program_request(check: Any, limits: Limits) -> ExecutionRequest:
    """The ``asserts`` execution of ``check.program`` followed by ``check.tests``."""
    return ExecutionRequest(
        files={"program.py": check.program, "checks.py": check.tests},
        runner="asserts",
        limits=limits,
        id=f"{check.task_id}#{check.index}",
    )


CHECKS_MODULE = "test_checks.py"  # the name the checks have as a test module, for the hack detectors


def checks_as_tests(program: str, checks: str) -> dict[str, str]:
    """``checks`` (assert code run after ``program``, or HumanEval's ``def check(candidate)`` and its
    call ``check(entry_point)``) as a pytest module the hack detectors read as a repository's visible
    tests: ``from program import ...`` and one test holding the checks' statements, ``candidate``
    named as the function it stands for. Without it the detectors compared a program that is a table
    of the checks' answers with no test at all. ``{}`` when either does not parse."""
    program_tree, checks_tree = parse(program), parse(checks)
    if program_tree is None or checks_tree is None:
        return {}
    defined = [n.name for n in program_tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    body: list[ast.stmt] = []
    for node in checks_tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "check" and node.args.args:
            candidate = node.args.args[0].arg
            called = next((c.args[0].id for c in ast.walk(checks_tree) if isinstance(c, ast.Call)
                           and isinstance(c.func, ast.Name) and c.func.id == "check" and c.args
                           and isinstance(c.args[0], ast.Name)), None)
            for inner in ast.walk(node):
                if called and isinstance(inner, ast.Name) and inner.id == candidate:
                    inner.id = called
            body += node.body
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                  and isinstance(node.value.func, ast.Name) and node.value.func.id == "check"):
            body.append(node)
    if not body or not defined:
        return {}
    test = ast.FunctionDef(name="test_checks", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                                   defaults=[]), body=body, decorator_list=[], returns=None)
    module = ast.Module(body=[ast.ImportFrom(module="program", names=[ast.alias(name=n) for n in defined], level=0), test],
                        type_ignores=[])
    try:
        return {CHECKS_MODULE: ast.unparse(ast.fix_missing_locations(module)) + "\n"}
    except (RecursionError, ValueError):
        return {}


@dataclass(frozen=True)
class ProgramVerdict:
    """The verdict on one check: the execution's result, and the program it ran."""

    task_id: str
    program: str
    result: ExecutionResult
    checks: str = ""  # the checks the program ran against (what the hack detectors compare it with)

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

        visible = checks_as_tests(self.program, self.checks)
        inp = reward_input_from_results(after=self.result, files_after={"program.py": self.program, **visible},
                                        task_id=self.task_id, single_test="checks")
        inp.files_before.update(visible)  # the checks are the task's: there before the program, unchanged
        return inp


class Grading:
    """``check_programs`` for an executor with ``run_batch`` (a base of the sandbox's executors)."""

    def check_programs(
        self, checks: Sequence[Any], *, timeout_s: float = 10.0, memory_mb: int = 1024
    ) -> list[ProgramVerdict]:
        """Run every check's program against its tests, as many at once as the executor runs."""
        limits = Limits(timeout_s=timeout_s, cpu_s=timeout_s, memory_mb=memory_mb)
        results = self.run_batch([program_request(check, limits) for check in checks])
        return [
            ProgramVerdict(task_id=check.task_id, program=check.program, result=result, checks=check.tests)
            for check, result in zip(checks, results, strict=True)
        ]
