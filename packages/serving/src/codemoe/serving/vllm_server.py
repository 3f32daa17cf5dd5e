"""Start a real vLLM server on this machine, for evals and benchmarks (its CPU build, fp32).

vLLM pins its own torch, so it runs from its own virtualenv (``make engines-vllm`` builds
``.venv-vllm`` with ``engines/vllm/install.sh``) as a separate process that codemoe's ``openai``
engine talks to over ``/v1/completions``::

    with VLLMServer("runs/x/policy") as server:
        engine = OpenAIEngine(OpenAIEngineConfig(base_url=server.url))

On this CPU it is vLLM 0.32.0's CPU build with ``--dtype float32 --enforce-eager`` (no graph
capture) and a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``); its log-probs equal a ``transformers``
forward. It is an engine for evals and benchmarks, not for RL: on CPU it reports no routed experts
(routing replay needs them), and its in-place weight reload gave wrong log-probs in 0.32.0.
The server and its engine core process form one process group, killed together when the block ends.
"""

from __future__ import annotations

import json
from pathlib import Path

from codemoe.core.contracts import EngineError

from .server_process import ServerProcess, venv_python

__all__ = ["VLLMServer", "vllm_python"]

# The CPU recipe: fp32 (log-probs compare with a teacher-forced fp32 forward), eager (no compile or
# graph capture: a start in ~30 s), the model's own context length, and no chunked prefill: in 0.32.0 a seeded
# request (codemoe's `openai` engine always sends a seed) whose prompt is split across steps kills the
# engine core ("CPU Generator does not use offset"), so each prompt is prefilled in one step.
CPU_ARGS = ("--dtype", "float32", "--enforce-eager", "--no-enable-chunked-prefill")

# Head sizes vLLM 0.32.0's CPU attention serves (`CPUAttentionBackend.get_supported_head_sizes`);
# another one starts the server and kills its engine core at the first request.
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def vllm_python() -> Path | None:
    """The python of the vLLM virtualenv: ``$CODEMOE_VLLM_PYTHON``, else ``.venv-vllm`` at the
    repository root (built by ``make engines-vllm``); None when neither is installed."""
    return venv_python("CODEMOE_VLLM_PYTHON", ".venv-vllm", ".codemoe-vllm-installed")


class VLLMServer(ServerProcess):
    """vLLM's OpenAI-compatible server on a checkpoint folder, on a free loopback port. ``extra_args``
    come after the CPU recipe's, so they override it; ``kv_cache_gib`` sizes the KV cache."""

    name = "vLLM"

    def __init__(self, model_dir: str | Path, *, extra_args: tuple[str, ...] = (), kv_cache_gib: int = 1,
                 python: str | Path | None = None, start_timeout_s: float = 300.0,
                 extra_env: dict[str, str] | None = None) -> None:
        _check_head_dim(Path(model_dir))
        found = Path(python) if python else vllm_python()
        if found is None or not found.exists():
            raise EngineError("no vLLM virtualenv: run `make engines-vllm` (builds .venv-vllm) "
                              "or set CODEMOE_VLLM_PYTHON to a vLLM install's python")
        super().__init__(model_dir, found, extra_env=extra_env, start_timeout_s=start_timeout_s)
        self.args = [*CPU_ARGS, *extra_args]
        self.kv_cache_gib = kv_cache_gib

    def command(self) -> list[str]:
        # `-m vllm.entrypoints...`, not the `vllm` script: that one looks for a package named `vllm`,
        # and the CPU build is installed as `vllm-cpu`.
        return ["-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir, "--host", "127.0.0.1",
                "--port", str(self.port), *self.args]

    def env(self) -> dict[str, str]:
        return {**super().env(), "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib)}


def _check_head_dim(model_dir: Path) -> None:
    """Refuse a checkpoint whose attention head size vLLM's CPU attention does not serve."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return  # not a readable checkpoint folder: vLLM's own error says why
    head_dim = config.get("head_dim")
    if head_dim is None and config.get("hidden_size") and config.get("num_attention_heads"):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
    if head_dim is not None and head_dim not in CPU_HEAD_DIMS:
        raise EngineError(f"{model_dir}/config.json has head_dim {head_dim}; vLLM's CPU attention serves "
                          f"only {list(CPU_HEAD_DIMS)}")
