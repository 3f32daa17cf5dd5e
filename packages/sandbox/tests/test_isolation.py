"""Issue 4's isolation list: each protection shown against a real program, in a real sandbox."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, LocalExecutor
from codemoe.sandbox.isolation import interpreter_paths


@pytest.mark.slow
def test_infinite_loop_times_out_on_time_and_leaves_no_process(executor, python_request, processes_with, marker):
    name = f"spin_{marker}.py"
    request = python_request("while True:\n    pass\n", name=name, timeout_s=1.0)
    started = time.monotonic()
    result = executor.run(request)
    elapsed = time.monotonic() - started
    assert result.status == "timeout"
    assert result.duration_s < 1.5 and elapsed < 1.5
    assert processes_with(name) == []


@pytest.mark.parametrize(
    "source",
    [
        "import re\nre.match(r'(a|aa)*c', 'a' * 80)\n",  # backtracking inside the C regex engine
        "x = 10 ** (10 ** 9)\n",  # one C-level big-int power
    ],
    ids=["regex", "bigint"],
)
def test_c_level_heavy_loop_is_stopped_never_hangs(executor, python_request, source):
    result = executor.run(python_request(source, timeout_s=1.0))
    assert result.status in ("timeout", "memory")
    assert result.duration_s < 1.5


def test_8_gib_allocation_is_a_memory_error_and_siblings_pass(executor, python_request):
    hog = python_request("data = bytearray(8 * 1024 ** 3)\nprint(len(data))\n", memory_mb=512)
    siblings = [python_request(f"print(sum(range({n})))") for n in (10, 100, 1000)]
    results = executor.run_batch([hog, *siblings])
    assert results[0].status == "memory"
    assert [r.status for r in results[1:]] == ["passed"] * 3
    assert [r.stdout.strip() for r in results[1:]] == ["45", "4950", "499500"]


@pytest.mark.slow
def test_fork_bomb_is_contained_and_the_host_stays_usable(executor, python_request, processes_with, marker):
    name = f"bomb_{marker}.py"
    bomb = python_request(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        name=name,
        timeout_s=2.0,
        max_processes=32,
    )
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", executor.run(bomb)))
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    host = subprocess.run([sys.executable, "-c", "print('host ok')"], capture_output=True, text=True, timeout=20)
    host_s = time.monotonic() - started
    thread.join(30)
    result = box["result"]
    assert host.stdout.strip() == "host ok" and host_s < 10
    assert result.status == "timeout" and result.duration_s < 3.5  # killing 32 processes takes a moment
    assert processes_with(name) == []
    after = executor.run(python_request("print('after')"))
    assert after.status == "passed" and after.stdout == "after\n"


def test_grandchild_sleep_is_killed_when_the_program_ends(executor, python_request, processes_with, marker):
    seconds = f"1000.{int(marker, 16) % 10**9}"  # a sleep no other process has
    source = (
        "import os, subprocess\n"
        f"subprocess.Popen(['sleep', '{seconds}'], start_new_session=True)\n"
        f"if os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['sleep', '{seconds}'])\n"
        "print('started')\n"
    )
    result = executor.run(python_request(source))
    assert result.status == "passed" and result.stdout == "started\n"
    assert processes_with(f"sleep {seconds}") == []


def test_100_mb_file_is_a_file_size_error(executor, python_request):
    source = "with open('big.bin', 'wb') as f:\n    f.write(b'x' * (100 * 1024 * 1024))\n"
    result = executor.run(python_request(source, max_file_mb=16))
    assert result.status == "failed"
    assert "file-size limit" in result.reason
    assert "File too large" in result.stderr


def test_writing_outside_the_work_dir_is_denied(executor, python_request, tmp_path):
    host_tmp = tmp_path / "from-sandbox.txt"
    repo_file = os.path.join(os.path.dirname(__file__), "from-sandbox.txt")
    prefix_file = os.path.join(sys.prefix, "from-sandbox.txt")
    source = (
        "import os\n"
        f"for path in [{str(host_tmp)!r}, {repo_file!r}, {prefix_file!r}, '/etc/from-sandbox']:\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('denied', path, exc.errno)\n"
        "open('inside.txt', 'w').write('ok')\n"
        "print('inside', open('inside.txt').read())\n"
    )
    result = executor.run(python_request(source))
    assert result.status == "passed", result.stderr
    assert "inside ok" in result.stdout
    for line in result.stdout.splitlines()[1:4]:
        assert line.startswith("denied"), line
    # the host /tmp is not the sandbox's /tmp: nothing written there reaches the host
    assert not host_tmp.exists() and not os.path.exists(repo_file) and not os.path.exists(prefix_file)
    assert not os.path.exists("/etc/from-sandbox")


def test_outbound_network_and_dns_fail_while_loopback_works(executor, python_request):
    source = (
        "import socket, threading\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('outbound ok')\n"
        "except OSError as exc:\n    print('outbound failed', exc.errno)\n"
        "try:\n    socket.getaddrinfo('pypi.org', 443)\n    print('dns ok')\n"
        "except OSError:\n    print('dns failed')\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "port = server.getsockname()[1]\n"
        "threading.Thread(target=lambda: server.accept()[0].sendall(b'pong'), daemon=True).start()\n"
        "print('loopback', socket.create_connection(('127.0.0.1', port)).recv(4).decode())\n"
    )
    result = executor.run(python_request(source))
    assert result.status == "passed", result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("outbound failed")
    assert lines[1] == "dns failed"
    assert lines[2] == "loopback pong"


def test_host_secret_is_invisible(monkeypatch, python_request):
    secret = "codemoe-secret-8c2f1e"
    monkeypatch.setenv("CODEMOE_TEST_SECRET", secret)
    source = (
        "import os\n"
        "print(sorted(os.environ))\n"
        "print(os.environ.get('CODEMOE_TEST_SECRET'))\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n            print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "        except OSError:\n            pass\n"
        "try:\n    print(os.listdir('/root'))\n"
        "except OSError:\n    print([])\n"  # hidden dirs may be enterable but not listable
    )
    with LocalExecutor(workers=1) as ex:
        result = ex.run(python_request(source))
    assert result.status == "passed", result.stderr
    assert secret not in result.stdout
    assert "CODEMOE_TEST_SECRET" not in result.stdout
    # home directories are hidden: only the interpreter's own folder may show through
    allowed = {p.split("/")[2] for p in interpreter_paths() if p.startswith("/root/")}
    assert set(ast.literal_eval(result.stdout.splitlines()[-1])) <= allowed


def test_memory_limit_holds_when_the_parent_process_is_large(python_request):
    ballast = bytearray(1024 ** 3)
    ballast[:: 1 << 12] = b"x" * len(ballast[:: 1 << 12])  # really resident, not just reserved
    with LocalExecutor(workers=1) as ex:
        small = ex.run(python_request("import os\nb = bytearray(64 * 1024 * 1024)\nprint(len(b))\n", memory_mb=256))
        big = ex.run(python_request("b = bytearray(512 * 1024 * 1024)\n", memory_mb=256))
    del ballast
    assert small.status == "passed" and small.peak_memory_mb < 256
    assert big.status == "memory"


def test_hash_seed_and_time_zone_are_fixed(executor, python_request):
    source = "import time\nprint(hash('codemoe'), time.strftime('%Z'))\n"
    first, second = executor.run_batch([python_request(source), python_request(source)])
    host = subprocess.run(
        [sys.executable, "-c", "print(hash('codemoe'))"],
        env={"PYTHONHASHSEED": "0", "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
    )
    assert first.stdout == second.stdout
    assert first.stdout.split() == [host.stdout.strip(), "UTC"]
    in_process = executor.run(ExecutionRequest(
        files={"program.py": "print(hash('codemoe'))\n", "checks.py": ""}, runner="asserts"))
    assert in_process.stdout.strip() == host.stdout.strip()


def test_cpu_limit_is_a_timeout(executor, python_request):
    result = executor.run(python_request("while True:\n    pass\n", timeout_s=10.0, cpu_s=1.0))
    assert result.status == "timeout"
    assert "CPU" in result.reason  # the CPU limit, not the 10 s wall clock, ended it


def test_huge_output_is_truncated_and_stops_the_run(executor):
    request = ExecutionRequest(
        files={"main.py": "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n"},
        command=["python", "main.py"],
        limits=Limits(timeout_s=5.0, max_output_bytes=100_000),
    )
    result = executor.run(request)
    assert result.status == "output-limit"
    assert result.stdout_truncated and not result.stderr_truncated
    assert len(result.stdout) == 100_000 and set(result.stdout) == {"y"}


def test_invalid_utf8_output_is_replaced_not_fatal(executor, python_request):
    source = "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')\nsys.stderr.buffer.write(b'\\xc3')\n"
    result = executor.run(python_request(source))
    assert result.status == "passed"
    assert result.stdout == "ok \ufffd\ufffd end\n"
    assert result.stderr == "\ufffd"


def test_stdin_env_and_peak_memory(executor, python_request):
    request = python_request(
        "import os, sys\nb = bytearray(200 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\n"
        "print(sys.stdin.read().upper(), os.environ['GREETING'])\n",
        memory_mb=1024,
    )
    request.stdin = "hello"
    request.env = {"GREETING": "hi"}
    result = executor.run(request)
    assert result.status == "passed", result.stderr
    assert result.stdout == "HELLO hi\n"
    assert 200 <= result.peak_memory_mb < 400


def test_missing_command_and_crash_statuses(executor, python_request):
    missing = executor.run(ExecutionRequest(command=["no-such-program-xyz"]))
    assert missing.status == "error" and "no-such-program-xyz" in missing.reason
    crash = executor.run(python_request("import ctypes\nctypes.string_at(0)\n"))
    assert crash.status == "killed" and crash.signal == 11
    failing = executor.run(python_request("raise SystemExit(3)"))
    assert failing.status == "failed" and failing.exit_code == 3


def test_network_flag_gives_the_host_interfaces_and_default_only_loopback(executor, python_request):
    source = "import socket\nprint(sorted(name for _, name in socket.if_nameindex()))\n"
    isolated = executor.run(python_request(source))
    host_network = executor.run(python_request(source, network=True))
    host = sorted(name for _, name in socket.if_nameindex())
    assert ast.literal_eval(isolated.stdout) == ["lo"]
    assert ast.literal_eval(host_network.stdout) == host


FALLBACK = """
import json, os, sys
from codemoe.sandbox import worker
from codemoe.sandbox.api import ExecutionRequest, Limits, function_task_request
from codemoe.sandbox.isolation import IsolationPlan, prepare_worker, release_worker

plan = IsolationPlan()  # what a machine without any namespace gets
state = prepare_worker(plan)
requests = [
    function_task_request("def f():\\n    return 1\\n", "def check(c):\\n    assert c() == 1\\n", "f"),
    function_task_request("def f():\\n    return 2\\n", "def check(c):\\n    assert c() == 1\\n", "f"),
    ExecutionRequest(command=["python", "-c", "while True: pass"], limits=Limits(timeout_s=1.0)),
    ExecutionRequest(command=["sh", "-c", "sleep 1000.25 & echo started"]),
]
results = [worker.execute(r, plan, state).to_dict() for r in requests]
release_worker(state)
print(json.dumps({"results": results, "root_left": os.path.exists(state.fallback_root)}))
"""


def test_without_namespaces_limits_and_verdicts_still_hold(processes_with):
    done = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    statuses = [r["status"] for r in answer["results"]]
    assert statuses == ["passed", "failed", "timeout", "passed"]
    assert answer["results"][3]["stdout"] == "started\n"
    assert not answer["root_left"]
    # the background sleep shared the execution's process group, which was killed at the end
    assert processes_with("sleep 1000.25") == []



def test_in_process_runner_sees_exactly_the_execution_environment(executor):
    """The asserts runner inherits the worker's environment when the request adds nothing, and
    takes the request's variables otherwise: in ``os.environ``, the C environment that a
    subprocess gets, and the time zone.
    """
    program = (
        "import os, subprocess, time\n"
        "seen = {k: os.environ.get(k) for k in ('HOME', 'TMPDIR', 'TZ', 'PYTHONHASHSEED', 'EXTRA')}\n"
        "child = subprocess.run(['sh', '-c', 'echo $HOME $TZ ${EXTRA:-none}'], capture_output=True, text=True)\n"
        "print(sorted(os.environ), seen, child.stdout.strip(), time.timezone, os.getcwd())\n"
    )
    plain, extra, plain_again = executor.run_batch([
        ExecutionRequest(files={"program.py": program, "checks.py": ""}, runner="asserts"),
        ExecutionRequest(files={"program.py": program, "checks.py": ""}, runner="asserts", env={"EXTRA": "x"}),
        ExecutionRequest(files={"program.py": program, "checks.py": ""}, runner="asserts"),
    ])
    names = ["HOME", "LANG", "LC_ALL", "MALLOC_ARENA_MAX", "PATH", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
             "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "TMPDIR", "TZ"]
    work = plain.stdout.split()[-1]  # /tmp/work in a mount namespace, else a fresh host folder
    tmp = "/tmp" if work == "/tmp/work" else work
    base = {"HOME": work, "TMPDIR": tmp, "TZ": "UTC", "PYTHONHASHSEED": "0", "EXTRA": None}
    assert plain.stdout == f"{names} {base} {work} UTC none 0 {work}\n", plain.stderr
    assert plain_again.stdout == plain.stdout
    with_extra = sorted([*names, "EXTRA"])
    work = extra.stdout.split()[-1]
    tmp = "/tmp" if work == "/tmp/work" else work
    expected = dict(base, HOME=work, TMPDIR=tmp, EXTRA="x")
    assert extra.stdout == f"{with_extra} {expected} {work} UTC x 0 {work}\n", extra.stderr


def test_no_tcp_socket_outlives_its_execution_in_time_wait(python_request):
    """The executions of a worker share its network namespace: a server that closed first left its
    port in TIME_WAIT for a minute, so the next execution's server could not bind it (an honest
    program failed), and the ports of connections left closing carried data to later runs."""
    leave = (
        "import socket\n"
        "srv = socket.socket()\nsrv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "srv.bind(('127.0.0.1', 8765))\nsrv.listen()\n"
        "c = socket.create_connection(('127.0.0.1', 8765))\nconn, _ = srv.accept()\n"
        "conn.close()\nc.recv(1)\nc.close()\nsrv.close()\n"  # the server's side closes first
    )
    serve = ("import socket\nsrv = socket.socket()\nsrv.bind(('127.0.0.1', 8765))\nsrv.listen()\n"
             "print([line.split()[1] for line in open('/proc/net/tcp').read().splitlines()[1:]])\n")
    with LocalExecutor(workers=1) as ex:
        first, second = ex.run(python_request(leave)), ex.run(python_request(serve))
    assert first.passed, first.stderr
    assert second.passed, second.stderr  # EADDRINUSE before
    assert second.stdout == "['0100007F:223D']\n", second.stdout  # its own listener (port 8765) only


def test_nothing_carries_over_between_executions_of_one_worker(python_request):
    leave = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(0x5EED, 4096, 0o1000 | 0o600) >= 0)\n"  # IPC_CREAT: a System V segment
        "open('/dev/shm/left-behind', 'w').write('x')\n"
        "open('/tmp/left-behind', 'w').write('x')\n"
        "open('left-behind', 'w').write('x')\n"
    )
    look = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(0x5EED, 0, 0) >= 0)\n"
        "print([p for p in ('/dev/shm/left-behind', '/tmp/left-behind', 'left-behind') if os.path.exists(p)])\n"
    )
    with LocalExecutor(workers=1) as ex:
        first, second = ex.run(python_request(leave)), ex.run(python_request(look))
    assert first.stdout == "True\n", first.stderr
    assert second.stdout == "False\n[]\n", second.stderr
