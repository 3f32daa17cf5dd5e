"""Start a real SGLang server on this machine, for tests, benchmarks and the CPU recipe.

SGLang pins its own torch, so it runs from its own virtualenv (``make engines`` builds
``.venv-sglang`` with ``engines/sglang/install.sh``) as a separate process that codemoe talks to
over HTTP. On a CPU-only machine it is launched with SGLang's CPU path
(``SGLANG_USE_CPU_ENGINE=1 --device cpu``, fp32, the ``torch_native`` attention backend)::

    with SGLangServer("runs/x/policy") as server:
        engine = SGLangEngine(SGLangEngineConfig(base_url=server.url, return_routing=True), model=model)

The server and the processes it spawns (scheduler, detokenizer) form one process group, killed
together when the block ends. Its log is kept at ``server.log_path`` and its tail is quoted in
the error when it does not come up.
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

__all__ = ["SGLangServer", "sglang_python"]

# The CPU recipe: SGLang's CPU engine, fp32 (log-probs compare with a teacher-forced fp32 forward),
# a small KV pool (the tiny test models need little), no overlap scheduler (CPU has no streams).
CPU_ARGS = (
    "--device", "cpu", "--dtype", "float32", "--disable-overlap-schedule", "--context-length", "512",
    "--max-total-tokens", "4096", "--max-running-requests", "4", "--mem-fraction-static", "0.1",
    "--attention-backend", "torch_native",
)


def sglang_python() -> Path | None:
    """The python of the SGLang virtualenv: ``$CODEMOE_SGLANG_PYTHON``, else ``.venv-sglang`` at the
    repository root (built by ``make engines``); None when neither is installed."""
    given = os.environ.get("CODEMOE_SGLANG_PYTHON")
    if given:
        return Path(given) if Path(given).exists() else None
    for parent in Path(__file__).resolve().parents:
        venv = parent / ".venv-sglang"
        if (venv / ".codemoe-sglang-installed").exists():
            return venv / "bin" / "python"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SGLangServer:
    """``python -m sglang.launch_server`` on a checkpoint folder, on a free loopback port."""

    def __init__(self, model_dir: str | Path, *, routed_experts: bool = True, extra_args: tuple[str, ...] = (),
                 python: str | Path | None = None, start_timeout_s: float = 300.0) -> None:
        found = Path(python) if python else sglang_python()
        if found is None or not found.exists():
            raise EngineError("no SGLang virtualenv: run `make engines` (builds .venv-sglang) "
                              "or set CODEMOE_SGLANG_PYTHON to an SGLang install's python")
        self.python = found
        self.model_dir = str(model_dir)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [*CPU_ARGS, *(("--enable-return-routed-experts",) if routed_experts else ()), *extra_args]
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="codemoe-sglang-", suffix=".log")[1])

    def start(self) -> SGLangServer:
        env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("PYTHONPATH", None)  # nothing of codemoe's venv may shadow the server's packages
        command = [str(self.python), "-m", "sglang.launch_server", "--model-path", self.model_dir,
                   "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True, cwd=tempfile.gettempdir())
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise EngineError(f"the SGLang server exited with {self.process.returncode}:\n{self.log_tail()}")
            if self._healthy():
                return self
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"the SGLang server did not answer /health within {self.start_timeout_s:g} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the server and every process it started; wait for them."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def __enter__(self) -> SGLangServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
