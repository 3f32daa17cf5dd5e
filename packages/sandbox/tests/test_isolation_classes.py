"""Issue 14, build item 3: execution isolation closed by class, each shown against a real program in
a real sandbox (capabilities, seccomp, devpts, inode limits, cgroup, site-packages view).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_CAPS = (
    "import json\n"
    "caps = {}\n"
    "for line in open('/proc/self/status'):\n"
    "    if line.startswith('Cap'):\n"
    "        name, value = line.split(':')\n"
    "        caps[name] = int(value, 16)\n"
    "print(json.dumps(caps))\n"
)


def _caps_of(result) -> dict[str, int]:
    assert result.status == "passed", (result.reason, result.stderr)
    return json.loads(result.stdout)


def test_an_execution_holds_no_capability_and_cannot_regain_one(executor, python_request):
    caps = _caps_of(executor.run(python_request(_CAPS)))
    assert set(caps) >= {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
    assert caps == dict.fromkeys(caps, 0), caps


_USER_NS = f"""
import json
from codemoe.sandbox import worker
from codemoe.sandbox.api import ExecutionRequest
from codemoe.sandbox.isolation import IsolationPlan, prepare_worker, release_worker

# what a worker that is not root gets: root of a user namespace, with new PID and IPC namespaces
plan = IsolationPlan(user_ns=True, pid_ns=True, ipc_ns=True)
state = prepare_worker(plan)
result = worker.execute(ExecutionRequest(command=["python", "-c", {_CAPS!r}]), plan, state)
release_worker(state)
print(json.dumps(result.to_dict()))
"""


def test_root_of_a_user_namespace_keeps_no_capability_either():
    """Not root, the worker is root inside a user namespace, with every capability there (ptrace
    of its siblings, mounts, ...): its executions must hold none of them.
    """
    done = subprocess.run([sys.executable, "-c", _USER_NS], capture_output=True, text=True, timeout=60)
    if "unshare" in done.stderr:
        pytest.skip(f"no user namespace here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    caps = _caps_of_dict(json.loads(done.stdout))
    assert caps == dict.fromkeys(caps, 0), caps


def _caps_of_dict(result: dict) -> dict[str, int]:
    assert result["status"] == "passed", result
    return json.loads(result["stdout"])
