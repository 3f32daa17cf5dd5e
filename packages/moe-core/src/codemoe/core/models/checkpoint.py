"""Saving and loading policies as Hugging Face checkpoints (safetensors + config.json + tokenizer).

The checkpoint is what ``transformers`` writes for the model (experts in its saved per-expert
layout, which SGLang and vLLM read), plus a ``codemoe`` section in
``config.json`` holding the model spec. Plain ``transformers`` ignores that section (and loads the
standard architecture); :func:`load_pretrained` rebuilds codemoe's blocks from it, so non-standard
routers and options come back exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from codemoe.core.models.qwen3_moe import CODEMOE_KEY

__all__ = ["fuse_experts", "is_standard", "load_policy", "load_pretrained", "save_pretrained"]


def is_standard(model: Any) -> bool:
    """Whether plain ``transformers`` (and so SGLang or vLLM) computes exactly what ``model`` does.

    True when every MoE block routes like the architecture's own router (``softmax_topk``, whose
    routing the config records) with no shared expert and no capacity limit. Other checkpoints
    still load in plain ``transformers``, but route differently there: load them with
    :func:`load_pretrained`.
    """
    from codemoe.core.moe import moe_blocks

    blocks = list(moe_blocks(model))
    return all(
        b.gate.hf_config() is not None and b.shared_expert is None and b.options.capacity_factor <= 0 for b in blocks
    )


def save_pretrained(model: Any, tokenizer: Any, out_dir: str | Path) -> Path:
    """Write ``model`` (safetensors, config.json) and ``tokenizer`` to ``out_dir``; returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


_PER_EXPERT = re.compile(
    r"^(?P<prefix>.*\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$"
)
_MIXTRAL_NAMES = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}  # Mixtral's saved names


def fuse_experts(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert weights (``experts.{e}.{gate,up,down}_proj.weight``, the layout ``transformers``
    saves; Mixtral's ``block_sparse_moe.experts.{e}.{w1,w3,w2}.weight`` too) fused into
    ``mlp.experts.gate_up_proj [E, 2I, H]`` and ``mlp.experts.down_proj [E, H, I]``."""
    fused: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for key, value in state.items():
        key = key.replace(".block_sparse_moe.", ".mlp.")
        match = _PER_EXPERT.match(key)
        if match is None:
            fused[key] = value
            continue
        projections = experts.setdefault(match["prefix"], {})
        proj = _MIXTRAL_NAMES.get(match["proj"], match["proj"])
        projections.setdefault(proj, {})[int(match["expert"])] = value
    for prefix, projections in experts.items():
        count = len(projections["down_proj"])
        gate = [projections["gate_proj"][e] for e in range(count)]
        up = [projections["up_proj"][e] for e in range(count)]
        fused[f"{prefix}.gate_up_proj"] = torch.stack([torch.cat(pair, dim=0) for pair in zip(gate, up)])
        fused[f"{prefix}.down_proj"] = torch.stack([projections["down_proj"][e] for e in range(count)])
    return fused


def _load_state(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} has no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return fuse_experts(state)


def load_pretrained(path: str | Path, *, registry: Any = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a checkpoint folder written by :func:`save_pretrained`.

    A folder without a codemoe section loads through ``transformers``: a standard ``qwen3_moe``
    checkpoint gets codemoe blocks with the same weights and the softmax top-k router, any other
    causal LM (a plain Mixtral, GPT-OSS, Llama, ...) stays as ``transformers`` builds it, its own MoE
    blocks included. The tokenizer is None when the folder has none.
    """
    from transformers import AutoTokenizer

    folder = Path(path)
    config = json.loads((folder / "config.json").read_text())
    spec = config.get(CODEMOE_KEY)
    if spec is not None:
        from codemoe.core.models.build import build_model

        model = build_model(spec, vocab_size=config.get("vocab_size"), registry=registry)
        state = _load_state(folder)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
        if missing or unexpected:
            raise ValueError(
                f"checkpoint {folder} does not match its model spec: missing {missing}, unexpected {unexpected}"
            )
    elif config.get("model_type") == "qwen3_moe":
        from codemoe.core.models.convert import from_transformers

        model = from_transformers(folder, registry=registry)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    has_tokenizer = (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(folder) if has_tokenizer else None
    return model, tokenizer


def load_policy(path: str | Path, *, registry: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` in eval mode from any checkpoint folder a policy can be served or
    evaluated from; nothing is downloaded.

    codemoe checkpoints (a ``codemoe`` section in ``config.json``) and ``qwen3_moe`` ones load with
    :func:`load_pretrained`, so they get codemoe's MoE blocks (components from ``registry``, the
    run's) and report their routing; any other causal LM loads with ``transformers``' Auto classes.
    Raises ``FileNotFoundError`` for a folder without ``config.json`` and ``ValueError`` for one
    that cannot be read.
    """
    folder = Path(path)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder} is not a model checkpoint directory (no config.json in it)")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {config_file}: {exc}") from exc
    if CODEMOE_KEY in config or config.get("model_type") == "qwen3_moe":
        model, tokenizer = load_pretrained(folder, registry=registry)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model.eval(), tokenizer
