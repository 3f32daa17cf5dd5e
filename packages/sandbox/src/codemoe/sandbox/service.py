"""``codemoe sandbox serve``: executions over HTTP, so they can run on CPU machines apart from the GPUs.

Endpoints (JSON in, JSON out, the schema of :mod:`codemoe.sandbox.api`):

- ``GET /health`` -> ``{"status": "ok", "workers": N}`` (no token needed)
- ``POST /run`` with an ``ExecutionRequest`` -> an ``ExecutionResult``
- ``POST /batch`` with ``{"requests": [...]}`` -> ``{"results": [...]}``, in request order

``/run`` and ``/batch`` need ``Authorization: Bearer <token>``. Every answer is JSON; errors are
``{"error": message}``, the message naming what is wrong, and the connection is closed after them:

- 400: malformed JSON (including nesting too deep to parse, and ``NaN``/``Infinity`` or numbers
  out of a float's range, which JSON does not have), a request the schema refuses (e.g. a limit out
  of its range), a Content-Length that is not a whole number of bytes, a bad request line;
- 401: missing or wrong token; 404, 405, 501 (unknown method);
- 408: the request (request line, headers and body) did not arrive within ``read_timeout_s``;
- 411: no Content-Length (chunked bodies are not taken);
- 413: a body over ``max_request_bytes`` (answered from the headers, before any of the body is
  read), or more than :data:`MAX_BATCH` requests in one batch; 431: header lines too long or too many;
- 503 with ``Retry-After``: ``max_in_flight`` calls of ``/run`` and ``/batch`` are already being
  served; the :class:`~codemoe.sandbox.remote.RemoteExecutor` waits and retries;
- 500: the executor itself failed (never for a failing program, which is a result).

Bounds that keep the service answering: each connection is served by a thread, at most
``max_connections`` at once (more wait in a listen backlog of ``2 * max_connections``, at least
128); a client has ``read_timeout_s`` to send a whole request and to read its answer; after an error
the unread rest of a body is read away (at most ``max_request_bytes`` of it, for at most a second),
so the client reads the answer instead of a connection reset; nothing past the limit is read, so a
client still sending a body of more than about twice the limit may see the connection close instead.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import json
import math
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codemoe.sandbox.api import ExecutionRequest, Executor

__all__ = ["TOKEN_ENV", "SandboxService", "serve_forever"]

TOKEN_ENV = "CODEMOE_SANDBOX_TOKEN"
MAX_BATCH = 4096  # requests in one /batch call
RETRY_AFTER_S = 1  # what a 503 tells the client to wait before it tries again
_LINGER_S = 1.0  # after an error answer, how long the unread rest of the request is read away
_DIGITS = re.compile(r"[0-9]{1,19}")


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


class _DeadlineReader(io.RawIOBase):
    """The socket's input with one deadline for a whole request, however slowly it trickles in
    (a timeout per ``recv`` alone lets a client hold a thread by sending a byte now and then).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.deadline = math.inf
        self.received = 0  # bytes since :meth:`start`
        self.expired = False

    def readable(self) -> bool:
        return True

    def start(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.received = 0
        self.expired = False

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.expired = True
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(remaining)
        try:
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            self.expired = True
            raise
        self.received += n
        return n


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader, 1 << 16)
        self._unread: int | None = 0  # bytes of this request's body not read yet; None: unknown
        self._answered = False

    def handle_one_request(self) -> None:
        self._reader.start(self.server.read_timeout_s)
        self._unread, self._answered = None, False
        self.command, self.requestline, self.request_version = None, "", "HTTP/1.1"  # until parsed
        super().handle_one_request()  # a timeout anywhere in it closes the connection
        if self._reader.expired and self._reader.received and not self._answered:
            self._unread = 0  # a slow client: no lingering for the rest
            with contextlib.suppress(OSError):
                self._send_json(HTTPStatus.REQUEST_TIMEOUT, {
                    "error": f"the request did not arrive within {self.server.read_timeout_s:g} s"})

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        self._unread = self._declared_length()
        return True

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
        body = self._read_body(self._body_size())
        # A slot is taken only once the body is in, so slow uploads do not hold slots.
        if not self.server.in_flight.acquire(blocking=False):
            with self.server.counts_lock:
                self.server.busy_answers += 1
            raise _HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"busy: {self.server.max_in_flight} calls are being served; retry in {RETRY_AFTER_S} s",
                {"Retry-After": str(RETRY_AFTER_S)},
            )
        try:
            if self.path == "/run":
                return self.server.executor.run(self._parsed(ExecutionRequest.from_dict, body)).to_dict()
            parsed = self._parsed(self._batch, body)
            return {"results": [r.to_dict() for r in self.server.executor.run_batch(parsed)]}
        finally:
            self.server.in_flight.release()

    def _parsed(self, parse: Any, body: bytes) -> Any:
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

    @staticmethod
    def _batch(body: Any) -> list[ExecutionRequest]:
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list):
            raise ValueError("a batch is {\"requests\": [request, ...]}")
        if len(requests) > MAX_BATCH:
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BATCH} requests per batch")
        return [ExecutionRequest.from_dict(r) for r in requests]

    def _authorize(self) -> None:
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), self.server.token.encode()):
            raise _HttpError(HTTPStatus.UNAUTHORIZED, "missing or wrong token: send 'Authorization: Bearer <token>'")

    def _declared_length(self) -> int | None:
        """The body's length when its framing is a valid Content-Length, else None."""
        values = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") is not None or len(set(values)) > 1:
            return None
        if not values:
            return 0
        value = values[0].strip().lstrip("0") or "0"
        return int(value) if _DIGITS.fullmatch(value) else None

    def _body_size(self) -> int:
        """The body's length, checked against the limit before any of it is read."""
        values = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") is not None:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "chunked bodies are not taken: send a Content-Length")
        if not values:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
        if len(set(values)) != 1:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"conflicting Content-Length headers {values[:4]}")
        value = values[0].strip()
        value = value.lstrip("0") or ("0" if value else "")
        if not _DIGITS.fullmatch(value):
            if re.fullmatch(r"[0-9]+", value):  # more digits than any body could have
                raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body of {value[:32]}... bytes is "
                                 f"over the limit of {self.server.max_request_bytes} bytes")
            raise _HttpError(HTTPStatus.BAD_REQUEST,
                             f"bad Content-Length {value[:32]!r}: it must be a whole number of bytes, 0 or more")
        size = int(value)
        if size > self.server.max_request_bytes:
            raise _HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body of {size} bytes is over the limit of {self.server.max_request_bytes} bytes",
            )
        return size

    def _read_body(self, size: int) -> bytes:
        try:
            body = self.rfile.read(size)
        except TimeoutError:
            self._unread = 0
            raise _HttpError(HTTPStatus.REQUEST_TIMEOUT,
                             f"the request did not arrive within {self.server.read_timeout_s:g} s") from None
        if len(body) < size:
            self._unread = 0
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"the body ended after {len(body)} of {size} bytes")
        self._unread = 0
        return body

    def _respond(self, handler: Any) -> None:
        headers: dict[str, str] = {}
        try:
            status, payload = HTTPStatus.OK, handler()
        except _HttpError as exc:
            status, payload, headers = exc.status, {"error": str(exc)}, exc.headers
        except Exception as exc:  # the executor failed: still an answer, never a dropped connection
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(exc).__name__}: {exc}"}
        self._send_json(status, payload, headers)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The errors http.server finds itself (bad request line, header lines too long or too
        many, unknown method) are answered in JSON like the others.
        """
        if self.request_version == "HTTP/0.9":  # a request line too broken to tell: answer with headers
            self.request_version = "HTTP/1.1"
        text = message or HTTPStatus(code).phrase
        if explain and explain != text:
            text = f"{text}: {explain}"
        self._send_json(code, {"error": text})

    def send_response_only(self, code: int, message: str | None = None) -> None:
        self._answered = True
        self.connection.settimeout(self.server.read_timeout_s)  # a client that does not read is dropped too
        super().send_response_only(code, message)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        closing = status >= 400 or self._unread != 0  # after an error, or a body nobody read
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if closing:  # what is left of the request must not be taken for the next one
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        if closing:
            self._linger()

    def _linger(self) -> None:
        """Read away what the client still sends of this request (at most the body limit, for at
        most a second), so closing with unread input does not reset the connection before the
        client has read the answer.
        """
        if self._unread == 0:
            return
        budget = self.server.max_request_bytes if self._unread is None else min(self._unread, self.server.max_request_bytes)
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self._reader.start(_LINGER_S)
            while budget > 0:
                chunk = self.rfile.read1(min(budget, 1 << 16))
                if not chunk:
                    break
                budget -= len(chunk)
        self._unread = 0

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
                 verbose: bool, *, read_timeout_s: float = 60.0, max_connections: int = 256,
                 max_in_flight: int = 128) -> None:
        for name, value in (("max_connections", max_connections), ("max_in_flight", max_in_flight)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
        if not (isinstance(read_timeout_s, (int, float)) and 0 < read_timeout_s <= 3600):
            raise ValueError(f"read_timeout_s must be more than 0 and at most 3600 seconds, got {read_timeout_s!r}")
        self.request_queue_size = max(128, 2 * max_connections)  # the listen backlog, set before listen()
        super().__init__(address, _Handler)
        self.executor = executor
        self.token = token
        self.max_request_bytes = max_request_bytes
        self.verbose = verbose
        self.read_timeout_s = float(read_timeout_s)
        self.max_in_flight = max_in_flight
        self.in_flight = threading.BoundedSemaphore(max_in_flight)
        self.busy_answers = 0  # 503s answered so far
        self.counts_lock = threading.Lock()
        self._connections = threading.BoundedSemaphore(max_connections)
        self._stopping = False

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, at most ``max_connections`` at once: past them the next
        connection waits here (and the others in the listen backlog) until one ends.
        """
        while not self._connections.acquire(timeout=0.2):
            if self._stopping:
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is not an error of the service."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)) and not self.verbose:
            return
        super().handle_error(request, client_address)

    def shutdown(self) -> None:
        self._stopping = True
        super().shutdown()


class SandboxService:
    """An HTTP front for an executor; ``start()`` serves from a background thread.

    ``read_timeout_s``: how long a client has to send one whole request (and to read its answer);
    ``max_connections``: connections served at once, one thread each; ``max_in_flight``: calls of
    ``/run`` and ``/batch`` served at once, past which the answer is 503 with ``Retry-After``.
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
        max_connections: int = 256,
        max_in_flight: int = 128,
    ) -> None:
        if not token:
            raise ValueError("the sandbox service needs a token")
        self.server = _Server((host, port), executor, token, max_request_bytes, verbose,
                              read_timeout_s=read_timeout_s, max_connections=max_connections,
                              max_in_flight=max_in_flight)
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
