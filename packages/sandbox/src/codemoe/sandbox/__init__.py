"""codemoe.sandbox: isolated, fast execution of untrusted code and tests.

Build an executor (``LocalExecutor`` here, ``RemoteExecutor`` for a ``codemoe sandbox serve``
service) and send it :class:`ExecutionRequest` objects; see :mod:`codemoe.sandbox.api` for the
contract, the runners and the nonce. Installs and runs without torch and without codemoe-core.
"""

from __future__ import annotations

from typing import Any

from codemoe.sandbox.api import (
    RUNNERS,
    STATUSES,
    TEST_OUTCOMES,
    ExecutionRequest,
    ExecutionResult,
    Executor,
    Limits,
    function_task_request,
    new_nonce,
)
from codemoe.sandbox.errors import RemoteError, SandboxError

__all__ = [
    "RUNNERS",
    "STATUSES",
    "TEST_OUTCOMES",
    "ExecutionRequest",
    "ExecutionResult",
    "Executor",
    "Limits",
    "LocalExecutor",
    "RemoteError",
    "RemoteExecutor",
    "SandboxError",
    "function_task_request",
    "new_nonce",
]

_LAZY = {"LocalExecutor": "codemoe.sandbox.local", "RemoteExecutor": "codemoe.sandbox.remote"}


def __getattr__(name: str) -> Any:
    """Import the executors on first use, so ``import codemoe.sandbox`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'codemoe.sandbox' has no attribute {name!r}")
