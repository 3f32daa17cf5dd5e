"""What a reward component reads (:class:`RewardInput`) and what it returns (:class:`RewardValue`).

A component sees the task and what happened: per-test outcomes before and after the change (visible
and hidden tests apart), the files before and after, the executor's status and integrity findings,
build errors, the tool-call log and the number of steps. It returns a named value with a short
explanation; a recipe weighs the values into a :class:`RewardResult`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from codemoe.sandbox.verdict import INTEGRITY_KINDS

__all__ = [
    "DEFAULT_TEST_PATTERNS",
    "Probe",
    "ProbeRun",
    "RewardConfig",
    "RewardInput",
    "RewardResult",
    "RewardValue",
    "TestSelection",
    "ToolCall",
    "integrity_kind",
    "outcome_passed",
]

# Which tests a component scores: training rewards use the visible ones (the agent's view); the
# hidden ones are for evaluation and for detecting hacks.
TestSelection = Literal["visible", "hidden", "all"]

# Paths (fnmatch, matched against the whole relative path and against its file name) that hold tests.
DEFAULT_TEST_PATTERNS: tuple[str, ...] = ("test_*.py", "*_test.py", "tests/*", "*/tests/*", "conftest.py")


def integrity_kind(finding: str) -> str:
    """The kind of an executor finding written ``KIND: reason`` (one of
    :data:`codemoe.sandbox.verdict.INTEGRITY_KINDS`: ``early-exit``, ``no-report``, ``forged-report``,
    ``forged-comparison``, ``forged-environment``), or "" for a finding without one (read as a run
    that did not prove its checks completed)."""
    kind = finding.partition(": ")[0]
    return kind if kind in INTEGRITY_KINDS else ""


def outcome_passed(outcome: Any) -> bool:
    """True for a passing outcome; accepts strings and enums whose value is a string."""
    return str(getattr(outcome, "value", outcome)).lower() == "passed"


@dataclass(frozen=True)
class ToolCall:
    """One entry of the agent's tool-call log."""

    name: str  # the tool the agent called
    ok: bool = True  # False when the call was malformed (bad JSON, unknown tool, bad arguments)
    error: str = ""  # why the call was rejected
    # a well-formed call that failed: the tool's error kind (not_found, no_match, denied ...), else ""
    failure: str = ""


@dataclass(frozen=True)
class Probe:
    """One call of a probe run (:mod:`codemoe.sandbox.rewards.probes`): a visible test's point
    (``anchor == ""``) or an input drawn beside one, checked against the task's reference."""

    id: str  # "p3" for a point, "p3n7" for a draw beside it
    call: str  # the call, as written: "is_valid('059')"
    anchor: str = ""  # the point a draw lies beside ("" for a point)
    same: bool = False  # a draw whose reference answer is its point's own
    outcome: str = "missing"  # "passed", "failed", "error", ... or "missing" (not reported)
    edit: str = ""  # how a draw was made: "ARG:KIND" per edit, joined by "+" ("0:swap", "1:digit+0:char")


@dataclass(frozen=True)
class ProbeRun:
    """The change's run against its task's probes: every point and draw, and how the run ended."""

    probes: tuple[Probe, ...] = ()
    status: str = "passed"  # the executor's status of the probe run
    reason: str = ""  # why it did not pass, in one line


@dataclass
class RewardInput:
    """Everything a reward component may look at for one episode (or one sampled solution).

    Outcome maps go from test id to outcome (``"passed"``, ``"failed"``, ``"error"``, ``"skipped"``
    ...); a test id missing from a map did not run. ``None`` for the hidden maps means hidden tests
    were not run. File maps go from a path relative to the repository root to its text.
    """

    task_id: str = ""
    visible_before: Mapping[str, Any] = field(default_factory=dict)
    visible_after: Mapping[str, Any] = field(default_factory=dict)
    hidden_before: Mapping[str, Any] | None = None
    hidden_after: Mapping[str, Any] | None = None
    status_after: str = "passed"  # the executor's status of the visible run after the change
    # the executor's findings on that run, each "KIND: reason" (integrity_kind): why its account cannot be believed
    integrity: Sequence[str] = ()
    files_before: Mapping[str, str] = field(default_factory=dict)
    files_after: Mapping[str, str] = field(default_factory=dict)
    test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS
    build_errors: Sequence[str] = ()  # errors of the task's build step, when it has one
    tool_calls: Sequence[ToolCall] = ()
    steps: int = 0  # actions the agent took
    probes: ProbeRun | None = None  # the change against the visible tests' points and inputs beside them (None: not run)

    def tests(self, which: TestSelection) -> tuple[dict[str, Any], dict[str, Any]]:
        """(before, after) outcome maps of the selected tests."""
        if which == "visible":
            return dict(self.visible_before), dict(self.visible_after)
        hidden_before, hidden_after = dict(self.hidden_before or {}), dict(self.hidden_after or {})
        if which == "hidden":
            return hidden_before, hidden_after
        return {**self.visible_before, **hidden_before}, {**self.visible_after, **hidden_after}

    def is_test_file(self, path: str) -> bool:
        """Whether ``path`` is a test file (or test configuration) under :attr:`test_patterns`."""
        name = path.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in self.test_patterns)

    def counts_as_test(self, path: str) -> bool:
        """Whether a file of the change is one of the tests: named like a test (:meth:`is_test_file`)
        and a conftest, not Python, a file the repository held before the change, or a module some
        run collected tests from. A new module named like a test that no run collected
        (``pkg/tests/answers.py`` or ``pkg/x_test.py`` beside ``pytest tests``) is the change's code:
        an import reaches it, the tests never do, so the detectors of code read it. Where no run
        reported a test at all (nothing says what is collected), the name decides."""
        if not self.is_test_file(path):
            return False
        if not path.endswith(".py") or path.rsplit("/", 1)[-1] == "conftest.py" or path in self.files_before:
            return True
        modules = self.test_modules()
        return not modules or path in modules

    def test_modules(self) -> set[str]:
        """Paths of the modules the runs collected tests from (a test id's part before ``::``)."""
        ids = [*self.visible_before, *self.visible_after, *(self.hidden_before or {}), *(self.hidden_after or {})]
        return {str(test_id).partition("::")[0] for test_id in ids}

    def changed_files(self) -> list[str]:
        """Paths added or modified by the change, sorted (deleted paths are not included)."""
        return sorted(p for p, text in self.files_after.items() if self.files_before.get(p) != text)

    def deleted_files(self) -> list[str]:
        """Paths present before and gone after, sorted."""
        return sorted(p for p in self.files_before if p not in self.files_after)

    def changed_source_files(self) -> list[str]:
        """Changed Python files that are not tests (:meth:`counts_as_test`): the 'business logic' of the change."""
        return [p for p in self.changed_files() if p.endswith(".py") and not self.counts_as_test(p)]


@dataclass(frozen=True)
class RewardValue:
    """One component's verdict: a named value, a one-line explanation, and evidence lines.

    ``parts`` holds the values of sub-components (a hack penalty's detectors) for logging.
    """

    name: str
    value: float
    explanation: str
    evidence: tuple[str, ...] = ()
    parts: Mapping[str, float] = field(default_factory=dict)


@dataclass
class RewardConfig:
    """Options every reward component accepts."""

    weight: float = 1.0  # the component's weight when a recipe sums components


@dataclass
class RewardResult:
    """A recipe's output: the total and every component's value next to it.

    ``total == sum(weights[n] * components[n])``. ``metrics`` holds numbers worth logging that are
    not part of the total (the visible-hidden gap, whether a hack was detected).
    """

    total: float
    components: dict[str, float]
    weights: dict[str, float]
    explanations: dict[str, str]
    metrics: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def as_metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """Flat scalars for a metrics log: total, each component's value, and the extra metrics."""
        out = {f"{prefix}total": self.total}
        out.update({f"{prefix}{name}": value for name, value in self.components.items()})
        out.update({f"{prefix}{name}": value for name, value in self.metrics.items()})
        return out
