"""The sandbox's own errors (it does not depend on codemoe-core, so it cannot reuse its classes)."""

from __future__ import annotations

__all__ = ["RemoteError", "SandboxError"]


class SandboxError(Exception):
    """An execution could not be set up or its worker failed; the message says what to do."""


class RemoteError(SandboxError):
    """The sandbox service refused a request or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # HTTP status code, None when the service was unreachable
