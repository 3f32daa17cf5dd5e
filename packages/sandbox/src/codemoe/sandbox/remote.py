"""The ``remote`` executor: a client of ``codemoe sandbox serve`` (see :mod:`codemoe.sandbox.service`).

Same :class:`~codemoe.sandbox.api.Executor` interface as ``local``; batches are sent in chunks of
``batch_size`` requests. HTTP errors become :class:`~codemoe.sandbox.errors.RemoteError` carrying
the service's message. A 503 with ``Retry-After`` (the service is serving as many calls as it takes)
is waited out: the call is sent again after the time the service asks for (capped at 30 s, with a
little jitter so many clients do not come back at once), for up to ``busy_retry_s`` in all.

Several services: ``url`` is one URL or a list. A batch's chunks are spread over the live services
and sent concurrently (one chunk at a time per service). A service that fails a chunk (unreachable,
reset, timed out, HTTP 5xx, still busy, an answer that is not the chunk's results) is left out for
``cooldown_s`` and the chunk, with the rest of its queue, is sent to the others, up to
``retry_rounds`` rounds; only every service failing is a :class:`RemoteError`, naming each one. A
request keeps its id and nonce when it is sent again, so re-sending is safe: an execution is
idempotent, its result is taken from exactly one answer, and no result is lost. A 4xx (bad token,
bad request) is the caller's to fix and is never re-sent.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, new_nonce
from codemoe.sandbox.errors import RemoteError
from codemoe.sandbox.grading import Grading

__all__ = ["RemoteExecutor", "RemoteExecutorConfig", "build_remote_executor"]


@dataclass
class RemoteExecutorConfig:
    """Options of the ``remote`` executor."""

    url: str | list[str] = "http://127.0.0.1:8765"  # base URL of the sandbox service, or a list of them
    token: str = ""  # bearer token; empty reads the environment variable named by token_env
    token_env: str = "CODEMOE_SANDBOX_TOKEN"  # where to find the token when `token` is empty
    timeout_s: float = 600.0  # HTTP timeout of one call (a batch waits for all its executions)
    batch_size: int = 256  # requests per /batch call
    busy_retry_s: float = 120.0  # how long a call waits out 503 busy answers (0: not at all)
    cooldown_s: float = 30.0  # how long a service that failed is left out
    retry_rounds: int = 3  # rounds of sending failed chunks to the other services before a RemoteError


def build_remote_executor(config: RemoteExecutorConfig) -> RemoteExecutor:
    """Factory of the ``remote`` executor."""
    token = config.token or os.environ.get(config.token_env, "")
    return RemoteExecutor(config.url, token=token, timeout_s=config.timeout_s, batch_size=config.batch_size,
                          busy_retry_s=config.busy_retry_s, cooldown_s=config.cooldown_s,
                          retry_rounds=config.retry_rounds)


class RemoteExecutor(Grading):
    """Sends requests to one or several sandbox services over HTTP."""

    def __init__(self, url: str | list[str], *, token: str, timeout_s: float = 600.0, batch_size: int = 256,
                 busy_retry_s: float = 120.0, cooldown_s: float = 30.0, retry_rounds: int = 3) -> None:
        self.urls = _urls(url)
        if not token:
            raise RemoteError(f"no token for the sandbox service at {url}: pass one or set CODEMOE_SANDBOX_TOKEN")
        if batch_size < 1 or retry_rounds < 1 or cooldown_s < 0:
            raise RemoteError(f"the remote executor needs batch_size >= 1, retry_rounds >= 1 and cooldown_s >= 0, "
                              f"got {batch_size}, {retry_rounds}, {cooldown_s}")
        self.url = self.urls[0]
        self.token = token
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        self.busy_retry_s = busy_retry_s
        self.cooldown_s = cooldown_s
        self.retry_rounds = retry_rounds
        self._down: dict[str, tuple[float, str]] = {}  # url -> (left out until, its error)
        self._lock = threading.Lock()

    def health(self) -> dict[str, Any]:
        """The service's ``/health`` answer; with several, ``{"status", "services": [...]}``, each
        service's answer with its ``url``, or ``status`` "unreachable" and the error."""
        if len(self.urls) == 1:
            return self._call(self.url, "GET", "/health", None)
        services = []
        for url in self.urls:
            try:
                services.append({**self._call(url, "GET", "/health", None), "url": url})
            except RemoteError as exc:
                services.append({"status": "unreachable", "url": url, "error": str(exc)})
        up = sum(s.get("status") == "ok" for s in services)
        return {"status": "ok" if up == len(services) else "degraded" if up else "unreachable", "services": services}

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request on a live service (another one if it fails)."""
        return self.run_batch([request])[0]

    def run_batch(self, requests: list[ExecutionRequest]) -> list[ExecutionResult]:
        """Run many requests, ``batch_size`` per call, spread over the live services; results in request order."""
        prepared = [_prepared(r).to_dict() for r in requests]  # ids and nonces fixed once, kept when re-sent
        chunks = [list(range(s, min(s + self.batch_size, len(prepared)))) for s in range(0, len(prepared), self.batch_size)]
        results: list[ExecutionResult | None] = [None] * len(prepared)
        failed: dict[str, RemoteError] = {}
        live = self._live() or list(self.urls)  # every service cooling down: try them all
        for _ in range(self.retry_rounds):
            if not chunks or not live:
                break
            queues = {url: chunks[k::len(live)] for k, url in enumerate(live)}
            queues = {url: queue for url, queue in queues.items() if queue}
            chunks = []
            with ThreadPoolExecutor(max_workers=len(queues), thread_name_prefix="codemoe-sandbox-remote") as pool:
                outcomes = list(pool.map(lambda item: self._send_queue(item[0], item[1], prepared), queues.items()))
            for url, (done, left, error) in zip(queues, outcomes):
                for index, result in done:
                    if results[index] is not None:  # cannot happen: a chunk is sent again only when it has no answer
                        raise RemoteError(f"request {index} was answered twice (last by {url})")
                    results[index] = result
                if error is not None:
                    if error.status is not None and 400 <= error.status < 500 and error.status != 429:
                        raise error  # the request or the token is wrong: no other service would take it
                    failed[url] = error
                    self._mark_down(url, str(error))
                    chunks += left
            live = self._live()
            live = [u for u in live if u not in failed] or live  # one that failed this batch: only when no other is
            if chunks and live:
                warnings.warn(f"{'; '.join(f'[{u}] {e}' for u, e in failed.items())}; its {sum(map(len, chunks))} request(s) go to {', '.join(live)}",
                              RuntimeWarning, stacklevel=2)
        if chunks:
            if len(self.urls) == 1 and failed:
                raise failed[self.url]
            statuses = {e.status for e in failed.values()}
            raise RemoteError(f"every sandbox service failed: {self._errors(failed)}",
                              statuses.pop() if len(statuses) == 1 else None)
        return [r for r in results if r is not None]

    def _send_queue(self, url: str, queue: list[list[int]], prepared: list[dict[str, Any]]):
        """Send ``queue``'s chunks to ``url`` in turn: (answered (index, result) pairs, the chunks
        left unanswered, the error that stopped it or None)."""
        done: list[tuple[int, ExecutionResult]] = []
        for k, chunk in enumerate(queue):
            try:
                answer = self._call(url, "POST", "/batch", {"requests": [prepared[i] for i in chunk]})
                got = [ExecutionResult.from_dict(r) for r in answer["results"]]
                if len(got) != len(chunk) or any(r.id != prepared[i].get("id") for i, r in zip(chunk, got)):
                    raise ValueError(f"{len(got)} results for the {len(chunk)} requests sent, or not in their order")
            except RemoteError as exc:
                return done, queue[k:], exc
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                return done, queue[k:], RemoteError(f"sandbox service {url} answered something that is not "
                                                    f"the batch's results: {exc!r}")
            done += list(zip(chunk, got))
        return done, [], None

    def _live(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            return [u for u in self.urls if self._down.get(u, (0.0, ""))[0] <= now]

    def _mark_down(self, url: str, error: str) -> None:
        with self._lock:
            self._down[url] = (time.monotonic() + self.cooldown_s, error)

    def _errors(self, failed: dict[str, RemoteError]) -> str:
        with self._lock:
            reasons = {u: str(failed.get(u) or self._down.get(u, (0.0, "not tried"))[1]) for u in self.urls}
        return "; ".join(f"[{u}] {why}" for u, why in reasons.items())

    def close(self) -> None:
        """Nothing to release: every call is its own connection."""

    def __enter__(self) -> RemoteExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, url: str, method: str, path: str, payload: Any) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        give_up = time.monotonic() + self.busy_retry_s
        while True:
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    body = response.read()
                try:
                    return json.loads(body)
                except (ValueError, RecursionError):  # not JSON, or nested past the stack
                    raise RemoteError(f"sandbox service {url}{path} answered a body that is not JSON it can read: "
                                      f"{body[:200]!r}") from None
            except urllib.error.HTTPError as exc:
                wait = _retry_after(exc) if exc.code == 503 else None
                if wait is not None and time.monotonic() + wait <= give_up:
                    exc.close()
                    time.sleep(wait)
                    continue
                raise RemoteError(f"sandbox service {url}{path}: {exc.code} {_message(exc)}", exc.code) from None
            except (urllib.error.URLError, OSError) as exc:
                raise RemoteError(f"sandbox service {url} unreachable: {exc}") from None


def _urls(url: str | list[str]) -> list[str]:
    """The service roots of ``url`` (one URL or a list), without trailing slashes."""
    urls = [url] if isinstance(url, str) else list(url or [])
    if not urls or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        raise RemoteError(f"'url': {url!r} is not an http(s) URL or a non-empty list of them")
    urls = [u.rstrip("/") for u in urls]
    if len(set(urls)) < len(urls):
        raise RemoteError(f"'url': {url!r} names a service twice")
    return urls


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
        return str(json.loads(exc.read()).get("error", exc.reason))[:500]
    except (ValueError, AttributeError, OSError, RecursionError):
        return str(exc.reason)
