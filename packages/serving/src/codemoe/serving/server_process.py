"""A real inference server (SGLang, vLLM) as a child process of this one, on a free loopback port.

Each server pins its own torch, so it runs from its own virtualenv as a separate process that
codemoe talks to over HTTP. :class:`ServerProcess` is what the launchers share: it starts the
server in a process group of its own, waits for ``/health``, quotes the log's tail when the server
does not come up, reads the CPU time the whole group has spent and pauses it (for benchmarks),
and kills the group when the ``with`` block ends. A launcher says which python, which command and which
environment (:class:`codemoe.serving.sglang_server.SGLangServer`,
:class:`codemoe.serving.vllm_server.VLLMServer`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from codemoe.core.contracts import EngineError

__all__ = ["CodemoeServer", "ServerProcess", "venv_python"]


def venv_python(variable: str, venv_name: str, stamp: str) -> Path | None:
    """The python of a server's virtualenv: ``$variable`` when set, else ``venv_name`` at the repository
    root when its install stamp is there; None when neither is installed."""
    given = os.environ.get(variable)
    if given:
        return Path(given) if Path(given).exists() else None
    for parent in Path(__file__).resolve().parents:
        venv = parent / venv_name
        if (venv / stamp).exists():
            return venv / "bin" / "python"
    return None


def free_port(address: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``address`` now."""
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _group_cpu_ticks(pgid: int) -> int:
    """utime + stime of every live process of group ``pgid``, plus what its reaped children spent
    (cutime + cstime), in clock ticks, from ``/proc/<pid>/stat``."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
        if int(fields[2]) == pgid:  # field 5, pgrp
            ticks += sum(int(f) for f in fields[11:15])  # fields 14-17: utime stime cutime cstime
    return ticks


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ServerProcess:
    """A server started as ``python -m <module> ...`` from its own virtualenv; subclasses give
    :attr:`name`, :meth:`command` and :meth:`env`."""

    name = "server"
    health_path = "/health"

    def __init__(self, model_dir: str | Path, python: Path, *, extra_env: dict[str, str] | None = None,
                 start_timeout_s: float = 300.0) -> None:
        self.python = python
        self.model_dir = str(model_dir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(extra_env or {})
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkstemp(prefix=f"codemoe-{self.name.lower()}-", suffix=".log")[1])

    def command(self) -> list[str]:
        """The server's command line (after the python)."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        """The server's environment: this process's, without what could shadow the server's packages."""
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        env.pop("PYTHONPATH", None)  # nothing of codemoe's venv may shadow the server's packages
        return env

    def start(self) -> ServerProcess:
        env = {**self.env(), **self.extra_env}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([str(self.python), *self.command()], stdout=log,
                                            stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                            cwd=tempfile.gettempdir())
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()
                raise EngineError(f"the {self.name} server exited with {code}:\n{self.log_tail()}")
            if self._healthy():
                return self
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"the {self.name} server did not answer {self.health_path} within "
                          f"{self.start_timeout_s:g} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.health_path, timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def cpu_seconds(self) -> float:
        """CPU seconds spent so far by the server and every process it started (its process group)."""
        if self.process is None:
            raise EngineError(f"the {self.name} server is not running")
        return _group_cpu_ticks(self.process.pid) / os.sysconf("SC_CLK_TCK")

    def pause(self) -> None:
        """Stop every process of the server (SIGSTOP to its group) until :meth:`resume`: an idle
        SGLang scheduler polls for requests on a whole core, which a benchmark of other engines on
        the same machine must not share."""
        if self.process is None:
            raise EngineError(f"the {self.name} server is not running")
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT to its group)."""
        if self.process is None:
            raise EngineError(f"the {self.name} server is not running")
        os.killpg(self.process.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the server and every process it started; wait for them."""
        if self.process is None:
            return
        group = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        self.process.wait()
        self.process = None
        deadline = time.monotonic() + 10.0  # the rest of the group, reaped by init once orphaned
        while time.monotonic() < deadline and _group_alive(group):
            time.sleep(0.05)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CodemoeServer(ServerProcess):
    """``codemoe serve MODEL_DIR`` as a child process (this environment's python by default): the
    server a separate machine or container would run, for tests whose two sides must not share a
    process (a weight-update process group has one member per process)."""

    name = "codemoe"

    def __init__(self, model_dir: str | Path, python: Path | None = None, *, device: str = "cpu",
                 extra_args: list[str] | None = None, **kwargs) -> None:
        import sys

        super().__init__(model_dir, Path(python or sys.executable), **kwargs)
        self.device = device
        self.extra_args = list(extra_args or [])

    def command(self) -> list[str]:
        return ["-m", "codemoe.core.cli", "serve", self.model_dir, "--host", "127.0.0.1", "--port", str(self.port),
                "--device", self.device, *self.extra_args]

    def env(self) -> dict[str, str]:
        return {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
