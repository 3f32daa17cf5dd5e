"""The worker's fork server: executions are cloned by a fresh, lean interpreter, stay the worker's
children, inherit nothing of the worker, and survive the fork server's death.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from codemoe.sandbox import ExecutionRequest, LocalExecutor, function_task_request

_FORK_SERVER = "codemoe.sandbox.forkserver"  # in the command line of a fresh fork server


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _fork_server(worker: int) -> int:
    servers = [p for p in _children(worker) if _FORK_SERVER in _cmdline(p)]
    assert len(servers) == 1, [_cmdline(p) for p in _children(worker)]
    return servers[0]


def test_executions_are_children_of_the_worker_cloned_by_a_fresh_fork_server(marker, python_request):
    """The worker supervises, reaps and accounts each execution as its own child; the process that
    cloned it is a fresh interpreter, not a fork of the worker.
    """
    with LocalExecutor(workers=1) as ex:
        worker = ex.worker_pids[0]
        _fork_server(worker)
        request = python_request("import time\ntime.sleep(2)\n", name=f"{marker}.py")
        done = []
        thread = threading.Thread(target=lambda: done.append(ex.run(request)))
        thread.start()
        try:
            deadline, found = time.monotonic() + 5, []
            while not found and time.monotonic() < deadline:
                found = [p for p in _children(worker) if marker in _cmdline(p)]
                time.sleep(0.02)
        finally:
            thread.join()
    assert found, "the execution was not a child of the worker"
    assert done[0].status == "passed", (done[0].reason, done[0].stderr)


def test_executions_start_with_the_common_modules_and_none_of_the_workers():
    """Programs find ``typing``, ``re``, ``decimal``, ... loaded already (their import costs
    nothing), and the worker's own modules (its checker, verdicts, supervision) are not in the
    process the execution was cloned from.
    """
    program = "import sys\nLOADED = sorted(sys.modules)\n\ndef loaded():\n    return LOADED\n"
    checks = (
        "def check(f):\n"
        "    names = set(f())\n"
        "    assert {'typing', 're', 'decimal', 'statistics', 'json', 'codemoe.sandbox.runners'} <= names, names\n"
        "    assert not names & {'codemoe.sandbox.worker', 'codemoe.sandbox.checker', 'codemoe.sandbox.verdict',\n"
        "                        'tempfile', 'shutil', 'pathlib'}, names\n"
    )
    with LocalExecutor(workers=1) as ex:
        result = ex.run(function_task_request(program, checks, "loaded"))
    assert result.status == "passed", (result.reason, result.stderr)


def test_an_execution_holds_no_descriptor_of_the_fork_server_or_the_worker():
    """Only stdio and the result channel: the fork server's socket to the worker and the memfd the
    request came in are closed before the program runs.
    """
    program = (
        "import os\n"
        "FDS = {}\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        FDS[fd] = os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except FileNotFoundError:  # the descriptor os.listdir read the folder with\n"
        "        pass\n\n"
        "def fds():\n"
        "    return sorted(FDS.items())\n"
    )
    checks = (
        "def check(f):\n"
        "    fds = dict(f())\n"
        "    assert sorted(fds, key=int) == ['0', '1', '2', '3'], fds\n"
        "    assert fds['3'].startswith('pipe:'), fds  # the result channel\n"
    )
    with LocalExecutor(workers=1) as ex:
        result = ex.run(function_task_request(program, checks, "fds"))
    assert result.status == "passed", (result.reason, result.stderr)


def test_the_fork_server_holds_only_its_socket_and_the_host_network_namespace():
    with LocalExecutor(workers=1) as ex:
        server = _fork_server(ex.worker_pids[0])
        fds = {int(fd): os.readlink(f"/proc/{server}/fd/{fd}") for fd in os.listdir(f"/proc/{server}/fd")}
    above_stdio = {fd: target for fd, target in fds.items() if fd > 2}
    assert above_stdio[3].startswith("socket:"), fds
    assert set(above_stdio) <= {3, 4}, fds
    assert all(target.startswith("net:") for fd, target in above_stdio.items() if fd == 4), fds


def test_a_fork_server_that_dies_is_replaced_and_executions_go_on():
    """Found gone when a request comes, it is reaped and replaced (by a fork of the worker), and
    the request goes to the new one.
    """
    inc = ("def inc(x):\n    return x + 1\n", "def check(f):\n    assert f(1) == 2\n", "inc")
    with LocalExecutor(workers=1) as ex:
        worker = ex.worker_pids[0]
        server = _fork_server(worker)
        os.kill(server, signal.SIGKILL)
        while _state(server) != "Z":  # gone (its socket closed), not reaped yet
            time.sleep(0.01)
        results = [ex.run(function_task_request(*inc)) for _ in range(3)]
        others = [p for p in _children(worker) if p != server]
        plain = ex.run(ExecutionRequest(command=["python", "-c", "print(6 * 7)"]))
    assert [r.status for r in results] == ["passed"] * 3, [r.reason for r in results]
    assert plain.stdout == "42\n"
    assert server not in others  # reaped
    assert len(others) == 3  # the pytest zygote, the checker and the new fork server
