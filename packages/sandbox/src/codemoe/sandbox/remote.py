"""The ``remote`` executor: a client of ``codemoe sandbox serve`` (see :mod:`codemoe.sandbox.service`).

Same :class:`~codemoe.sandbox.api.Executor` interface as ``local``; batches are sent in chunks of
``batch_size`` requests. HTTP errors become :class:`~codemoe.sandbox.errors.RemoteError` carrying
the service's message. A 503 with ``Retry-After`` (the service is serving as many calls as it takes)
is waited out: the call is sent again after the time the service asks for (capped at 30 s, with a
little jitter so many clients do not come back at once), for up to ``busy_retry_s`` in all.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import os
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, new_nonce
from codemoe.sandbox.errors import RemoteError
from codemoe.sandbox.grading import Grading

__all__ = ["RemoteExecutor", "RemoteExecutorConfig", "build_remote_executor"]


@dataclass
class RemoteExecutorConfig:
    """Options of the ``remote`` executor."""

    url: str = "http://127.0.0.1:8765"  # base URL of the sandbox service
    token: str = ""  # bearer token; empty reads the environment variable named by token_env
    token_env: str = "CODEMOE_SANDBOX_TOKEN"  # where to find the token when `token` is empty
    timeout_s: float = 600.0  # HTTP timeout of one call (a batch waits for all its executions)
    batch_size: int = 256  # requests per /batch call
    busy_retry_s: float = 120.0  # how long a call waits out 503 busy answers (0: not at all)


def build_remote_executor(config: RemoteExecutorConfig) -> RemoteExecutor:
    """Factory of the ``remote`` executor."""
    token = config.token or os.environ.get(config.token_env, "")
    return RemoteExecutor(config.url, token=token, timeout_s=config.timeout_s, batch_size=config.batch_size,
                          busy_retry_s=config.busy_retry_s)


class RemoteExecutor(Grading):
    """Sends requests to a sandbox service over HTTP."""

    def __init__(self, url: str, *, token: str, timeout_s: float = 600.0, batch_size: int = 256,
                 busy_retry_s: float = 120.0) -> None:
        if not token:
            raise RemoteError(f"no token for the sandbox service at {url}: pass one or set CODEMOE_SANDBOX_TOKEN")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        self.busy_retry_s = busy_retry_s

    def health(self) -> dict[str, Any]:
        """The service's ``/health`` answer."""
        return self._call("GET", "/health", None)

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request on the service."""
        return ExecutionResult.from_dict(self._call("POST", "/run", _prepared(request).to_dict()))

    def run_batch(self, requests: list[ExecutionRequest]) -> list[ExecutionResult]:
        """Run many requests on the service, ``batch_size`` per call; results in request order."""
        results: list[ExecutionResult] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = [_prepared(r).to_dict() for r in requests[start:start + self.batch_size]]
            answer = self._call("POST", "/batch", {"requests": chunk})
            results += [ExecutionResult.from_dict(r) for r in answer["results"]]
        return results

    def close(self) -> None:
        """Nothing to release: every call is its own connection."""

    def __enter__(self) -> RemoteExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, payload: Any) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        give_up = time.monotonic() + self.busy_retry_s
        while True:
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                wait = _retry_after(exc) if exc.code == 503 else None
                if wait is not None and time.monotonic() + wait <= give_up:
                    exc.close()
                    time.sleep(wait)
                    continue
                raise RemoteError(f"sandbox service {self.url}{path}: {exc.code} {_message(exc)}", exc.code) from None
            except (urllib.error.URLError, OSError) as exc:
                raise RemoteError(f"sandbox service {self.url} unreachable: {exc}") from None


def _prepared(request: ExecutionRequest) -> ExecutionRequest:
    """Validated, with a nonce drawn here when a runner needs one."""
    request.validate()
    if request.runner is not None and not request.nonce:
        return dataclasses.replace(request, nonce=new_nonce())
    return request


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    """Seconds to wait that a 503's ``Retry-After`` asks for (a number or an HTTP date), capped
    at 30 s and jittered by up to a quarter; None without the header (then it is not retried).
    """
    value = (exc.headers.get("Retry-After") or "").strip() if exc.headers is not None else ""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.05), 30.0) * (1 + random.random() / 4)


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", exc.reason))
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)
