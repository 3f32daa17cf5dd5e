"""The warm worker: the interpreter, common modules and pytest loaded, executions cloned by fork servers.

``python -m codemoe.sandbox.worker [PATHS_JSON]`` probes the protections once, forks a second worker
(the pytest zygote) that imports pytest and warms it up with one empty session (``pytest`` runs go
there, so everything else forks from a leaner process), forks its fork server
(:mod:`codemoe.sandbox.forkserver`, as the zygote does its own) before it reads any request, says it
is ready, then serves one execution at a time: it reads a request from its standard input, has the
fork server clone an isolated child for it as this process's own (:mod:`codemoe.sandbox.isolation`,
:mod:`codemoe.sandbox.runners`), supervises it (deadline, output caps, result channel), and writes
the :class:`ExecutionResult` to its standard output. Messages on both pipes are framed by
:mod:`codemoe.sandbox.wire`. The worker itself never runs untrusted code, and no execution is a
fork of a process that has read a request.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import importlib.util
import json
import os
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codemoe.sandbox import linux, wire
from codemoe.sandbox.api import ExecutionRequest, ExecutionResult
from codemoe.sandbox.checker import Checker
from codemoe.sandbox.forkserver import ForkServer, ForkServerGone, nproc_base
from codemoe.sandbox.isolation import (
    WORK_DIR,
    IsolationPlan,
    WorkerState,
    enter,
    finish_execution,
    oom_killed,
    prepare_execution,
    prepare_worker,
    probe,
    release_worker,
    seal_files,
)
from codemoe.sandbox.runners import (
    EXIT_SETUP_FAILED,
    ChildSetup,
    child_setup,
    run_in_child,
    sandbox_env,
    stdio_objects,
)
from codemoe.sandbox.verdict import Observation, decide, opened

__all__ = ["execute", "main"]

_CHANNEL_CAP = 64 << 20  # bytes of result-channel messages kept (an asserts transcript among them)
_DRAIN_S = 0.5  # after the child is gone, how long to wait for the last output

# Modules programs commonly import, loaded once here instead of in every execution.
PRELOAD = (
    "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "fractions", "functools",
    "hashlib", "heapq", "itertools", "json", "math", "operator", "random", "re", "statistics", "string",
    "typing",
)
# what tests import besides pytest's own modules, loaded in the pytest fork server: imported once
# there, not in every run, and in the environment snapshot (codemoe.sandbox.pristine), which covers
# only what the server had loaded before any code under test
TEST_PRELOAD = (
    *PRELOAD, "asyncio", "cmath", "concurrent.futures", "configparser", "csv", "doctest", "gzip", "pickle",
    "queue", "tempfile", "textwrap", "unittest", "unittest.mock", "zipfile",
)
# what tests import from site-packages, loaded in the pytest fork server where the executions' view of
# site-packages shows it (the default view does: DEFAULT_SITE_PACKAGES)
SITE_PRELOAD = ("numpy", "numpy.testing")
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class _Stream:
    """One pipe from the child, read with a cap."""

    fd: int
    cap: int
    counts: bool = True  # going over the cap stops the run (stdout, stderr; not the channel)
    data: bytearray = field(default_factory=bytearray)
    total: int = 0
    closed: bool = False  # the write end is gone (end of file seen)

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def over(self) -> bool:
        return self.total > self.cap


def execute(request: ExecutionRequest, plan: IsolationPlan, state: WorkerState,
            checker: Checker | None = None, fork_server: ForkServer | None = None, *,
            later: list[Callable[[], None]] | None = None) -> ExecutionResult:
    """Run ``request`` in a new isolated child of this (single-threaded) worker, cloned by
    ``fork_server`` (:mod:`codemoe.sandbox.forkserver`; else by this process).

    Everything the supervision and the child need is made before the clone: while the child
    lives, each page either process writes is copied, so both do as little as possible then.
    ``later``: where given, dropping the execution's files (every process of it is gone by then) is
    appended to it rather than done here; the caller runs it before the next execution. Unmounting a
    tmpfs waits for an RCU grace period (tens of microseconds, two per execution), which the
    worker then spends after its answer is on its way rather than before.
    """
    limits = request.limits
    work = prepare_execution(plan, state, limits.disk_mb, memory_mb=limits.memory_mb, processes=limits.max_processes)
    # From here on every path, whatever raises, kills and reaps the child and drops the work dir.
    pid = 0  # the child, from the clone until it is reaped
    streams: dict[int, _Stream] = {}
    write_ends: list[int] = []  # the child's; this process closes them once it is forked
    poller = None
    verdict: _Verdict | None = None  # an asserts run's, from the clone on
    try:
        setup = child_setup(request, work, "/tmp" if plan.mount_ns else work, state.environ,  # a private tmpfs, or the work dir
                            seal=plan.seal and request.runner == "pytest")
        if setup.sealed:
            seal_files(work, [(p, c) for p, c in setup.files if p in setup.sealed], state.uid)
        poller = select.epoll()
        for cap, counts in ((limits.max_output_bytes, True), (limits.max_output_bytes, True), (_CHANNEL_CAP, False)):
            read_end, write_end = os.pipe()  # stdout, stderr, the result channel
            streams[read_end] = _Stream(read_end, cap, counts=counts)
            write_ends.append(write_end)
            poller.register(read_end, select.EPOLLIN)
        out_w, err_w, chan_w = write_ends
        start = time.monotonic()
        flags = plan.clone_flags(limits.network)
        if fork_server is not None:
            pid = fork_server.spawn(flags, request, setup, in_cgroup=state.execution is not None,
                                    fds=(out_w, err_w, chan_w))
        else:
            pid = linux.clone(flags) if flags else os.fork()
        if pid == 0:
            try:
                run_in_child(
                    request,
                    setup,
                    enter=lambda: enter(plan, state, work, network=limits.network),
                    fds=(out_w, err_w, chan_w),
                    nproc_base=nproc_base(plan),
                )
            finally:  # the child never returns into this process's code
                os._exit(EXIT_SETUP_FAILED)
        while write_ends:
            os.close(write_ends.pop())
        verdict = _Verdict(request, setup, streams, checker) if request.runner == "asserts" else None
        wall_timeout, output_limit = _supervise(pid, poller, streams, start + limits.timeout_s,
                                                verdict.start if verdict is not None else None)
        _, status, usage = os.wait4(pid, 0)
        reaped, pid = pid, 0
        duration = time.monotonic() - start
        oom_kill = oom_killed(state)  # the execution's cgroup counted one (its processes are gone)
        if not plan.pid_ns:
            _kill_group(reaped)
        _drain(poller, streams)
        if verdict is not None and not wall_timeout and not output_limit:
            wall_timeout = verdict.finish(start + limits.timeout_s - time.monotonic())
            duration = time.monotonic() - start
        elif verdict is not None:  # over a limit after the job went to the checker: its reply is never read
            verdict.abandon()
    except BaseException:
        if pid > 0:  # supervision or the wait failed: the child must not outlive this call
            _kill(pid)
            if not plan.pid_ns:
                _kill_group(pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        raise
    finally:
        for fd in write_ends:  # the fork failed, or never came
            os.close(fd)
        if poller is not None:
            poller.close()
        for fd in streams:
            os.close(fd)
        if later is None:
            finish_execution(plan, work)
        else:
            later.append(functools.partial(finish_execution, plan, work))
    out, err, channel = streams.values()
    # an asserts run's record is the verdict's, whatever happened: the program's own messages with
    # its "done" dropped, and the checker's reply (none if the checker was never asked: the channel
    # held open past the deadline, output over the limit after the program's last line)
    messages = (verdict.messages if verdict is not None
                else opened(_messages(bytes(channel.data), limits.memory_mb), request.nonce))
    return _result(request, setup, out, err, messages, status, usage, duration, wall_timeout, output_limit,
                   oom_kill=oom_kill)


class _Verdict:
    """An asserts run's verdict: the program's transcript handed to the checker as soon as the
    result channel closes (the program closes it once the transcript is written, so the checker
    works while the kernel tears the execution down), the checker's reply put on the channel's
    record in place of anything the program sent as one.
    """

    def __init__(self, request: ExecutionRequest, setup: ChildSetup, streams: dict[int, _Stream],
                 checker: Checker | None) -> None:
        self.request, self.setup, self.streams, self.checker = request, setup, streams, checker
        self.started = self.submitted = False
        self.own = False
        self.messages: list[dict[str, Any]] = []  # the channel's record: the program's, then the checker's

    def start(self) -> None:
        """Read the closed channel and submit the job (once)."""
        if self.started:
            return
        self.started = True
        request, channel = self.request, list(self.streams.values())[2]
        messages = [m for m in _messages(bytes(channel.data), request.limits.memory_mb)
                    if m.get("nonce") == request.nonce and m.get("kind") != "done"]
        transcripts = [m for m in messages if m.get("kind") == "transcript"]
        self.messages = [m for m in messages if m.get("kind") != "transcript"]
        failed = any(m.get("kind") in ("compile-error", "exception", "exit", "memory", "setup-error") for m in self.messages)
        if len(transcripts) != 1 or failed:
            return
        job = {"checks": request.files["checks.py"], "names": transcripts[0].get("names"),
               "transcript": transcripts[0].get("transcript"), "seed": self.setup.seed}
        if self.checker is None:  # a caller of execute() without a worker's checker: a one-off one
            self.checker, self.own = Checker(drop_uid=False, use_seccomp=False), True
        self.submitted = self.checker.submit(job)

    def abandon(self) -> None:
        """The run ended over a limit: the submitted job's reply is not wanted."""
        if self.submitted and self.checker is not None:
            if self.own:
                self.checker.stop()
            else:
                self.checker.abandon()

    def finish(self, remaining_s: float) -> bool:
        """Wait for the checker's reply; True when it did not come in the time left (a timeout)."""
        self.start()
        if not self.submitted:
            return False
        try:
            reply = self.checker.result(remaining_s)
        finally:
            if self.own:
                self.checker.stop()
        if reply is None:
            return True
        message = reply.get("message") if isinstance(reply.get("message"), dict) else {"kind": "done"}
        self.messages.append({**message, "nonce": self.request.nonce})
        err = list(self.streams.values())[1]
        trace = reply.get("stderr")
        if isinstance(trace, str) and trace:
            err.feed(trace.encode())
        return False


def _supervise(pid: int, poller: select.epoll, streams: dict[int, _Stream], deadline: float,
               channel_closed: Callable[[], None] | None = None) -> tuple[bool, bool]:
    """Read the child's pipes until it exits; kill it at the deadline or on too much output.
    ``channel_closed`` is called when the result channel reaches its end (no more can come).

    Returns (killed at the deadline, killed for too much output).
    """
    pidfd = os.pidfd_open(pid)
    poller.register(pidfd, select.EPOLLIN)
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(remaining):
                if fd == pidfd:
                    return False, False
                chunk = os.read(fd, 1 << 16)
                stream = streams[fd]
                if not chunk:
                    poller.unregister(fd)
                    stream.closed = True
                    if not stream.counts and channel_closed is not None:
                        channel_closed()
                    continue
                stream.feed(chunk)
                if stream.over and stream.counts:
                    _kill(pid)
                    return False, True
        _kill(pid)
        return True, False
    finally:
        poller.unregister(pidfd)
        os.close(pidfd)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _drain(poller: select.epoll, streams: dict[int, _Stream]) -> None:
    """Read what is left in the pipes; bounded, in case something still holds a write end."""
    deadline = time.monotonic() + _DRAIN_S
    open_fds = {fd for fd, stream in streams.items() if not stream.closed}
    while open_fds and (remaining := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(remaining):
            chunk = os.read(fd, 1 << 16)
            if chunk:
                streams[fd].feed(chunk)
            else:
                poller.unregister(fd)
                open_fds.discard(fd)


def _messages(raw: bytes, memory_mb: float) -> list[dict[str, Any]]:
    """The result channel's JSON lines; anything else on it is ignored: a line that is not JSON, one
    nested too deep to decode, and one of more values than a quarter of the execution's memory holds
    at 64 bytes each (an empty dict and its list slot take 72 here). The worker decodes the channel
    once the program is gone, for the program: 63 MB of ``{},`` grew past a GiB here (and OOM-killed
    the worker while it lived in the execution's cgroup), a deep ``[[[[`` raised out of the decoder;
    either must cost the program its verdict, not the worker its life or the verdict a sandbox fault."""
    most = max(1 << 16, int(memory_mb * (1 << 20) / 4 / 64))
    messages = []
    for line in raw.splitlines():
        if line.count(b",") >= most:
            continue
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(message, dict):
            messages.append(message)
    return messages


def _result(
    request: ExecutionRequest,
    setup: ChildSetup,
    out: _Stream,
    err: _Stream,
    messages: list[dict[str, Any]],
    status: int,
    usage: Any,
    duration: float,
    wall_timeout: bool,
    output_limit: bool,
    oom_kill: bool = False,
) -> ExecutionResult:
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    stdout = bytes(out.data).decode("utf-8", errors="replace")
    stderr = bytes(err.data).decode("utf-8", errors="replace")
    observation = Observation(
        runner=request.runner,
        nonce=request.nonce,
        exit_code=exit_code,
        signal=signum,
        wall_timeout=wall_timeout,
        output_limit=output_limit,
        cpu_s=usage.ru_utime + usage.ru_stime,
        cpu_limit_s=float(max(1, int(request.limits.cpu_s + 0.999))),
        max_file_mb=request.limits.max_file_mb,
        stderr_tail=stderr[-4000:],
        messages=messages,
        oom_kill=oom_kill,
        canaries=setup.canaries,
        canaries_required=setup.canaries_required,
        canary_replaced=setup.canary_replaced,
    )
    verdict, reason, tests, integrity = decide(observation)
    return ExecutionResult(
        status=verdict,
        exit_code=exit_code,
        tests=tests,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=out.over,
        stderr_truncated=err.over,
        duration_s=round(duration, 6),
        peak_memory_mb=round(usage.ru_maxrss / 1024, 3),
        id=request.id,
        reason=reason,
        integrity=integrity,
        signal=signum,
    )


_WARM_TESTS = """\
def test_warm():
    assert [1] == [1]


def _fails(value):
    assert value == [2]


def test_warm_fails():
    _fails([1])
"""


def _warm_up() -> None:
    """Run one pytest session here, a test passing and a test failing, so that what pytest loads
    or builds on first use (lazily imported modules; on Python 3.11 the tokenizer patterns a
    failure report compiles) is there for every fork."""
    import codemoe.sandbox.pytest_report  # noqa: F401  (the runner's plugin, loaded once here)
    import pytest
    from codemoe.sandbox import honest

    for name in TEST_PRELOAD:
        importlib.import_module(name)

    honest.install()  # every test module's comparisons checked (codemoe.sandbox.honest), warmed up below

    with tempfile.TemporaryDirectory(prefix="codemoe-warm-") as folder:
        with open(os.path.join(folder, "test_warm.py"), "w") as f:
            f.write(_WARM_TESTS)
        saved = [os.dup(1), os.dup(2)]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", folder, folder])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, devnull):
                os.close(fd)
        sys.modules.pop("test_warm", None)


def _index_module_files() -> None:
    """Fill ``inspect``'s index of which loaded module each source file is.

    pytest formats every failure's traceback through ``inspect.getsource``, whose
    ``inspect.getmodule`` indexes every module in ``sys.modules`` by its real path
    (``os.path.realpath``: a ``stat`` per path component) the first time a file is not in the
    index yet. Done here, after the mount namespace is entered, the index holds the zygote's
    hundreds of preloaded modules under the paths executions see, and a fork only indexes the
    modules its own run imported (the repository's and its tests'): measured, 43% of a failing
    run's pytest time went to that indexing before (``docs/performance.md``, "pytest runs").
    """
    import inspect

    inspect.getmodule(None, os.path.join(os.sep, "codemoe-index-modules.py"))  # a file no module has


def _preload_site_modules() -> None:
    """Import ``SITE_PRELOAD`` where executions can (the site-packages view shows it; this runs in
    the worker's mount namespace), one BLAS thread each: a fork server must have no thread pool.

    Then the snapshot holds numpy's functions too: a ``np.allclose = lambda *a, **k: True`` in the
    code under test made a test that asks ``np.allclose(result, expected)`` pass when numpy was first
    imported by the execution itself. And no execution imports numpy again (~0.1 s each)."""
    if importlib.util.find_spec(SITE_PRELOAD[0]) is None:
        return
    saved = {name: os.environ.get(name) for name in _BLAS_THREADS}
    os.environ.update(dict.fromkeys(_BLAS_THREADS, "1"))
    try:
        for name in SITE_PRELOAD:
            importlib.import_module(name)
    except Exception:  # a broken install: executions import it themselves and see why
        pass
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _index_and_snapshot() -> None:
    """The last of the pytest fork server's warm-up: what tests import from site-packages, the
    module index, then the snapshot of everything loaded (:mod:`codemoe.sandbox.pristine`), which
    each execution's reporter checks."""
    from codemoe.sandbox import pristine

    _preload_site_modules()
    _index_module_files()
    pristine.guard_tracing()
    pristine.take()


def _serve(control_in: int, control_out: int, plan: IsolationPlan, state: WorkerState,
           pytest_zygote: _Zygote | None, checker: Checker | None = None,
           fork_server: ForkServer | None = None) -> int:
    """Answer requests until ``control_in`` closes; pytest requests go to ``pytest_zygote``. Once its
    fork server is gone (the OOM killer may take it where executions can lower their own score), no
    request runs here: each is answered at once as not cloned (a replacement fork server would be a
    fork of a process that has read requests), and the executor sends it to a fresh worker."""
    gone = False
    later: list[Callable[[], None]] = []  # the last execution's cleanup, done once its answer is sent
    while True:
        message = wire.receive(control_in)
        if message is None:
            return 0
        if pytest_zygote is not None and message.get("runner") == "pytest":
            wire.send(pytest_zygote.requests, message)
            answer = wire.receive(pytest_zygote.answers)
            if answer is None:
                raise EOFError("the pytest zygote exited")
            wire.send(control_out, answer)
            continue
        try:
            if gone:
                raise ForkServerGone("the fork server ended")
            request = ExecutionRequest.from_dict(message)
            result = execute(request, plan, state, checker, fork_server, later=later)
        except Exception as exc:  # a bad request or a failed clone: answer with an error result
            gone = gone or isinstance(exc, ForkServerGone)
            result = ExecutionResult(status="error", id=str(message.get("id", "")),
                                     reason=f"sandbox: {type(exc).__name__}: {exc}")
        try:
            wire.send(control_out, result.to_dict())
        finally:
            while later:
                later.pop(0)()
        gone = gone or (fork_server is not None and not fork_server.alive())


def _settle(plan: IsolationPlan, warm: Callable[[], None] | None = None) -> WorkerState:
    """Enter the worker's namespaces, take on the environment of executions (every work dir is
    the same path in a mount namespace, so children need not set it), run ``warm`` (work every
    fork would otherwise repeat, done once where forks see what it sees) and freeze what is
    loaded, so collections in forks do not touch (and so copy) its pages.
    """
    state = prepare_worker(plan)
    if plan.mount_ns:
        state.environ = sandbox_env(ExecutionRequest(files={}), WORK_DIR, "/tmp")
        os.environ.clear()
        os.environ.update(state.environ)
        time.tzset()
    if warm is not None:
        warm()
    gc.collect()
    gc.freeze()
    return state


def _start_fork_server(plan: IsolationPlan, state: WorkerState) -> ForkServer:
    """This settled process's fork server, forked before it reads any request; then this process
    leaves the execution cgroup for its checker's leaf (the fork server, born there, stays)."""
    server = ForkServer(plan, state)
    if state.cgroup is not None:
        state.cgroup.checker.join()
    return server


@dataclass
class _Zygote:
    """The pytest fork server as its parent sees it."""

    pid: int
    requests: int  # fd we write requests to
    answers: int  # fd we read results from

    def stop(self) -> None:
        """Close its input and wait: it cleans up after itself before it exits."""
        os.close(self.requests)
        os.close(self.answers)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _start_pytest_zygote(plan: IsolationPlan) -> _Zygote:
    """Fork a second fork server with pytest loaded and warmed up, and wait until it is ready.

    Runs of the ``pytest`` runner go there; everything else is served by this lean process, whose
    smaller memory makes each fork cheaper.
    """
    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(to_child)
        os.close(from_child)
        linux.parent_death_signal(signal.SIGKILL)
        _warm_up()
        state = _settle(plan, _index_and_snapshot)
        fork_server = _start_fork_server(plan, state)
        wire.send(to_parent, {"ready": True})
        code = _serve(from_parent, to_parent, plan, state, None, fork_server=fork_server)
        fork_server.stop()
        release_worker(state)
        os._exit(code)
    os.close(from_parent)
    os.close(to_parent)
    if not (wire.receive(from_child) or {}).get("ready"):
        raise RuntimeError("the pytest zygote did not start")
    return _Zygote(pid, to_child, from_child)


def main(argv: list[str] | None = None) -> int:
    """Serve executions over stdin/stdout until stdin closes.

    ``argv``: one optional JSON object ``{"hide": [...], "expose": [...], "site_packages": [...],
    "seal": true}``: the directories to hide besides the non-system ones, those executions may still
    read, what they see of site-packages, and whether graded runs' task files are sealed (see
    :func:`probe`).
    """
    args = sys.argv[1:] if argv is None else argv
    paths = json.loads(args[0]) if args else {}
    sys.dont_write_bytecode = True
    control_in, control_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # the control pipes live on control_in/out only; 0 and 1 are the children's
    os.dup2(devnull, 1)
    os.close(devnull)
    stdio_objects()
    plan = probe(hide=paths.get("hide", ()), expose=paths.get("expose", ()), site_packages=paths.get("site_packages"),
                 seal=paths.get("seal", True))
    pytest_zygote = _start_pytest_zygote(plan)
    for name in PRELOAD:
        importlib.import_module(name)
    state = _settle(plan)
    fork_server = _start_fork_server(plan, state)
    checker = Checker(drop_uid=plan.drop_uid, use_seccomp=plan.seccomp, cgroup=state.cgroup)
    wire.send(control_out, {"ready": True, "protections": [p.to_dict() for p in plan.protections]})
    try:
        return _serve(control_in, control_out, plan, state, pytest_zygote, checker, fork_server)
    finally:
        fork_server.stop()
        checker.stop()
        pytest_zygote.stop()
        release_worker(state)


if __name__ == "__main__":
    raise SystemExit(main())
