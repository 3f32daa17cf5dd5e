"""``codemoe sandbox serve``: executions over HTTP, so they can run on CPU machines apart from the GPUs.

A FastAPI application served by uvicorn, as the field serves (SGLang, vLLM), on uvicorn's h11
protocol extended by :mod:`codemoe.sandbox._http_edge` for what uvicorn does not bound itself.
Endpoints (JSON in, JSON out, the schema of :mod:`codemoe.sandbox.api`):

- ``GET /health`` -> ``{"status": "ok", "workers": N}`` (no token needed)
- ``POST /run`` with an ``ExecutionRequest`` -> an ``ExecutionResult``
- ``POST /batch`` with ``{"requests": [...]}`` -> ``{"results": [...]}``, in request order

``/run`` and ``/batch`` need ``Authorization: Bearer <token>``. Every answer is JSON; errors are
``{"error": message}``, the message naming what is wrong, and the connection is closed after them:

- 400: malformed JSON (including nesting too deep to parse, and ``NaN``/``Infinity`` or numbers
  out of a float's range, which JSON does not have), a request the schema refuses (e.g. a limit out
  of its range), a Content-Length that is not a whole number of bytes, a body that ends before its
  Content-Length, a request line or header h11 refuses;
- 401: missing or wrong token; 404, 405, 501 (a method HTTP does not have);
- 408: the request (request line, headers and body) did not arrive within ``read_timeout_s``;
- 411: no Content-Length (chunked bodies are not taken);
- 413: a body over ``max_request_bytes`` (answered from the headers, before any of the body is
  read), or more than :data:`MAX_BATCH` requests in one batch; 431: a head over :data:`MAX_HEAD_BYTES`;
- 503 with ``Retry-After``: ``max_in_flight`` calls of ``/run`` and ``/batch`` are already being
  served, or ``max_connections`` connections are open; the
  :class:`~codemoe.sandbox.remote.RemoteExecutor` waits and retries;
- 500: the executor itself failed (never for a failing program, which is a result).

Which bound comes from where (uvicorn's knobs, h11, this module, the edge) is in
``docs/reliability.md``, "The service's edge".
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hmac
import inspect
import json
import math
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

import uvicorn
from codemoe.sandbox._http_edge import EdgeLimits, EdgeProtocol
from codemoe.sandbox.api import ExecutionRequest, Executor
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

__all__ = ["TOKEN_ENV", "SandboxService", "serve_forever"]

TOKEN_ENV = "CODEMOE_SANDBOX_TOKEN"
MAX_BATCH = 4096  # requests in one /batch call
MAX_HEAD_BYTES = 64 << 10  # request line and headers together (http.server's line limit)
RETRY_AFTER_S = 1  # what a 503 tells the client to wait before it tries again
KEEP_ALIVE_S = 5  # uvicorn's timeout_keep_alive: an idle kept-alive connection is closed after it
GRACEFUL_S = 5  # uvicorn's timeout_graceful_shutdown: how long stop() waits for calls in flight
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"})


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON has (send finite numbers only)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:32]} is out of the range of a float")
    return value


def _loads(body: bytes) -> Any:
    """Strict JSON: no NaN or Infinity, no number that overflows a float; nesting too deep to
    parse is a ``ValueError`` like any other malformed input.
    """
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _answer(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer; after an error the connection is closed."""
    headers = dict(headers or {})
    if status >= 400:
        headers["Connection"] = "close"
    return Response(json.dumps(payload).encode(), status_code=status, headers=headers, media_type="application/json")


def _parse_run(payload: Any) -> ExecutionRequest:
    return ExecutionRequest.from_dict(payload)


def _parse_batch(payload: Any) -> list[ExecutionRequest]:
    requests = payload.get("requests") if isinstance(payload, dict) else None
    if not isinstance(requests, list):
        raise ValueError("a batch is {\"requests\": [request, ...]}")
    if len(requests) > MAX_BATCH:
        raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BATCH} requests per batch")
    return [ExecutionRequest.from_dict(r) for r in requests]


class _Server:
    """The service's socket, executor, bounds and counts (``SandboxService.server``)."""

    def __init__(self, address: tuple[str, int], executor: Executor, token: str, max_request_bytes: int,
                 verbose: bool, *, read_timeout_s: float, max_connections: int, max_in_flight: int) -> None:
        for name, value in (("max_connections", max_connections), ("max_in_flight", max_in_flight),
                            ("max_request_bytes", max_request_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
        if not (isinstance(read_timeout_s, (int, float)) and 0 < read_timeout_s <= 3600):
            raise ValueError(f"read_timeout_s must be more than 0 and at most 3600 seconds, got {read_timeout_s!r}")
        self.executor = executor
        self.token = token
        self.max_request_bytes = max_request_bytes
        self.read_timeout_s = float(read_timeout_s)
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # calls being served; only the event loop's thread changes it
        self.busy_answers = 0  # 503s answered so far
        self.request_queue_size = max(2048, 2 * max_connections)  # the listen backlog (uvicorn's default 2048)
        self.socket = socket.create_server(address, backlog=self.request_queue_size)
        self.server_address = self.socket.getsockname()
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="codemoe-sandbox-service")
        limits = EdgeLimits(read_timeout_s=self.read_timeout_s, max_request_bytes=max_request_bytes,
                            max_head_bytes=MAX_HEAD_BYTES, max_connections=max_connections)
        self.uvicorn = uvicorn.Server(uvicorn.Config(
            _application(self),
            http=functools.partial(EdgeProtocol, limits=limits, busy_app=self._too_many_connections),
            loop="asyncio", lifespan="off", ws="none", interface="asgi3",
            backlog=self.request_queue_size, timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=GRACEFUL_S, h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            server_header=False, access_log=verbose, log_level="info" if verbose else "error",
            log_config=_log_config() if verbose else None,
        ))

    # --- /run and /batch ------------------------------------------------------------------------

    async def call(self, request: Request, parse: Callable[[Any], Any]) -> Response:
        """Check the token and the framing, read the body, take a slot, and run ``parse``d requests
        on the executor in a thread of the pool (parsing and the answer's JSON too: a 32 MiB body
        must not stall the loop).
        """
        self._authorize(request.headers.get("authorization", ""))
        self._body_size(request.headers)
        try:
            body = await request.body()
        except ClientDisconnect:  # the edge answered (408, 400) or the client left: nothing to add
            return Response(status_code=HTTPStatus.BAD_REQUEST)
        # A slot is taken only once the body is in, so slow uploads do not hold slots.
        if self.in_flight >= self.max_in_flight:
            self.busy_answers += 1
            raise _HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"busy: {self.max_in_flight} calls are being served; retry in {RETRY_AFTER_S} s",
                {"Retry-After": str(RETRY_AFTER_S)},
            )
        self.in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, self._execute, parse, body)
        finally:
            self.in_flight -= 1

    def _execute(self, parse: Callable[[Any], Any], body: bytes) -> Response:
        try:
            parsed = self._parsed(parse, body)
            if isinstance(parsed, list):
                return _answer(HTTPStatus.OK, {"results": [r.to_dict() for r in self.executor.run_batch(parsed)]})
            return _answer(HTTPStatus.OK, self.executor.run(parsed).to_dict())
        except _HttpError as exc:
            return _answer(exc.status, {"error": str(exc)}, exc.headers)
        except Exception as exc:  # the executor failed: still an answer, never a dropped connection
            return _answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    @staticmethod
    def _parsed(parse: Callable[[Any], Any], body: bytes) -> Any:
        """The body decoded and turned into requests; a 400 names whatever is wrong."""
        try:
            payload = _loads(body)
        except ValueError as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"malformed JSON: {exc}") from None
        try:
            return parse(payload)
        except _HttpError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad request: {exc}") from None

    def _authorize(self, header: str) -> None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), self.token.encode()):
            raise _HttpError(HTTPStatus.UNAUTHORIZED, "missing or wrong token: send 'Authorization: Bearer <token>'")

    def _body_size(self, headers: Any) -> int:
        """The body's length, checked against the limit before any of it is read (h11 has already
        refused a Content-Length that is not a whole number, or two that differ)."""
        if "transfer-encoding" in headers:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "chunked bodies are not taken: send a Content-Length")
        if "content-length" not in headers:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
        size = int(headers["content-length"])
        if size > self.max_request_bytes:
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                             f"request body of {size} bytes is over the limit of {self.max_request_bytes} bytes")
        return size

    async def _too_many_connections(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI answer on a connection past ``max_connections``: 503 with ``Retry-After``."""
        self.busy_answers += 1
        response = _answer(HTTPStatus.SERVICE_UNAVAILABLE, {
            "error": f"busy: {self.max_connections} connections are open; retry in {RETRY_AFTER_S} s"},
            {"Retry-After": str(RETRY_AFTER_S)})
        await response(scope, receive, send)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.socket.close()


def _log_config() -> dict[str, Any]:
    """uvicorn's logging, every line on stderr (its access log goes to stdout by default)."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


def _application(server: _Server) -> FastAPI:
    # FastAPI's native OpenTelemetry (spans, metrics and logs per request; FastAPI releases that
    # have it) is off: with no provider it records nothing, yet it doubled the service's CPU per
    # call (0.94 against 0.55 ms, benchmarks/bench_service.py's instant executor)
    options: dict[str, Any] = {}
    if "telemetry" in inspect.signature(FastAPI).parameters:
        options["telemetry"] = {"tracing": False, "metrics": False, "logs": False}
    app = FastAPI(title="codemoe sandbox service", openapi_url=None, docs_url=None, redoc_url=None,
                  redirect_slashes=False, **options)

    @app.get("/health")
    async def health() -> Response:
        return _answer(HTTPStatus.OK, {"status": "ok", "workers": getattr(server.executor, "size", None)})

    @app.post("/run")
    async def run(request: Request) -> Response:
        return await server.call(request, _parse_run)

    @app.post("/batch")
    async def batch(request: Request) -> Response:
        return await server.call(request, _parse_batch)

    @app.exception_handler(_HttpError)
    async def refused(request: Request, exc: _HttpError) -> Response:
        return _answer(exc.status, {"error": str(exc)}, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def no_route(request: Request, exc: StarletteHTTPException) -> Response:
        method, path = request.method, request.url.path
        if method not in _METHODS:
            return _answer(HTTPStatus.NOT_IMPLEMENTED, {"error": f"{method[:32]} is not an HTTP method; use GET or POST"})
        if exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED:
            return _answer(exc.status_code, {"error": f"{method} is not supported on {path}; "
                                             "use GET /health, POST /run or POST /batch"})
        return _answer(exc.status_code, {"error": f"no such endpoint: {method} {path[:200]}; "
                                         "try GET /health, POST /run or POST /batch"})

    return app


class SandboxService:
    """An HTTP front for an executor; ``start()`` serves from a background thread.

    ``read_timeout_s``: how long a client has to send one whole request (and to read its answer);
    ``max_connections``: connections open at once, past which a request is answered 503 with
    ``Retry-After``; ``max_in_flight``: calls of ``/run`` and ``/batch`` served at once (each on a
    thread of a pool that size), past which the answer is 503 with ``Retry-After``.
    """

    def __init__(
        self,
        executor: Executor,
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_request_bytes: int = 32 << 20,
        verbose: bool = False,
        read_timeout_s: float = 60.0,
        max_connections: int = 1024,
        max_in_flight: int = 128,
    ) -> None:
        if not token:
            raise ValueError("the sandbox service needs a token")
        self.server = _Server((host, port), executor, token, max_request_bytes, verbose,
                              read_timeout_s=read_timeout_s, max_connections=max_connections,
                              max_in_flight=max_in_flight)
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8765``."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SandboxService:
        """Serve from a daemon thread (its own event loop); returns self once uvicorn listens."""
        server = self.server.uvicorn

        def serve() -> None:
            try:
                server.run(sockets=[self.server.socket])
            finally:
                self._stopped.set()

        self._thread = threading.Thread(target=serve, name="codemoe-sandbox-service", daemon=True)
        self._thread.start()
        give_up = time.monotonic() + 30
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > give_up:
                raise RuntimeError(f"the sandbox service on {self.url} did not start")
            time.sleep(0.005)
        return self

    def wait(self) -> None:
        """Block until the service stops; a signal handler's exception interrupts it.

        An event, not ``Thread.join``: a join interrupted by an exception marks the thread stopped
        while it still runs (CPython 3.11's bpo-45274 handling), so ``stop()`` would close the
        socket under uvicorn's own shutdown.
        """
        self._stopped.wait()

    def stop(self) -> None:
        """Stop serving (calls in flight get up to :data:`GRACEFUL_S` to finish) and close the
        socket; the executor is the caller's to close.
        """
        self.server.uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self.server.close()

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
        print(f"codemoe sandbox serving on {service.url} with {executor.size} workers", file=sys.stderr, flush=True)
        if generated:
            print(f"token (set {TOKEN_ENV} on clients): {token}", file=sys.stderr, flush=True)
        # Interrupts stop the service even when the launcher left SIGINT ignored (a background job
        # of a non-interactive shell does): Python only raises KeyboardInterrupt for a default SIGINT.
        # uvicorn serves from a thread here, so these handlers, not uvicorn's, get the signals.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            service.start().wait()
        except KeyboardInterrupt:
            pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            service.stop()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
