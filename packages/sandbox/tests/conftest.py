"""Shared fixtures: one warm local executor for the whole sandbox test session."""

from __future__ import annotations

import os
import uuid

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, LocalExecutor


@pytest.fixture(scope="session")
def executor():
    """Two warm workers, so batches really run side by side."""
    with LocalExecutor(workers=2) as ex:
        yield ex


def _python_request(source: str, *, name: str = "main.py", **limits) -> ExecutionRequest:
    """``python NAME`` in the sandbox, with tight limits unless given."""
    defaults = {"timeout_s": 5.0, "cpu_s": 5.0, "memory_mb": 512}
    return ExecutionRequest(
        files={name: source}, command=["python", name], limits=Limits(**{**defaults, **limits})
    )


def _processes_with(marker: str) -> list[str]:
    """Command lines of the live processes that contain ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in line:
            found.append(line)
    return found


@pytest.fixture
def python_request():
    """Build ``python main.py`` requests: ``python_request(source, timeout_s=1)``."""
    return _python_request


@pytest.fixture
def processes_with():
    """List the command lines of live processes containing a marker (a unique file name)."""
    return _processes_with


@pytest.fixture
def marker():
    """A string no other process on the machine has in its command line."""
    return uuid.uuid4().hex[:12]
