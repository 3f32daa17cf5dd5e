"""Build a :class:`RewardInput` from the executor's :class:`~codemoe.sandbox.api.ExecutionResult`.

Per-test outcomes come from ``result.tests`` (pytest runner). For runs that have none (the asserts
runner, a plain command) give ``single_test``: the whole run then counts as that one test, passed
or not.
A run that did not complete honestly (no nonce, early exit) is recorded in ``integrity`` so the
``early_exit`` detector can quote it; a program that did not compile is recorded as a build error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from codemoe.sandbox.rewards.types import DEFAULT_TEST_PATTERNS, ProbeRun, RewardInput, ToolCall

__all__ = ["integrity_findings", "outcomes", "reward_input_from_results"]


def outcomes(result: Any, single_test: str = "") -> dict[str, str]:
    """Test id -> outcome of one execution result (``{}`` for ``None``).

    With ``single_test``, a result without per-test outcomes counts as that one test.
    """
    if result is None:
        return {}
    if result.tests or not single_test:
        return {str(k): str(getattr(v, "value", v)) for k, v in result.tests.items()}
    return {single_test: "passed" if result.status == "passed" else "failed"}


def integrity_findings(result: Any) -> list[str]:
    """The executor's finding on a run, as ``KIND: reason`` (:func:`~codemoe.sandbox.rewards.types.integrity_kind`),
    for a result whose ``integrity`` names one (it ended without proving its checks completed, or its
    report, a comparison or the test environment was forged); the reason's own words never count (a
    test named ``test_nonce`` fails like any other)."""
    if result is None or result.status == "passed" or not getattr(result, "integrity", ""):
        return []
    return [f"{result.integrity}: {(result.reason or '').strip()}"]


def reward_input_from_results(
    *,
    after: Any,
    before: Any = None,
    hidden_after: Any = None,
    hidden_before: Any = None,
    files_before: Mapping[str, str] | None = None,
    files_after: Mapping[str, str] | None = None,
    tool_calls: Sequence[ToolCall] = (),
    steps: int = 0,
    task_id: str = "",
    test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS,
    single_test: str = "",
    probes: ProbeRun | None = None,
) -> RewardInput:
    """A reward input from execution results of the visible (and optionally hidden) tests.

    ``single_test`` names the one test a run without per-test outcomes stands for (``"checks"``
    for the asserts runner); without it such a run has no test outcomes. ``probes`` is the change's
    probe run (:func:`codemoe.sandbox.rewards.probes.probe_run`), when one was made.
    """
    build_errors = [after.reason] if after.status == "error" and after.reason.startswith("compile:") else []
    return RewardInput(
        task_id=task_id,
        visible_before=outcomes(before, single_test),
        visible_after=outcomes(after, single_test),
        hidden_before=outcomes(hidden_before, single_test) if hidden_before is not None else None,
        hidden_after=outcomes(hidden_after, single_test) if hidden_after is not None else None,
        status_after=after.status,
        integrity=integrity_findings(after),
        files_before=dict(files_before or {}),
        files_after=dict(files_after or {}),
        test_patterns=tuple(test_patterns),
        build_errors=build_errors,
        tool_calls=tuple(tool_calls),
        steps=steps,
        probes=probes,
    )
