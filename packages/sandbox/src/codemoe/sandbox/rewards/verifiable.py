"""Verifiable reward components: compiling, tests passing, regressions, steps, tool-call format.

Values are natural quantities (a count, a rate, a 0/1 indicator); the recipe's weights carry the sign
and the scale, so ``-1 per compile error`` is the component ``compile_errors`` with weight ``-1``.

Test sets are compared over the union of the test ids seen before and after the change: a test that
disappears counts as not passing, so deleting a failing test never raises a pass rate.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from codemoe.sandbox.rewards.component import RewardComponent
from codemoe.sandbox.rewards.types import RewardConfig, RewardInput, RewardValue, TestSelection, outcome_passed

__all__ = [
    "AllPass",
    "AllPassConfig",
    "CompileErrors",
    "CompileErrorsConfig",
    "CompileSuccess",
    "FormatErrors",
    "FormatErrorsConfig",
    "HiddenPassRate",
    "HiddenPassRateConfig",
    "NewlyPassing",
    "NewlyPassingConfig",
    "Regressions",
    "RegressionsConfig",
    "StepCost",
    "StepCostConfig",
    "TaskComplete",
    "TestPassRate",
    "TestsConfig",
    "ToolErrors",
    "ToolErrorsConfig",
    "compile_errors",
]


def compile_errors(inp: RewardInput) -> list[str]:
    """Byte-compile every changed Python file (``compile()`` only parses, it runs nothing).

    Returns one line per file that does not compile, plus the task's build errors.
    """
    errors = [f"build: {line}" for line in inp.build_errors]
    for path in inp.changed_files():
        if not path.endswith(".py"):
            continue
        try:
            with warnings.catch_warnings():  # a policy's odd code must not flood the trainer's console
                warnings.simplefilter("ignore", SyntaxWarning)
                compile(inp.files_after[path], path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            errors.append(f"{path}:{line or '?'}: {type(exc).__name__}: {getattr(exc, 'msg', exc)}")
        except (RecursionError, MemoryError) as exc:  # nested past what the compiler takes: Python refuses it too
            errors.append(f"{path}:?: {type(exc).__name__}: {str(exc)[:200]}")
    return errors


def _union(before: dict, after: dict) -> list[str]:
    return sorted(set(before) | set(after))


def _short(ids: list[str], limit: int = 4) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


@dataclass
class TestsConfig(RewardConfig):
    """Options of the components that score tests."""

    __test__ = False  # not a pytest class

    tests: str = "visible"  # which tests: visible (training), hidden (evaluation) or all


@dataclass
class HiddenPassRateConfig(TestsConfig):
    """Options of ``hidden_pass_rate``."""

    tests: str = "hidden"  # which tests: hidden by default (evaluation); visible or all also work


@dataclass
class CompileErrorsConfig(RewardConfig):
    """Options of ``compile_errors``."""

    weight: float = -1.0  # seed 1: -1 per compile error


@dataclass
class NewlyPassingConfig(TestsConfig):
    """Options of ``newly_passing``."""

    weight: float = 1.5  # seed 1: +1.5 per newly passing test


@dataclass
class RegressionsConfig(TestsConfig):
    """Options of ``regressions``."""

    weight: float = -2.0  # seed 1: -2 per regression


@dataclass
class AllPassConfig(TestsConfig):
    """Options of ``all_pass``."""

    weight: float = 10.0  # seed 1: +10 when every test passes


@dataclass
class StepCostConfig(RewardConfig):
    """Options of ``step_cost``."""

    weight: float = -0.01  # seed 1: -0.01 per action step


@dataclass
class FormatErrorsConfig(RewardConfig):
    """Options of ``format_errors``."""

    weight: float = -0.5  # a malformed tool call costs half a compile error


@dataclass
class ToolErrorsConfig(RewardConfig):
    """Options of ``tool_errors``."""

    weight: float = -0.1  # a failed call costs ten steps


class _ScoresTests(RewardComponent):
    """Base of the components with a ``tests`` option; checks it when the component is built."""

    config_class = TestsConfig

    def __init__(self, config: TestsConfig | None = None) -> None:
        super().__init__(config)
        if self.config.tests not in ("visible", "hidden", "all"):
            raise ValueError(f"{self.name}: option tests={self.config.tests!r}; expected visible, hidden or all")
        self.selection: TestSelection = self.config.tests  # type: ignore[assignment]


class CompileErrors(RewardComponent):
    """Number of changed Python files that do not byte-compile, plus build errors."""

    name = "compile_errors"
    config_class = CompileErrorsConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        errors = compile_errors(inp)
        text = f"{len(errors)} compile error(s)" + (f": {errors[0]}" if errors else "")
        return RewardValue(self.name, float(len(errors)), text, tuple(errors))


class CompileSuccess(RewardComponent):
    """1 when every changed Python file compiles and the build (if any) succeeded, else 0."""

    name = "compile_success"

    def __call__(self, inp: RewardInput) -> RewardValue:
        errors = compile_errors(inp)
        if errors:
            return RewardValue(self.name, 0.0, f"does not compile: {errors[0]}", tuple(errors))
        return RewardValue(self.name, 1.0, f"{len(inp.changed_files())} changed file(s) compile")


class TestPassRate(_ScoresTests):
    """Fraction of the selected tests passing after the change (0 when no test ran)."""

    __test__ = False
    name = "test_pass_rate"
    config_class = TestsConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        before, after = inp.tests(self.selection)
        ids = _union(before, after)
        if not ids:
            return RewardValue(self.name, 0.0, f"no {self.config.tests} tests ran")
        passed = sum(outcome_passed(after.get(t)) for t in ids)
        return RewardValue(self.name, passed / len(ids), f"{passed}/{len(ids)} {self.config.tests} tests pass")


class HiddenPassRate(TestPassRate):
    """Fraction of the hidden tests passing after the change: evaluation, never training."""

    name = "hidden_pass_rate"
    config_class = HiddenPassRateConfig


class NewlyPassing(_ScoresTests):
    """Tests that existed and did not pass before the change and pass after it.

    Tests the change adds are not counted: writing new passing tests must not earn reward.
    """

    name = "newly_passing"
    config_class = NewlyPassingConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        before, after = inp.tests(self.selection)
        ids = [t for t in sorted(before) if not outcome_passed(before[t]) and outcome_passed(after.get(t))]
        text = f"{len(ids)} test(s) newly passing" + (f": {_short(ids)}" if ids else "")
        return RewardValue(self.name, float(len(ids)), text, tuple(ids))


class Regressions(_ScoresTests):
    """Tests that passed before the change and do not pass (or are gone) after it."""

    name = "regressions"
    config_class = RegressionsConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        before, after = inp.tests(self.selection)
        ids = [t for t in sorted(before) if outcome_passed(before[t]) and not outcome_passed(after.get(t))]
        text = f"{len(ids)} regression(s)" + (f": {_short(ids)}" if ids else "")
        return RewardValue(self.name, float(len(ids)), text, tuple(ids))


def _all_pass(inp: RewardInput, which: TestSelection) -> tuple[bool, str]:
    before, after = inp.tests(which)
    ids = _union(before, after)
    failing = [t for t in ids if not outcome_passed(after.get(t))]
    if not ids:
        return False, f"no {which} tests ran"
    if failing:
        return False, f"{len(failing)}/{len(ids)} {which} tests do not pass: {_short(failing)}"
    return True, f"all {len(ids)} {which} tests pass"


class AllPass(_ScoresTests):
    """1 when every selected test passes after the change (and at least one ran), else 0."""

    name = "all_pass"
    config_class = AllPassConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        ok, text = _all_pass(inp, self.selection)
        return RewardValue(self.name, float(ok), text)


class TaskComplete(_ScoresTests):
    """1 when the task is done end to end: it compiles, the build succeeds and every test passes."""

    name = "task_complete"
    config_class = TestsConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        errors = compile_errors(inp)
        if errors:
            return RewardValue(self.name, 0.0, f"not complete: {errors[0]}")
        ok, text = _all_pass(inp, self.selection)
        return RewardValue(self.name, float(ok), ("complete: " if ok else "not complete: ") + text)


class StepCost(RewardComponent):
    """Number of actions the agent took (weighted negatively: be quick and precise)."""

    name = "step_cost"
    config_class = StepCostConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        return RewardValue(self.name, float(inp.steps), f"{inp.steps} step(s)")


class ToolErrors(RewardComponent):
    """Number of well-formed tool calls that failed: a path that does not exist, an edit whose old
    text is not in the file, a denied path, a command off the allow-list.

    The cost of acting on what is not in the repository. A policy that writes a name it never read
    (a memorised path where the context has a new one) pays for each miss, so within a group the
    episodes that read the right file earn more before any of them resolves the task.
    """

    name = "tool_errors"
    config_class = ToolErrorsConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        bad = [f"{c.name}: {c.failure}" for c in inp.tool_calls if c.ok and c.failure]
        text = f"{len(bad)}/{len(inp.tool_calls)} tool call(s) failed" + (f": {_short(bad, 2)}" if bad else "")
        return RewardValue(self.name, float(len(bad)), text, tuple(bad))


class FormatErrors(RewardComponent):
    """Number of malformed tool calls (bad JSON, unknown tool, bad arguments) in the episode."""

    name = "format_errors"
    config_class = FormatErrorsConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        bad = [f"{c.name}: {c.error}" if c.error else c.name for c in inp.tool_calls if not c.ok]
        text = f"{len(bad)}/{len(inp.tool_calls)} tool call(s) malformed" + (f": {_short(bad, 2)}" if bad else "")
        return RewardValue(self.name, float(len(bad)), text, tuple(bad))
