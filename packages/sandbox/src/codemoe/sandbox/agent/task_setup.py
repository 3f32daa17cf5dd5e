"""A task's setup commands, run inside the sandboxed test execution before pytest collects anything.

SWE-bench-style instances install their repository before the tests run (``pip install --no-deps
--no-build-isolation -e .``) or put a source folder on the path (``PYTHONPATH=src``). The sandbox's
``pytest`` runner runs pytest in a process forked from a warm worker, so it has no step before the
tests and an environment variable such as ``PYTHONPATH`` is never read again. This module is the
pytest plugin that a task with setup adds to its test runs: its source is laid in the work dir as
:data:`PLUGIN_FILE` (the sandbox hides the host's copy of codemoe) and loaded with ``-p``. In the
sandboxed child, before the first ``conftest.py`` is imported, it

1. runs each command of ``CODEMOE_TASK_SETUP`` (a JSON list of shell commands) in the work dir,
   with ``PIP_PREFIX`` pointing at a folder inside it (everything else is read-only) and pip kept
   offline (``PIP_NO_INDEX``); the first command that fails stops the run with a
   ``pytest.UsageError`` whose message starts with :data:`SETUP_FAILED` and names the command;
2. puts the ``PYTHONPATH`` entries (relative to the work dir) and that prefix's site-packages
   (its ``.pth`` files processed, so editable installs work) on ``sys.path``, ahead of the
   sandbox's own packages, as a fresh interpreter in a fresh environment would see them.

Everything here runs inside the sandbox, under the execution's limits; the host only passes the
commands through the request's environment.
"""

from __future__ import annotations

import importlib
import json
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pluggy

__all__ = ["PLUGIN", "PLUGIN_FILE", "PREFIX_DIR", "SETUP_ENV", "SETUP_FAILED", "plugin_source", "prepare"]

PLUGIN = "_codemoe_task_setup"  # the name given to ``pytest -p``
PLUGIN_FILE = f"{PLUGIN}.py"  # this module's source, laid in the work dir; it imports nothing of codemoe's
SETUP_ENV = "CODEMOE_TASK_SETUP"  # JSON list of the task's setup commands
PREFIX_DIR = ".codemoe-prefix"  # where setup's pip installs go, inside the work dir
SETUP_FAILED = "task setup failed:"  # how the error a failing command gives starts
_OUTPUT_LINES = 20  # lines of a failing command's output kept in the error
hookimpl = pluggy.HookimplMarker("pytest")  # pytest's own marker; the host imports this module without pytest


def plugin_source() -> str:
    """The text of this module, for the work dir of a test run."""
    return Path(__file__).read_text(encoding="utf-8")


def _run(command: str, env: dict[str, str]) -> None:
    done = subprocess.run(command, shell=True, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", check=False)
    if done.returncode != 0:
        import pytest

        output = (done.stdout + done.stderr).strip().splitlines()[-_OUTPUT_LINES:]
        raise pytest.UsageError(f"{SETUP_FAILED} {command!r} exited with status {done.returncode}\n" + "\n".join(output))


def prepare(work: str, environ: dict[str, str]) -> list[str]:
    """Run the setup commands of ``environ`` in ``work``; return the entries to put first on ``sys.path``."""
    prefix = os.path.join(work, PREFIX_DIR)
    env = {**environ, "PIP_PREFIX": prefix, "PIP_NO_INDEX": "1", "PIP_NO_CACHE_DIR": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    for command in json.loads(environ.get(SETUP_ENV) or "[]"):
        _run(command, env)
    front = [os.path.join(work, p) for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    purelib = sysconfig.get_path("purelib", vars={"base": prefix, "platbase": prefix})
    if os.path.isdir(purelib):
        known = set(sys.path)
        site.addsitedir(purelib)  # appends the folder and what its .pth files name
        front += [p for p in sys.path if p not in known]
    return front


@hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
    """Set the task up before any conftest.py (which may import the package) is loaded."""
    work = os.getcwd()
    front = prepare(work, dict(os.environ))
    rest = [p for p in sys.path if p not in front and p != work]
    sys.path[:] = [work, *front, *rest]
    importlib.invalidate_caches()
