"""The ``local`` executor: a pool of warm, isolated workers on this machine.

Each worker is a fresh ``python -m codemoe.sandbox.worker`` process (never a fork of the caller,
so a large trainer process does not make the workers large), started with a scrubbed environment.
Each worker hides every host directory
an execution has no business seeing (:mod:`codemoe.sandbox.isolation`): what is outside the system
directories, the caller's working directory, the codemoe checkout and ``hide_paths``. A request
goes to an idle worker, whose fork server clones an isolated child for it; ``run_batch`` keeps every
worker busy. A worker that dies is replaced and its request answered with status ``error``; one
whose fork server is gone answers every request as not cloned, and that request goes to a fresh
worker (it never ran).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemoe.sandbox import wire
from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, new_nonce
from codemoe.sandbox.errors import SandboxError
from codemoe.sandbox.grading import Grading
from codemoe.sandbox.isolation import default_hidden_paths

__all__ = ["LocalExecutor", "LocalExecutorConfig", "build_local_executor", "default_workers"]


@dataclass
class LocalExecutorConfig:
    """Options of the ``local`` executor."""

    workers: int = 0  # warm workers, i.e. executions at once; 0 means one per CPU
    start_timeout_s: float = 60.0  # how long a worker may take to start and warm up
    # directories (or files) executions must not see, besides everything outside the system
    # directories (/usr, /etc, /lib*, ...), the caller's working directory and the codemoe checkout,
    # which are always hidden; for data under a system directory, e.g. /usr/local/share/data
    hide_paths: list[str] = dataclasses.field(default_factory=list)
    # directories executions may still read (read-only) although they would be hidden, e.g. a
    # shared library folder under /opt that programs load
    expose_paths: list[str] = dataclasses.field(default_factory=list)
    # what executions see of site-packages: distributions (with their dependencies) or top-level
    # modules; None means DEFAULT_SITE_PACKAGES (pytest, pip and numpy, where installed); everything
    # else installed there (answer keys, the trainer's own libraries) stays hidden
    site_packages: list[str] | None = None


def build_local_executor(config: LocalExecutorConfig) -> LocalExecutor:
    """Factory of the ``local`` executor."""
    return LocalExecutor(workers=config.workers, start_timeout_s=config.start_timeout_s,
                         hide_paths=config.hide_paths, expose_paths=config.expose_paths,
                         site_packages=config.site_packages)


def default_workers() -> int:
    """One worker per CPU this process may use (as ``codemoe.core.devices.usable_cpus`` counts them:
    the sandbox installs and runs without codemoe-core, so it keeps its own copy)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _worker_env() -> dict[str, str]:
    """Nothing of the caller's environment reaches a worker, so none of it can reach a program."""
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding codemoe/
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": package_root,
    }


def _failure(request: ExecutionRequest, exc: BaseException) -> ExecutionResult:
    return ExecutionResult(status="error", id=request.id, reason=f"sandbox: the worker failed ({exc})")


# the reason of a result whose execution was never cloned (the worker's fork server was gone): safe to send again
_NOT_CLONED = "sandbox: ForkServerGone"


class _Worker:
    """One worker process and its pipes; used by one thread at a time."""

    def __init__(self, paths: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-s", "-m", "codemoe.sandbox.worker", paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_worker_env(),
            cwd="/",
            close_fds=True,
        )
        self.protections: list[dict[str, Any]] = []

    def wait_ready(self, timeout_s: float) -> None:
        box: dict[str, Any] = {}

        def read() -> None:
            try:
                box["message"] = wire.receive(self.process.stdout.fileno())
            except (OSError, EOFError, ValueError) as exc:
                box["error"] = exc

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        message = box.get("message")
        if not message or not message.get("ready"):
            self.stop()
            why = box.get("error") or ("no answer" if reader.is_alive() else "it exited")
            raise SandboxError(
                f"a sandbox worker did not start within {timeout_s:g} s ({why}); "
                "run `codemoe sandbox doctor` to see what this machine allows"
            )
        self.protections = message.get("protections", [])

    def answer(self) -> ExecutionResult:
        """The worker's answer to the request it was sent last."""
        answer = wire.receive(self.process.stdout.fileno())
        if answer is None:
            raise EOFError("the worker exited")
        return ExecutionResult.from_dict(answer)

    def stop(self) -> None:
        """Close its input so it cleans up and exits; kill it if it does not within a second."""
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        try:
            self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class LocalExecutor(Grading):
    """Runs requests in isolated children of warm workers on this machine.

    >>> from codemoe.sandbox import LocalExecutor, function_task_request
    >>> with LocalExecutor(workers=1) as ex:
    ...     ex.run(function_task_request("def inc(x):\\n    return x + 1\\n",
    ...                                  "def check(f):\\n    assert f(1) == 2\\n", "inc")).status
    'passed'
    """

    def __init__(
        self,
        workers: int = 0,
        *,
        start_timeout_s: float = 60.0,
        hide_paths: list[str] | tuple[str, ...] = (),
        expose_paths: list[str] | tuple[str, ...] = (),
        site_packages: list[str] | tuple[str, ...] | None = None,
        seal_files: bool = True,
    ) -> None:
        """``seal_files``: graded pytest runs lay the task's files out read-only, in folders that
        cannot be moved (the default, where the machine allows it: ``doctor`` says); False leaves
        them writable, so only the comparison with what the caller sent finds a change to them (as
        on a machine that cannot seal them; the tests of that comparison use it).
        """
        self.size = workers or default_workers()
        self.start_timeout_s = start_timeout_s
        # fixed now: the caller's working directory when the executor is made is the one hidden
        self._paths = json.dumps({"hide": default_hidden_paths(hide_paths), "expose": list(expose_paths),
                                  "site_packages": None if site_packages is None else list(site_packages),
                                  "seal": seal_files})
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._waiting = 0  # callers blocked for an idle worker: a batch hands its freed workers to them
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        started = [_Worker(self._paths) for _ in range(self.size)]
        try:
            for worker in started:
                worker.wait_ready(start_timeout_s)
        except SandboxError:
            for worker in started:
                worker.stop()
            raise
        for worker in started:
            self._all.append(worker)
            self._idle.put(worker)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (each execution is a child of one of them), e.g. to account
        their CPU time.
        """
        return [worker.process.pid for worker in self._all]

    @property
    def protections(self) -> list[dict[str, Any]]:
        """The protections the workers found active (see ``codemoe sandbox doctor``)."""
        return self._all[0].protections if self._all else []

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request on the next idle worker."""
        request = self._admit(request)
        worker = self._take()
        try:
            worker, result = self._run_on(worker, request)
            return result
        finally:
            self._idle.put(worker)

    def run_batch(self, requests: list[ExecutionRequest]) -> list[ExecutionResult]:
        """Run all requests, as many at once as there are workers; results in request order.

        One thread drives every worker it holds: it sends each idle one the next request and reads
        the answers as they come (a thread per worker cost the caller a thread switch and a wake-up
        per execution). It takes every idle worker nobody else is waiting for, and a worker it
        frees while another caller waits goes to that caller: concurrent callers (a service's
        clients) share the workers request by request, as they did when each request of a batch
        waited for a worker on its own.
        """
        admitted = [self._admit(r) for r in requests]  # every request checked before any runs
        if len(admitted) <= 1:
            return [self.run(r) for r in admitted]
        results: list[ExecutionResult | None] = [None] * len(admitted)
        waiting = list(range(len(admitted) - 1, -1, -1))  # popped from the end: request order
        held: list[_Worker] = []  # workers this call holds without a request on them
        busy: dict[int, tuple[_Worker, int]] = {}  # a worker's answer pipe -> (the worker, its request)
        poller = select.poll()
        worker = None  # the one being handled: back to the idle ones if its replacement cannot start
        try:
            while waiting or busy:
                if waiting and not busy and not held:
                    held.append(self._take())
                if not self._waiting:  # nobody else waits: every idle worker may take a request
                    while len(held) < len(waiting):
                        try:
                            held.append(self._idle.get_nowait())
                        except queue.Empty:
                            break
                while held:  # every held worker gets the next request, or goes back
                    worker = held.pop()
                    if not waiting:
                        self._idle.put(worker)
                        continue
                    index = waiting.pop()
                    try:
                        worker = self._live(worker)
                        wire.send(worker.process.stdin.fileno(), admitted[index].to_dict())
                    except (OSError, EOFError, ValueError) as exc:
                        results[index] = _failure(admitted[index], exc)
                        held.append(self._replace(worker))
                        continue
                    fd = worker.process.stdout.fileno()
                    busy[fd] = (worker, index)
                    poller.register(fd, select.POLLIN)
                worker = None
                for fd, _ in poller.poll() if busy else ():
                    worker, index = busy.pop(fd)
                    poller.unregister(fd)
                    worker, results[index] = self._answer(worker, admitted[index])
                    if self._waiting or not waiting:
                        self._idle.put(worker)  # another caller waits for it, or this call is done with it
                    else:
                        held.append(worker)
                    worker = None
        finally:
            if worker is not None:
                self._idle.put(worker)
            for stranded, _ in busy.values():  # interrupted with requests in flight: their answers are unread
                self._idle.put(self._replace_quietly(stranded))
            for idle in held:
                self._idle.put(idle)
        return [r for r in results if r is not None]

    def _take(self) -> _Worker:
        """The next idle worker, waiting for one (counted, so batches hand theirs over)."""
        with self._lock:
            self._waiting += 1
        try:
            return self._idle.get()
        finally:
            with self._lock:
                self._waiting -= 1

    def _admit(self, request: ExecutionRequest) -> ExecutionRequest:
        if self._closed:
            raise SandboxError("this executor is closed")
        request.validate()
        if request.runner is not None and not request.nonce:
            request = dataclasses.replace(request, nonce=new_nonce())
        return request

    def _run_on(self, worker: _Worker, request: ExecutionRequest) -> tuple[_Worker, ExecutionResult]:
        """``request`` run on ``worker``, from the send to the answer: (the worker now, its result)."""
        try:
            worker = self._live(worker)
            wire.send(worker.process.stdin.fileno(), request.to_dict())
        except (OSError, EOFError, ValueError) as exc:
            return self._replace(worker), _failure(request, exc)
        return self._answer(worker, request)

    def _live(self, worker: _Worker) -> _Worker:
        """``worker``, or a fresh one in its place if it ended since its last answer."""
        return self._replace(worker) if worker.process.poll() is not None else worker

    def _answer(self, worker: _Worker, request: ExecutionRequest) -> tuple[_Worker, ExecutionResult]:
        """Read ``worker``'s answer to ``request`` (sent to it already); one that was never cloned
        (the worker's fork server was gone) runs again on a fresh worker. A worker that fails (its
        pipes break, or it answers nonsense) is replaced, and the result is a sandbox error."""
        try:
            result = worker.answer()
            if result.status == "error" and result.reason.startswith(_NOT_CLONED):  # it never ran there
                worker = self._replace(worker)
                wire.send(worker.process.stdin.fileno(), request.to_dict())
                result = worker.answer()
        except (OSError, EOFError, ValueError) as exc:
            return self._replace(worker), _failure(request, exc)
        return worker, result

    def _replace_quietly(self, worker: _Worker) -> _Worker:
        try:
            return self._replace(worker)
        except SandboxError:
            return worker

    def _replace(self, worker: _Worker) -> _Worker:
        """A fresh worker in the place of ``worker``; ``SandboxError`` once the executor is closed
        (``close`` stopped every worker, the one a call in flight held included)."""
        worker.stop()
        with self._lock:
            if self._closed:
                raise SandboxError("this executor was closed during the call")
        fresh = _Worker(self._paths)
        fresh.wait_ready(self.start_timeout_s)
        with self._lock:
            if self._closed or worker not in self._all:
                fresh.stop()
                raise SandboxError("this executor was closed during the call")
            self._all[self._all.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        """Stop every worker (an execution still running is killed with its worker)."""
        with self._lock:
            self._closed = True
            workers, self._all = self._all, []
        for worker in workers:
            worker.stop()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_all", None):
            self.close()
