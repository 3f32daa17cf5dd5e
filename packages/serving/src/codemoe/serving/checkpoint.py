"""Loading a policy checkpoint directory (model + tokenizer) for serving.

codemoe checkpoints load through ``codemoe.core.models.load_pretrained``; any other
``transformers`` causal-LM directory loads with the ``Auto*`` classes. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codemoe.serving.api import EngineError

__all__ = ["load_checkpoint", "load_state_dict"]


def _is_codemoe_checkpoint(path: Path) -> bool:
    """codemoe writes its model spec under a ``codemoe`` key of ``config.json``."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read {path / 'config.json'}: {exc}") from exc
    return "codemoe" in config


def load_checkpoint(path: str | Path) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a checkpoint directory, in eval mode."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise EngineError(f"{path} is not a model checkpoint directory (no config.json in it)")
    if _is_codemoe_checkpoint(path):
        from codemoe.core.models import load_pretrained

        model, tokenizer = load_pretrained(str(path))
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return model.eval(), tokenizer


def load_state_dict(path: str | Path) -> dict[str, Any]:
    """The parameters of the checkpoint in ``path``, keyed as the loaded model names them."""
    model, _ = load_checkpoint(path)
    return model.state_dict()
