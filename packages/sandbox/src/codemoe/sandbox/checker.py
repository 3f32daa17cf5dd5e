"""The worker's checker: the one process that decides an ``asserts`` verdict.

Forked once per worker (after the worker entered its namespaces), it gives up what it does not
need (its own user id when the worker is root, every capability, new privileges, the system calls
the seccomp filter refuses; it is not dumpable and cannot fork) and then answers one job at a time
over a pair of pipes only the worker holds: the task's checks, the names the program exported and
the transcript of the calls the program's own run of the checks made (:mod:`codemoe.sandbox.split`).
It runs the checks again over that transcript and answers ``{"message": None}`` when they ran to
their end, else the message that says why not.

An execution never reaches it: the checker is outside the execution's PID namespace (no PID to
signal or trace), under another user id (in root mode) and not dumpable, and the execution holds
none of its descriptors. Being long-lived, it costs no fork per execution: its pages are its own
after the first jobs, so a replay copies none. Checks are the task's code; their module-level
changes could outlive a job, so the checker is replaced every ``RESTART_AFTER`` jobs, after any
job that did not answer in time, and whenever it dies.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import random
import resource
import select
import signal
import sys
import time
from typing import Any

from codemoe.sandbox import linux, seccomp, split, wire

__all__ = ["CHECKER_UID_BASE", "CHECK_MODULES", "RESTART_AFTER", "Checker"]

CHECKER_UID_BASE = 2_000_000_000  # the checker of a root worker runs as this + the worker's PID
RESTART_AFTER = 500  # jobs one checker process serves
_MEMORY_MB = 2048  # address space of the checker
_CACHE = 256  # compiled checks kept, by source
_REPLY_LIMIT = 64 << 20  # bytes of one reply (a message and a traceback); the worker reads no longer one


class Checker:
    """The worker's side of its checker process."""

    def __init__(self, *, drop_uid: bool, use_seccomp: bool, cgroup: Any = None) -> None:
        self.drop_uid, self.use_seccomp, self.cgroup = drop_uid, use_seccomp, cgroup
        self.pid = 0
        self.jobs = 0
        self.sent = 0  # jobs submitted over this object's life; each job and its reply carry the number
        self.pending = 0  # the job whose reply result() waits for (0: none)
        self._start()

    def _start(self) -> None:
        jobs_r, jobs_w = os.pipe()
        replies_r, replies_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(jobs_w)
                os.close(replies_r)
                if self.cgroup is not None:  # out of the execution cgroup the worker lives in
                    self.cgroup.join_checker()
                _settle_checker(jobs_r, replies_w, drop_uid=self.drop_uid, use_seccomp=self.use_seccomp)
            except BaseException:
                os._exit(1)
            os._exit(_serve(jobs_r, replies_w))
        os.close(jobs_r)
        os.close(replies_w)
        self.pid, self.jobs_fd, self.replies_fd, self.jobs = pid, jobs_w, replies_r, 0

    def check(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """The checker's reply to ``job``, or None when it gave none within ``timeout_s`` (it is
        replaced then).
        """
        return self.result(timeout_s) if self.submit(job) else None

    def submit(self, job: dict[str, Any]) -> bool:
        """Hand ``job`` to the checker (its reply is read by :meth:`result`); False if it cannot be."""
        if self.pending:  # the last job's reply was never read: it must not answer this one
            self.restart()
        if self.jobs >= RESTART_AFTER:
            self.restart()
        self.jobs += 1
        self.sent += 1
        try:
            wire.send(self.jobs_fd, {**job, "id": self.sent})
        except OSError:
            self.restart()
            return False
        self.pending = self.sent
        return True

    def result(self, timeout_s: float) -> dict[str, Any] | None:
        """The reply to the job submitted last, or None when none came within ``timeout_s``. A reply
        to another job (none should be waiting) is dropped."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            try:
                ready, _, _ = select.select([self.replies_fd], [], [], max(0.0, deadline - time.monotonic()))
                reply = wire.receive(self.replies_fd, deadline=deadline, limit=_REPLY_LIMIT) if ready else None
            except (OSError, EOFError, ValueError):
                reply = None
            if not isinstance(reply, dict):
                self.restart()
                return None
            if reply.get("id") == self.pending:
                self.pending = 0
                return reply

    def abandon(self) -> None:
        """The submitted job's reply will not be read (the run ended over a limit): a fresh checker,
        so no reply of it is left to answer a later job."""
        if self.pending:
            self.restart()

    def restart(self) -> None:
        """Replace the checker process with a fresh one."""
        self.stop()
        self._start()
        self.pending = 0

    def stop(self) -> None:
        """End the checker process."""
        for fd in (self.jobs_fd, self.replies_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _settle_checker(jobs: int, replies: int, *, drop_uid: bool, use_seccomp: bool) -> None:
    """In the new checker process: keep only its two pipes (and stdio), and give up privileges."""
    low, high = sorted((jobs, replies))
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    parent = os.getppid()
    os.chdir("/")
    # the folder the worker started in (`python -m` puts it first: "/") would make every execution's
    # /tmp and /dev/shm a namespace package (`tmp.x`) an import in here could reach
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != "/"]
    if drop_uid:
        uid = CHECKER_UID_BASE + os.getppid()
        linux.drop_bounding_set()
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    # after the change of user: a change of credentials clears the parent-death signal (set before
    # it, a busy checker outlived its killed worker)
    linux.parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:  # the worker died before the signal was armed
        os._exit(1)
    linux.drop_capabilities()
    linux.no_new_privs()
    linux.set_dumpable(False)
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_MB << 20, _MEMORY_MB << 20))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0) if drop_uid else resource.getrlimit(resource.RLIMIT_NPROC))
    if use_seccomp:
        seccomp.install()


def _serve(jobs: int, replies: int) -> int:
    """Answer jobs until the worker closes ``jobs``."""
    _load_modules()
    cache: dict[str, Any] = {}
    while True:
        job = wire.receive(jobs)
        if job is None:
            return 0
        wire.send(replies, {**_check(job, cache), "id": job.get("id")})


# The modules the checks may be given in place of a module the program holds under a name they use
# (HumanEval/32's program imports `math`, its check calls `math.fabs`): the checker imports these
# itself before its first job, and never imports a module on a program's word. A standard-library
# module may run code when it is imported (`unittest.__main__` ran test discovery from "/", which
# imported the execution's /tmp as a package: the program's own code ran in the checker, graded
# every later job on the worker `passed` and kept their checks).
CHECK_MODULES = (
    "abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "collections.abc",
    "copy", "dataclasses", "datetime", "decimal", "difflib", "enum", "fractions", "functools", "hashlib",
    "heapq", "io", "itertools", "json", "math", "numbers", "operator", "os", "posixpath",
    "random", "re", "statistics", "string", "struct", "sys", "textwrap", "time", "types", "typing",
    "unicodedata", "zlib",
)
_MODULES: dict[str, Any] = {}  # CHECK_MODULES by name, filled by the checker before its first job


def _load_modules() -> None:
    for name in CHECK_MODULES:  # by the name a program's module object reports (os.path: posixpath)
        with contextlib.suppress(ImportError):
            _MODULES[name] = importlib.import_module(name)


def _known_module(name: str) -> Any:
    """The checker's own copy of a module the program holds under one of its names: one of
    :data:`CHECK_MODULES`, imported before the first job. Never another: the name is the program's
    to choose, and importing it would run code the program picked (a module it wrote in its /tmp,
    which is the checker's too, or a standard-library module that acts when imported)."""
    module = _MODULES.get(name)
    if module is None:
        raise ImportError(f"{name}: not a module the checks may be given (codemoe.sandbox.checker.CHECK_MODULES)")
    return module


def _check(job: dict[str, Any], cache: dict[str, Any]) -> dict[str, Any]:
    source = job.get("checks", "")
    code = cache.get(source)
    if code is None:
        try:
            code = compile(source, "checks.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            return {"message": {"kind": "compile-error", "file": "checks.py", "message": f"{type(exc).__name__}: {exc}"}}
        if len(cache) >= _CACHE:
            cache.clear()
        cache[source] = code
    random.seed(job.get("seed", 0))
    sys.argv = ["checks.py"]
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):  # the program's run printed them
        message = split.replay(code, job.get("names"), job.get("transcript"), _known_module)
    if message is None:
        return {"message": None}
    trace = message.pop("traceback", "")
    return {"message": message, "stderr": trace}
