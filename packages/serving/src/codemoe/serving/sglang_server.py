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

import os
from pathlib import Path

from codemoe.core.contracts import EngineError

from .server_process import ServerProcess, venv_python

__all__ = ["SGLangServer", "sglang_python"]

# The CPU recipe: SGLang's CPU engine, fp32 (log-probs compare with a teacher-forced fp32 forward),
# a small KV pool (the tiny test models need little), no overlap scheduler (CPU has no streams), and
# a scheduler that blocks on its request sockets when it has nothing to run instead of polling them
# in a loop (it kept a whole core busy between requests, a core the trainer and the sandbox share).
CPU_ARGS = (
    "--device", "cpu", "--dtype", "float32", "--disable-overlap-schedule", "--context-length", "512",
    "--max-total-tokens", "4096", "--max-running-requests", "4", "--mem-fraction-static", "0.1",
    "--attention-backend", "torch_native", "--sleep-on-idle",
)


def sglang_python() -> Path | None:
    """The python of the SGLang virtualenv: ``$CODEMOE_SGLANG_PYTHON``, else ``.venv-sglang`` at the
    repository root (built by ``make engines``); None when neither is installed."""
    return venv_python("CODEMOE_SGLANG_PYTHON", ".venv-sglang", ".codemoe-sglang-installed")


class SGLangServer(ServerProcess):
    """``python -m sglang.launch_server`` on a checkpoint folder, on a free loopback port. ``extra_args``
    come after the CPU recipe's, so they override it (a benchmark's ``--max-running-requests``)."""

    name = "SGLang"

    def __init__(self, model_dir: str | Path, *, routed_experts: bool = True, extra_args: tuple[str, ...] = (),
                 python: str | Path | None = None, start_timeout_s: float = 300.0,
                 extra_env: dict[str, str] | None = None) -> None:
        found = Path(python) if python else sglang_python()
        if found is None or not found.exists():
            raise EngineError("no SGLang virtualenv: run `make engines` (builds .venv-sglang) "
                              "or set CODEMOE_SGLANG_PYTHON to an SGLang install's python")
        super().__init__(model_dir, found, extra_env=extra_env, start_timeout_s=start_timeout_s)
        self.args = [*CPU_ARGS, *(("--enable-return-routed-experts",) if routed_experts else ()), *extra_args]

    def command(self) -> list[str]:
        return ["-m", "sglang.launch_server", "--model-path", self.model_dir, "--host", "127.0.0.1",
                "--port", str(self.port), *self.args]

    def env(self) -> dict[str, str]:
        """SGLang's CPU engine; its torch on half the machine's cores unless ``OMP_NUM_THREADS`` is set
        (here or in ``extra_env``): a server on every core makes each of its parallel ops wait for the
        cores a trainer beside it holds (docs/performance.md, agent episodes: 0.97x against 1.42x
        asynchronously on 2 cores, the same synchronously)."""
        env = {**super().env(), "SGLANG_USE_CPU_ENGINE": "1"}
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
        return env
