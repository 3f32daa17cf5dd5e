"""The ``qwen3_moe`` model family: a ``transformers`` Qwen3-MoE causal LM with codemoe MoE blocks.

The model is ``transformers``' own ``Qwen3MoeForCausalLM`` (attention, KV cache, ``generate``)
built from a config; each sparse layer's ``mlp`` is a :class:`codemoe.core.moe.MoEBlock` with the
same parameter names and layouts. With the ``softmax_topk`` router (renormalised) and no
shared expert or capacity limit, the saved checkpoint is a standard ``qwen3_moe`` checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CODEMOE_KEY", "Qwen3MoeModelConfig", "build_qwen3_moe", "hf_config"]

CODEMOE_KEY = "codemoe"  # config.json section holding the model spec codemoe rebuilds from


@dataclass
class Qwen3MoeModelConfig:
    """Shape and MoE options of a Qwen3-MoE model (the ``model`` component ``qwen3_moe``)."""

    vocab_size: int = 1024  # token vocabulary (build_model's vocab_size argument overrides it)
    hidden_size: int = 128  # model width H
    num_layers: int = 4  # decoder layers
    num_heads: int = 4  # attention query heads
    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    head_dim: int = 32  # width of one attention head
    num_experts: int = 8  # routed experts per MoE layer E
    moe_intermediate_size: int = 128  # width I of one expert's MLP
    router: dict[str, Any] = field(
        default_factory=lambda: {"name": "softmax_topk", "top_k": 2}, metadata={"kind": "router"}
    )  # routing strategy (kind 'router') with its options
    experts: dict[str, Any] = field(
        default_factory=lambda: {"name": "grouped"}, metadata={"kind": "experts"}
    )  # expert implementation (kind 'experts'): 'grouped' (fast) or 'loop' (reference)
    dense_layers: list[int] = field(default_factory=list)  # layer indices with a dense MLP instead of MoE
    intermediate_size: int = 512  # MLP width of the dense layers
    shared_expert_intermediate_size: int = 0  # 0: no shared expert; else its MLP width
    shared_expert_gate: bool = True  # gate the shared expert with sigmoid(w·x)
    capacity_factor: float = 0.0  # 0: dropless; else at most ceil(factor·T·k/E) assignments per expert
    drop_policy: str = "weight"  # which assignments a full expert drops: 'weight' or 'position'
    balance_scope: str = "micro_batch"  # balance loss scope: 'micro_batch', 'sequence' or 'global'
    balance_coef: float = 0.001  # weight of the balance loss (aux_losses(model)['weighted'])
    z_coef: float = 0.0  # weight of the router z-loss
    max_position_embeddings: int = 4096  # longest sequence the rotary embedding is set up for
    rope_theta: float = 1_000_000.0  # rotary embedding base
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon
    tie_word_embeddings: bool = False  # share the input embedding with the output head
    initializer_range: float = 0.02  # std of the normal initialisation
    dtype: str = "float32"  # parameter dtype: 'float32' or 'bfloat16'
    attn_implementation: str = "sdpa"  # transformers attention kernel: 'sdpa' or 'eager'


def hf_config(config: Qwen3MoeModelConfig, spec: dict[str, Any]):
    """The ``transformers`` ``Qwen3MoeConfig`` for ``config``, with the codemoe spec stored alongside.

    The routing keys (``num_experts_per_tok``, ``norm_topk_prob``) are set from the router once it
    is built (:func:`build_qwen3_moe`).
    """
    from transformers import Qwen3MoeConfig

    hf = Qwen3MoeConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        hidden_act="silu",
        max_position_embeddings=config.max_position_embeddings,
        initializer_range=config.initializer_range,
        rms_norm_eps=config.rms_norm_eps,
        tie_word_embeddings=config.tie_word_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        moe_intermediate_size=config.moe_intermediate_size,
        num_experts=config.num_experts,
        mlp_only_layers=list(config.dense_layers),
        router_aux_loss_coef=config.balance_coef,
        num_experts_per_tok=int(config.router.get("top_k", 1)),
        norm_topk_prob=True,
    )
    hf.bos_token_id, hf.eos_token_id, hf.pad_token_id = 0, 1, 2  # codemoe tokenizers' special ids
    setattr(hf, CODEMOE_KEY, spec)
    return hf


def build_qwen3_moe(config: Qwen3MoeModelConfig, *, registry: Any, vocab_size: int | None = None):
    """A Qwen3-MoE causal LM (``transformers``) whose MoE layers are codemoe blocks."""
    import torch
    from codemoe.core.models.blocks import replace_moe_blocks
    from codemoe.core.moe import moe_blocks
    from transformers import Qwen3MoeForCausalLM

    if vocab_size is not None:
        config.vocab_size = vocab_size
    spec = {"name": "qwen3_moe", **asdict(config)}
    hf = hf_config(config, spec)
    hf._attn_implementation = config.attn_implementation
    model = Qwen3MoeForCausalLM(hf)
    replace_moe_blocks(model, config, registry)
    routing = next((b.gate.hf_config() for b in moe_blocks(model)), None)
    if routing:
        for key, value in routing.items():
            setattr(model.config, key, value)
    return model.to(getattr(torch, config.dtype))
