"""``codemoe sandbox serve``: executions over HTTP, so they can run on CPU machines apart from the GPUs.

Endpoints (JSON in, JSON out, the schema of :mod:`codemoe.sandbox.api`):

- ``GET /health`` -> ``{"status": "ok", "workers": N}`` (no token needed)
- ``POST /run`` with an ``ExecutionRequest`` -> an ``ExecutionResult``
- ``POST /batch`` with ``{"requests": [...]}`` -> ``{"results": [...]}``, in request order

``/run`` and ``/batch`` need ``Authorization: Bearer <token>``. Errors are ``{"error": message}``
with 400 (malformed JSON or request), 401 (missing or wrong token), 404, 405, 411 (no
Content-Length) or 413 (body over the size limit, or too many requests in a batch).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import signal
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codemoe.sandbox.api import ExecutionRequest, Executor

__all__ = ["TOKEN_ENV", "SandboxService", "serve_forever"]

TOKEN_ENV = "CODEMOE_SANDBOX_TOKEN"
MAX_BATCH = 4096  # requests in one /batch call
_DISCARD_LIMIT = 256 << 20  # an oversized body up to this size is read away before the 413


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._respond(self._get)

    def do_POST(self) -> None:
        self._respond(self._post)

    def _get(self) -> Any:
        if self.path != "/health":
            raise _HttpError(HTTPStatus.NOT_FOUND, f"no such endpoint: GET {self.path}; try /health")
        return {"status": "ok", "workers": getattr(self.server.executor, "size", None)}

    def _post(self) -> Any:
        if self.path not in ("/run", "/batch"):
            raise _HttpError(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {self.path}; try /run or /batch")
        self._authorize()
        body = self._json_body()
        executor = self.server.executor
        try:
            if self.path == "/run":
                return executor.run(ExecutionRequest.from_dict(body)).to_dict()
            requests = body.get("requests") if isinstance(body, dict) else None
            if not isinstance(requests, list):
                raise ValueError("a batch is {\"requests\": [request, ...]}")
            if len(requests) > MAX_BATCH:
                raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BATCH} requests per batch")
            parsed = [ExecutionRequest.from_dict(r) for r in requests]
            return {"results": [r.to_dict() for r in executor.run_batch(parsed)]}
        except ValueError as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad request: {exc}") from None

    def _authorize(self) -> None:
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), self.server.token.encode()):
            raise _HttpError(HTTPStatus.UNAUTHORIZED, "missing or wrong token: send 'Authorization: Bearer <token>'")

    def _json_body(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
        try:
            size = int(length)
        except ValueError:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {length!r}") from None
        if size > self.server.max_request_bytes:
            self._discard(size)
            raise _HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body of {size} bytes is over the limit of {self.server.max_request_bytes} bytes",
            )
        try:
            return json.loads(self.rfile.read(size))
        except ValueError as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"malformed JSON: {exc}") from None

    def _discard(self, size: int) -> None:
        """Read an oversized body away (up to a bound), so the client gets to read the 413."""
        left = min(size, _DISCARD_LIMIT)
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                break
            left -= len(chunk)

    def _respond(self, handler: Any) -> None:
        try:
            status, payload = HTTPStatus.OK, handler()
        except _HttpError as exc:
            status, payload = exc.status, {"error": str(exc)}
            self.close_connection = True  # an unread body must not be taken for the next request
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:
        self._respond(self._not_allowed)

    do_DELETE = do_PATCH = do_PUT

    def _not_allowed(self) -> Any:
        raise _HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not supported; use GET or POST")

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], executor: Executor, token: str, max_request_bytes: int,
                 verbose: bool) -> None:
        super().__init__(address, _Handler)
        self.executor = executor
        self.token = token
        self.max_request_bytes = max_request_bytes
        self.verbose = verbose


class SandboxService:
    """An HTTP front for an executor; ``start()`` serves from a background thread."""

    def __init__(
        self,
        executor: Executor,
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_request_bytes: int = 32 << 20,
        verbose: bool = False,
    ) -> None:
        if not token:
            raise ValueError("the sandbox service needs a token")
        self.server = _Server((host, port), executor, token, max_request_bytes, verbose)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8765``."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SandboxService:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (the executor is the caller's to close)."""
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> SandboxService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(*, host: str, port: int, token: str | None, workers: int, max_request_bytes: int) -> int:
    """Run the service in the foreground until interrupted; returns the exit code."""
    from codemoe.sandbox.local import LocalExecutor

    token = token or os.environ.get(TOKEN_ENV, "")
    generated = not token
    token = token or secrets.token_urlsafe(24)
    with LocalExecutor(workers=workers) as executor:
        service = SandboxService(executor, token=token, host=host, port=port,
                                 max_request_bytes=max_request_bytes, verbose=True)
        print(f"codemoe sandbox serving on {service.url} with {executor.size} workers", file=sys.stderr)
        if generated:
            print(f"token (set {TOKEN_ENV} on clients): {token}", file=sys.stderr)
        # Interrupts stop the service even when the launcher left SIGINT ignored (a background job
        # of a non-interactive shell does): Python only raises KeyboardInterrupt for a default SIGINT.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            service.server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            service.server.server_close()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
