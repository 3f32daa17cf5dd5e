"""Converting a plain ``transformers`` Qwen3-MoE model to codemoe blocks (same weights, same outputs)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

__all__ = ["config_from_transformers", "from_transformers"]


def config_from_transformers(hf: Any) -> Any:
    """The codemoe ``qwen3_moe`` config that reproduces a ``transformers`` ``Qwen3MoeConfig``."""
    from codemoe.core.models.qwen3_moe import Qwen3MoeModelConfig

    if (hf.decoder_sparse_step or 1) != 1:
        raise ValueError("codemoe's qwen3_moe marks dense layers with mlp_only_layers; decoder_sparse_step must be 1")
    rope = hf.rope_parameters or {}
    values = {
        "vocab_size": hf.vocab_size,
        "hidden_size": hf.hidden_size,
        "num_layers": hf.num_hidden_layers,
        "num_heads": hf.num_attention_heads,
        "num_kv_heads": hf.num_key_value_heads,
        "head_dim": hf.head_dim,
        "num_experts": hf.num_experts,
        "moe_intermediate_size": hf.moe_intermediate_size,
        "router": {"name": "softmax_topk", "top_k": hf.num_experts_per_tok, "normalize": bool(hf.norm_topk_prob)},
        "dense_layers": list(hf.mlp_only_layers or []),
        "intermediate_size": hf.intermediate_size,
        "max_position_embeddings": hf.max_position_embeddings,
        "rope_theta": float(rope.get("rope_theta", 1_000_000.0)),
        "rms_norm_eps": hf.rms_norm_eps,
        "tie_word_embeddings": bool(hf.tie_word_embeddings),
        "initializer_range": hf.initializer_range,
        "balance_coef": hf.router_aux_loss_coef,
    }
    names = {f.name for f in fields(Qwen3MoeModelConfig)}
    return Qwen3MoeModelConfig(**{k: v for k, v in values.items() if k in names})


def from_transformers(model_or_path: Any, *, registry: Any = None) -> Any:
    """A ``Qwen3MoeForCausalLM`` (or a checkpoint folder of one) with codemoe MoE blocks, weights kept."""
    from dataclasses import asdict

    from codemoe.core.models.blocks import replace_moe_blocks
    from codemoe.core.models.build import default_registry
    from codemoe.core.models.qwen3_moe import CODEMOE_KEY
    from transformers import AutoModelForCausalLM

    model = model_or_path
    if isinstance(model_or_path, (str, Path)):
        model = AutoModelForCausalLM.from_pretrained(model_or_path)
    if model.config.model_type != "qwen3_moe":
        raise ValueError(f"codemoe converts qwen3_moe models; this one is '{model.config.model_type}'")
    config = config_from_transformers(model.config)
    replace_moe_blocks(model, config, registry or default_registry())
    setattr(model.config, CODEMOE_KEY, {"name": "qwen3_moe", **asdict(config)})
    return model
