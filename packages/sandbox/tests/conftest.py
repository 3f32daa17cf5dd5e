"""Shared fixtures: one warm local executor for the whole sandbox test session."""

from __future__ import annotations

import os

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, LocalExecutor


@pytest.fixture(scope="session")
def executor():
    """Two warm workers, so batches really run side by side."""
    with LocalExecutor(workers=2) as ex:
        yield ex


def _python_request(source: str, **limits) -> ExecutionRequest:
    """``python main.py`` in the sandbox, with tight limits unless given."""
    defaults = {"timeout_s": 5.0, "cpu_s": 5.0, "memory_mb": 512}
    return ExecutionRequest(
        files={"main.py": source}, command=["python", "main.py"], limits=Limits(**{**defaults, **limits})
    )


def _processes_of(uid: int) -> list[str]:
    """Command lines of the live processes that run as ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


@pytest.fixture
def python_request():
    """Build ``python main.py`` requests: ``python_request(source, timeout_s=1)``."""
    return _python_request


@pytest.fixture
def processes_of():
    """List the command lines of the live processes of a user id."""
    return _processes_of
