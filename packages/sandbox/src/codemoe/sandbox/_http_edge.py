"""The sandbox service's HTTP/1.1 edge: uvicorn's h11 protocol plus what uvicorn leaves to others.

What uvicorn (its h11 protocol, read in ``uvicorn/protocols/http/h11_impl.py``) does not do, and
this subclass adds, per connection:

- **A deadline per request.** uvicorn's only timer is ``timeout_keep_alive``, armed when a response
  completes and cancelled by any byte received: a connection that sends nothing, or part of a request
  line, of its headers or of its body, is held for ever. Here a request (line, headers and body) has
  ``read_timeout_s`` from the start of its cycle, however slowly it trickles in; past it a client
  that sent part of a request gets a 408, one that sent nothing is closed, and one that has not read
  its answer by then is cut off.
- **JSON for protocol errors.** uvicorn answers h11's parse errors with a text/plain 400 (whatever
  h11's status hint); here every answer is ``{"error": ...}`` with h11's status (431 for a head too
  long), a bad ``Content-Length`` is named with its value, and a body that ends early is a 400.
- **A hard head limit.** h11's ``max_incomplete_event_size`` holds only while a head is incomplete,
  so a whole oversized head that arrives in one read is parsed; here any head over
  ``max_head_bytes`` is a 431.
- **Lingering close.** uvicorn closes after an error with the rest of the request unread, and the
  kernel then resets the connection, which can reach the client before it has read the answer.
  Here such a close half-closes and reads away what the client still sends (at most
  ``max_request_bytes``, for at most :data:`LINGER_S`) before closing, as nginx's lingering close does.
- **A connection cap answered with ``Retry-After``.** uvicorn's ``limit_concurrency`` answers a
  text/plain 503 without ``Retry-After``, which the ``remote`` client does not wait out; here a
  connection past ``max_connections`` is served by the service's own JSON 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["LINGER_S", "EdgeLimits", "EdgeProtocol"]

LINGER_S = 1.0  # how long the unread rest of a request is read away before an error's close
_REQUEST_DONE = (h11.DONE, h11.MUST_CLOSE)  # the client's side once a whole request is in
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r?$")


@dataclass(frozen=True)
class EdgeLimits:
    """The bounds the edge holds each connection to."""

    read_timeout_s: float  # to send one whole request, and to read its answer
    max_request_bytes: int  # the largest body; also what a lingering close reads away at most
    max_head_bytes: int  # request line and headers together
    max_connections: int  # open at once; past them a request gets the busy answer


class _Connection(h11.Connection):
    """h11's connection, keeping the protocol error it raised (uvicorn's handler only gets a text)."""

    error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.error = exc
            raise


class _Transport:
    """The transport as uvicorn sees it: its ``close()`` is the edge's (lingering when the request
    is not all in); everything else is the real transport's.
    """

    def __init__(self, real: asyncio.Transport, edge: EdgeProtocol) -> None:
        self._real, self._edge, self._closing = real, edge, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def is_closing(self) -> bool:
        return self._closing or self._real.is_closing()

    def close(self) -> None:
        self._closing = True
        self._edge.close_connection()


class EdgeProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline per request, JSON protocol errors, a hard head limit,
    lingering close and a connection cap (see the module's docstring for why each).

    ``busy_app`` is the ASGI app that answers requests on connections past ``max_connections``.
    """

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, limits: EdgeLimits, busy_app: Any) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.conn = _Connection(h11.SERVER, limits.max_head_bytes)
        self.limits = limits
        self._busy_app = busy_app
        self._real: asyncio.Transport = None  # type: ignore[assignment]
        self._deadline: asyncio.TimerHandle | None = None
        self._received = 0  # bytes of the current request so far
        self._head = bytearray()  # the current request's head, until h11 has parsed it
        self._searched = 0  # how much of _head has been searched for its end
        self._lingering = False
        self._linger_budget = 0
        self._eof = False
        self._lost = False

    # --- the connection's life ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._real = transport
        if len(self.connections) >= self.limits.max_connections:
            self.app = self._busy_app
        super().connection_made(_Transport(transport, self))  # type: ignore[arg-type]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._linger_budget -= len(data)
            if self._linger_budget <= 0:
                self._real.close()
            return
        self._received += len(data)
        if self.conn.their_state is h11.IDLE and self._head_too_long(data):
            self._unset_keepalive_if_required()
            self._answer(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                         f"the request line and headers are over {self.limits.max_head_bytes} bytes")
            return
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.ERROR):
            self._head.clear()
            self._searched = 0

    def eof_received(self) -> bool | None:
        """The client closed its side: a request cut short is a 400 naming what is missing (h11's
        words); a whole request still gets its answer; otherwise the connection closes.
        """
        if self._lingering:
            return None
        self._eof = True
        state = self.conn.their_state
        if state is h11.SEND_BODY or (state is h11.IDLE and self._received):
            self.conn.receive_data(b"")
            self.handle_events()  # h11 raises on the cut; send_400_response answers it
            return True
        return state in _REQUEST_DONE and self.cycle is not None and not self.cycle.response_complete

    def on_response_complete(self) -> None:
        pending = self.conn.trailing_data[0]  # a pipelined next request's first bytes
        self._received, self._head, self._searched = len(pending), bytearray(pending), 0
        self._arm()
        super().on_response_complete()

    # --- uvicorn's hooks --------------------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """h11 refused the request: answer in JSON with h11's status and reason."""
        error = self.conn.error
        status = error.error_status_hint if error is not None else HTTPStatus.BAD_REQUEST
        text = str(error) if error is not None else msg
        if "Content-Length" in text and "conflicting" not in text:
            status, text = self._content_length_error()
        self._answer(status, text)

    def close_connection(self) -> None:
        """Close; while the client may still be sending (an error answered before its request was
        all in), half-close and read the rest away first.
        """
        if self._lost or self._lingering or self._real.is_closing():
            return
        if self._eof or self.conn.their_state in (*_REQUEST_DONE, h11.CLOSED):
            self._real.close()
            return
        self._lingering = True
        self._linger_budget = self.limits.max_request_bytes
        self._unset_keepalive_if_required()
        if self._real.can_write_eof():
            self._real.write_eof()  # the answer, then FIN: the client reads it, then closes too
        self._real.resume_reading()
        self.loop.call_later(LINGER_S, self._real.close)

    # --- the edge's own answers -------------------------------------------------------------------

    def _arm(self) -> None:
        """Start the current request's deadline."""
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.limits.read_timeout_s, self._deadline_passed)

    def _deadline_passed(self) -> None:
        self._deadline = None
        if self._lost or self._lingering:
            return
        if self._real.is_closing() or self._real.get_write_buffer_size():
            self._real.abort()  # an answer the client has not read in time
            return
        if self.conn.their_state in _REQUEST_DONE:
            return  # the request is in: its execution has no deadline here (limits bound it)
        if self._received:
            self._answer(HTTPStatus.REQUEST_TIMEOUT,
                         f"the request did not arrive within {self.limits.read_timeout_s:g} s", linger=False)
        else:
            self._real.close()  # nothing was sent

    def _answer(self, status: int, message: str, *, linger: bool = True) -> None:
        """Answer ``status`` with ``{"error": message}`` and close, in place of the application
        (which then sees a disconnect, its answer dropped).
        """
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:  # half an answer is out: nothing sound can follow it
                self._real.abort()
                return
            cycle.disconnected = True
            cycle.message_event.set()
        body = json.dumps({"error": message}).encode()
        head = (f"HTTP/1.1 {int(status)} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
        self._real.write(head.encode("latin-1") + body)
        if linger:
            self.transport.close()
        else:
            self._real.close()

    def _head_too_long(self, data: bytes) -> bool:
        self._head += data
        limit = self.limits.max_head_bytes
        end = self._head.find(b"\r\n\r\n", max(0, self._searched - 3), limit + 4)
        self._searched = len(self._head)
        return end == -1 and len(self._head) > limit

    def _content_length_error(self) -> tuple[int, str]:
        """h11 refused the Content-Length: name the value (and a 413 for more digits than h11 takes)."""
        found = _CONTENT_LENGTH.findall(self._head)
        value = found[0].decode("latin-1") if found else ""
        if value.isascii() and value.isdigit():
            return (HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"request body of {value[:32]}... bytes is over the limit of {self.limits.max_request_bytes} bytes")
        return HTTPStatus.BAD_REQUEST, f"bad Content-Length {value[:32]!r}: it must be a whole number of bytes, 0 or more"
