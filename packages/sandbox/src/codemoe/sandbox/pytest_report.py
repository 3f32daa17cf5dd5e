"""The pytest plugin behind the ``pytest`` runner: per-test outcomes, sent with the nonce.

Loaded only in the pytest fork server. Outcomes go over the result channel when the session
finishes; see :mod:`codemoe.sandbox.api` for why they count only with the nonce.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Reporter"]


class Reporter:
    """Records each test's outcome and sends the report, with the nonce, when the session ends."""

    def __init__(self, nonce: str, *, send: Callable[[dict[str, Any]], None]) -> None:
        self.nonce = nonce
        self.tests: dict[str, str] = {}
        self.collect_errors: list[str] = []
        self.memory = False
        self._send = send

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.tests[report.nodeid or "<collection>"] = "error"
            self.collect_errors.append(crash_line(report))

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed and crash_line(report).startswith("MemoryError"):
            self.memory = True
        if report.when == "call":
            outcome = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "skipped" if report.skipped else "passed"
            self.tests[report.nodeid] = outcome
        elif report.failed:
            self.tests[report.nodeid] = "error"
        elif report.skipped:
            self.tests[report.nodeid] = "skipped"

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self._send({
            "kind": "pytest",
            "nonce": self.nonce,
            "tests": self.tests,
            "exitstatus": int(exitstatus),
            "collect_errors": self.collect_errors[:20],
            "memory": self.memory,
        })


def crash_line(report: Any) -> str:
    """The one-line reason of a failed report (``AssertionError: ...``, ``MemoryError``)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0] if crash.message else ""
    text = str(report.longrepr or "").strip().splitlines()
    return text[-1] if text else ""
