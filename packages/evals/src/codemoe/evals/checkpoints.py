"""Loading the policy to evaluate from a checkpoint directory (no download, ever)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["load_policy"]


def load_policy(path: str | Path, *, registry: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` in eval mode: codemoe checkpoints (a ``codemoe`` section in config.json)
    and Qwen3-MoE ones through ``codemoe.core.models.load_pretrained``, which rebuilds codemoe's MoE
    blocks with components of ``registry`` (the run's); other causal LMs through ``transformers``'
    Auto classes."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} is not a model checkpoint directory (no config.json)")
    config = json.loads(config_file.read_text())
    if "codemoe" in config or config.get("model_type") == "qwen3_moe":
        from codemoe.core.models import load_pretrained

        model, tokenizer = load_pretrained(str(path), registry=registry)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return model.eval(), tokenizer
