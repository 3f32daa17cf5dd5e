"""Model families besides ``qwen3_moe``: ``transformers`` causal LMs built from their own config class.

Each family is a ``model`` component (``name: <family>`` in a model preset, ``codemoe/core/presets/models/``) whose
factory builds the ``transformers`` model of that architecture from a codemoe config and, where the
family routes as codemoe's block does, swaps every sparse MLP for a :class:`codemoe.core.moe.MoEBlock`
with the same parameter names and layouts, so the saved checkpoint is one plain ``transformers``
loads (``AutoModelForCausalLM.from_pretrained``) with the same logits:

- ``mixtral``: codemoe blocks; softmax top-k, renormalised (router ``softmax_topk``);
- ``qwen2_moe``: codemoe blocks with its gated shared expert; softmax top-k (``normalize`` is
  ``norm_topk_prob``);
- ``olmoe``: codemoe blocks; softmax top-k (``normalize`` is ``norm_topk_prob``);
- ``deepseek_v3``: codemoe blocks with its shared experts; sigmoid scores with the balancing bias,
  group-limited (router ``sigmoid_bias``); MLA attention;
- ``gpt_oss``: ``transformers``' own block: its router has a bias and takes the softmax of the
  top-k logits, its experts have biases and a clamped SwiGLU that codemoe's experts lack;
  attention sinks and sliding-window layers;
- ``qwen3``, ``llama``: dense, no MoE layers.

DeepSeek-V3's router is the router package's ``sigmoid_bias`` with ``group_score: top2_sum``: the
same arithmetic as ``DeepseekV3TopkRouter`` (sigmoid scores; bias added to choose only; groups
scored by their two best biased scores; chosen unbiased scores renormalised and scaled by
``route_scale``, the ``routed_scaling_factor``); in training its bias also moves by the sign rule.
Every checkpoint carries the codemoe spec in ``config.json`` (:data:`CODEMOE_KEY`), from which
:func:`codemoe.core.models.load_pretrained` rebuilds the same components. A family given a router
its ``transformers`` block does not compute (``noisy_topk``, ``group_score: max``, Mixtral without
renormalisation) still saves a checkpoint plain ``transformers`` loads, but it routes differently
there: load that one with ``load_pretrained``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from types import SimpleNamespace
from typing import Any

from codemoe.core.errors import ConfigError
from codemoe.core.models.qwen3_moe import CODEMOE_KEY

__all__ = [
    "DeepseekV3ModelConfig",
    "DenseModelConfig",
    "GptOssModelConfig",
    "MoEFields",
    "Qwen2MoeModelConfig",
    "SoftmaxMoeModelConfig",
    "build_deepseek_v3",
    "build_gpt_oss",
    "build_llama",
    "build_mixtral",
    "build_olmoe",
    "build_qwen2_moe",
    "build_qwen3",
]

_SPECIAL_IDS = (0, 1, 2)  # bos, eos, pad: codemoe tokenizers' special ids


@dataclass
class DecoderConfig:
    """What every family's decoder has (width, depth, heads, positions, initialisation)."""

    vocab_size: int = 1024  # token vocabulary (build_model's vocab_size argument overrides it)
    hidden_size: int = 64  # model width H
    num_layers: int = 2  # decoder layers
    num_heads: int = 4  # attention query heads
    intermediate_size: int = 128  # MLP width of the dense layers (every layer of a dense family)
    max_position_embeddings: int = 2048  # longest sequence the rotary embedding is set up for
    rope_theta: float = 10_000.0  # rotary embedding base
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon
    tie_word_embeddings: bool = False  # share the input embedding with the output head
    initializer_range: float = 0.02  # std of the normal initialisation
    dtype: str = "float32"  # parameter dtype: 'float32' or 'bfloat16'
    attn_implementation: str = "sdpa"  # transformers attention kernel: 'sdpa' or 'eager'


@dataclass
class DenseModelConfig(DecoderConfig):
    """A dense decoder with grouped-query attention (the ``qwen3`` and ``llama`` families)."""

    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    head_dim: int = 16  # width of one attention head


@dataclass
class MoEFields:
    """The MoE options of the families with codemoe blocks (router, experts, block options)."""

    num_experts: int = 8  # routed experts per MoE layer E
    moe_intermediate_size: int = 32  # width I of one expert's MLP
    router: dict[str, Any] = field(
        default_factory=lambda: {"name": "softmax_topk", "top_k": 2}, metadata={"kind": "router"}
    )  # routing strategy (kind 'router') with its options
    experts: dict[str, Any] = field(
        default_factory=lambda: {"name": "grouped"}, metadata={"kind": "experts"}
    )  # expert implementation (kind 'experts'): 'grouped' (fast) or 'loop' (reference)
    capacity_factor: float = 0.0  # 0: dropless; else at most ceil(factor·T·k/E) assignments per expert
    drop_policy: str = "weight"  # which assignments a full expert drops: 'weight' or 'position'
    balance_scope: str = "micro_batch"  # balance loss scope: 'micro_batch', 'sequence' or 'global'
    balance_coef: float = 0.001  # weight of the balance loss (aux_losses(model)['weighted'])
    z_coef: float = 0.0  # weight of the router z-loss


@dataclass
class SoftmaxMoeModelConfig(MoEFields, DenseModelConfig):
    """An MoE decoder whose every layer is sparse (the ``mixtral`` and ``olmoe`` families)."""


@dataclass
class Qwen2MoeModelConfig(MoEFields, DenseModelConfig):
    """Qwen2-MoE: softmax top-k experts plus a shared expert gated by ``sigmoid(w·x)`` in every MoE layer."""

    shared_expert_intermediate_size: int = 64  # width of the shared expert's MLP (Qwen2-MoE always has one)
    dense_layers: list[int] = field(default_factory=list)  # layer indices with a dense MLP instead of MoE

    def __post_init__(self) -> None:
        if self.shared_expert_intermediate_size <= 0:
            raise ConfigError(
                f"'shared_expert_intermediate_size' must be positive (got {self.shared_expert_intermediate_size}): "
                "every Qwen2-MoE layer has a shared expert; use the olmoe or mixtral family for none"
            )


@dataclass
class DeepseekV3ModelConfig(MoEFields, DecoderConfig):
    """DeepSeek-V3: multi-head latent attention, shared experts, sigmoid routing with a balancing bias."""

    router: dict[str, Any] = field(
        default_factory=lambda: {
            "name": "sigmoid_bias",
            "top_k": 2,
            "num_groups": 2,
            "topk_groups": 1,
            "group_score": "top2_sum",
        },
        metadata={"kind": "router"},
    )  # DeepSeek-V3's own routing is sigmoid_bias with group_score top2_sum
    num_shared_experts: int = 1  # shared experts, fused into one MLP of num_shared_experts x moe_intermediate_size
    first_dense_layers: int = 1  # the first layers have a dense MLP (DeepSeek's first_k_dense_replace)
    q_lora_rank: int = 32  # rank of the query compression (0: queries projected directly)
    kv_lora_rank: int = 32  # rank of the compressed key/value latent (what the KV cache stores)
    qk_nope_head_dim: int = 16  # per-head query/key width without rotary embedding
    qk_rope_head_dim: int = 8  # per-head query/key width with rotary embedding (the key part is shared)
    v_head_dim: int = 16  # per-head value width
    rope_interleave: bool = True  # rotary embedding on interleaved pairs, as DeepSeek's weights expect

    def __post_init__(self) -> None:
        if self.num_shared_experts < 1:
            raise ConfigError(f"'num_shared_experts' must be at least 1 (got {self.num_shared_experts})")
        if not 0 <= self.first_dense_layers <= self.num_layers:
            raise ConfigError(
                f"'first_dense_layers' must be between 0 and num_layers={self.num_layers} "
                f"(got {self.first_dense_layers})"
            )


@dataclass
class GptOssModelConfig(DenseModelConfig):
    """GPT-OSS: attention sinks, sliding-window layers alternating with full ones, its own MoE block."""

    num_experts: int = 4  # routed experts per layer
    top_k: int = 2  # experts per token
    sliding_window: int = 8  # tokens a sliding-window layer attends to (its own included)
    # per layer 'sliding_attention' or 'full_attention'; []: they alternate, sliding first
    layer_types: list[str] = field(default_factory=list)
    balance_coef: float = 0.001  # router_aux_loss_coef: weight of transformers' balance loss
    attn_implementation: str = "eager"  # transformers' SDPA path has no attention sinks: 'eager' (or 'flex_attention')

    def __post_init__(self) -> None:
        if self.attn_implementation == "sdpa":
            raise ConfigError("'attn_implementation' sdpa cannot apply GPT-OSS's attention sinks: use 'eager'")
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise ConfigError(f"'layer_types' names {len(self.layer_types)} layers, the model has {self.num_layers}")
        bad = sorted(set(self.layer_types) - {"sliding_attention", "full_attention"})
        if bad:
            raise ConfigError(f"'layer_types' has {bad}: each layer is 'sliding_attention' or 'full_attention'")


# -------------------------------------------------------------------------------------------------
# transformers configs, one per family
# -------------------------------------------------------------------------------------------------


def _common(config: DecoderConfig) -> dict[str, Any]:
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_position_embeddings,
        "initializer_range": config.initializer_range,
        "rms_norm_eps": config.rms_norm_eps,
        "tie_word_embeddings": config.tie_word_embeddings,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
    }


def _gqa(config: DenseModelConfig) -> dict[str, Any]:
    return {**_common(config), "num_key_value_heads": config.num_kv_heads, "head_dim": config.head_dim}


def _top_k(config: MoEFields) -> int:
    return int(config.router.get("top_k", 2))


def _mixtral(c: SoftmaxMoeModelConfig) -> tuple[str, dict[str, Any]]:
    # Mixtral's experts are its only MLPs: their width is transformers' intermediate_size
    return "MixtralConfig", {
        **_gqa(c),
        "intermediate_size": c.moe_intermediate_size,
        "num_local_experts": c.num_experts,
        "num_experts_per_tok": _top_k(c),
        "router_aux_loss_coef": c.balance_coef,
    }


def _olmoe(c: SoftmaxMoeModelConfig) -> tuple[str, dict[str, Any]]:
    return "OlmoeConfig", {
        **_gqa(c),
        "intermediate_size": c.moe_intermediate_size,
        "num_experts": c.num_experts,
        "num_experts_per_tok": _top_k(c),
        "router_aux_loss_coef": c.balance_coef,
    }


def _qwen2_moe(c: Qwen2MoeModelConfig) -> tuple[str, dict[str, Any]]:
    return "Qwen2MoeConfig", {
        **_gqa(c),
        "moe_intermediate_size": c.moe_intermediate_size,
        "shared_expert_intermediate_size": c.shared_expert_intermediate_size,
        "num_experts": c.num_experts,
        "num_experts_per_tok": _top_k(c),
        "mlp_only_layers": list(c.dense_layers),
        "decoder_sparse_step": 1,
        "router_aux_loss_coef": c.balance_coef,
    }


def _deepseek_v3(c: DeepseekV3ModelConfig) -> tuple[str, dict[str, Any]]:
    router = c.router
    return "DeepseekV3Config", {
        **_common(c),
        "num_key_value_heads": c.num_heads,  # MLA: every head has its own keys, expanded from one latent
        "moe_intermediate_size": c.moe_intermediate_size,
        "n_routed_experts": c.num_experts,
        "n_shared_experts": c.num_shared_experts,
        "num_experts_per_tok": _top_k(c),
        "first_k_dense_replace": c.first_dense_layers,
        "n_group": int(router.get("num_groups", 1)),
        "topk_group": int(router.get("topk_groups", 1)),
        "norm_topk_prob": bool(router.get("normalize", True)),
        "routed_scaling_factor": float(router.get("route_scale", 1.0)),
        "q_lora_rank": c.q_lora_rank or None,
        "kv_lora_rank": c.kv_lora_rank,
        "qk_nope_head_dim": c.qk_nope_head_dim,
        "qk_rope_head_dim": c.qk_rope_head_dim,
        "v_head_dim": c.v_head_dim,
        "rope_interleave": c.rope_interleave,
    }


def _gpt_oss(c: GptOssModelConfig) -> tuple[str, dict[str, Any]]:
    return "GptOssConfig", {
        **_gqa(c),
        "num_local_experts": c.num_experts,
        "num_experts_per_tok": c.top_k,
        "sliding_window": c.sliding_window,
        "layer_types": list(c.layer_types) or None,
        "router_aux_loss_coef": c.balance_coef,
    }


def _qwen3(c: DenseModelConfig) -> tuple[str, dict[str, Any]]:
    return "Qwen3Config", _gqa(c)


def _llama(c: DenseModelConfig) -> tuple[str, dict[str, Any]]:
    return "LlamaConfig", _gqa(c)


# -------------------------------------------------------------------------------------------------
# building
# -------------------------------------------------------------------------------------------------


def _hf_config(family: str, config: Any, hf_fields: tuple[str, dict[str, Any]]) -> Any:
    import transformers

    class_name, values = hf_fields
    bos, eos, pad = _SPECIAL_IDS
    hf = getattr(transformers, class_name)(**values, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    setattr(hf, CODEMOE_KEY, {"name": family, **asdict(config)})
    return hf


def _block_spec(config: MoEFields, shared_size: int, shared_gate: bool) -> SimpleNamespace:
    """What :func:`codemoe.core.models.blocks.replace_moe_blocks` reads: router, experts, shape and
    the :class:`codemoe.core.moe.MoEOptions` fields (the shared expert is the family's)."""
    values = {f.name: getattr(config, f.name) for f in fields(MoEFields)}
    return SimpleNamespace(
        **values,
        hidden_size=config.hidden_size,  # type: ignore[attr-defined]
        initializer_range=config.initializer_range,  # type: ignore[attr-defined]
        shared_expert_intermediate_size=shared_size,
        shared_expert_gate=shared_gate,
    )


def _build(
    family: str,
    config: Any,
    vocab_size: int | None,
    hf_fields: Any,
    *,
    registry: Any = None,
    block: SimpleNamespace | None = None,
    block_type: Any = None,
) -> Any:
    """The family's ``transformers`` causal LM; with ``block``, its sparse MLPs are codemoe blocks."""
    import torch
    from transformers import AutoModelForCausalLM

    if vocab_size is not None:
        config.vocab_size = vocab_size
    hf = _hf_config(family, config, hf_fields(config))
    hf._attn_implementation = config.attn_implementation
    model = AutoModelForCausalLM.from_config(hf, attn_implementation=config.attn_implementation)
    if block is not None:
        from codemoe.core.models.blocks import replace_moe_blocks
        from codemoe.core.moe import MoEBlock

        replace_moe_blocks(model, block, registry, block_type=block_type or MoEBlock)
    return model.to(getattr(torch, config.dtype))


def _softmax_routing(model: Any, *, norm_key: bool = True) -> None:
    """Record the routers' choice in the ``transformers`` config keys that reproduce it."""
    from codemoe.core.moe import moe_blocks

    routing = next((b.gate.hf_config() for b in moe_blocks(model)), None)
    if not routing:
        return
    model.config.num_experts_per_tok = routing["num_experts_per_tok"]
    if norm_key:
        model.config.norm_topk_prob = routing["norm_topk_prob"]


def build_mixtral(config: SoftmaxMoeModelConfig, *, registry: Any, vocab_size: int | None = None) -> Any:
    """A Mixtral causal LM with codemoe MoE blocks (its router renormalises the top-k: ``softmax_topk``)."""
    model = _build("mixtral", config, vocab_size, _mixtral, registry=registry, block=_block_spec(config, 0, False))
    _softmax_routing(model, norm_key=False)  # Mixtral always renormalises; it has no norm_topk_prob
    return model


def build_olmoe(config: SoftmaxMoeModelConfig, *, registry: Any, vocab_size: int | None = None) -> Any:
    """An OLMoE causal LM with codemoe MoE blocks."""
    model = _build("olmoe", config, vocab_size, _olmoe, registry=registry, block=_block_spec(config, 0, False))
    _softmax_routing(model)
    return model


def build_qwen2_moe(config: Qwen2MoeModelConfig, *, registry: Any, vocab_size: int | None = None) -> Any:
    """A Qwen2-MoE causal LM with codemoe MoE blocks, the gated shared expert included."""
    block = _block_spec(config, config.shared_expert_intermediate_size, True)
    model = _build("qwen2_moe", config, vocab_size, _qwen2_moe, registry=registry, block=block)
    _softmax_routing(model)
    return model


def build_deepseek_v3(config: DeepseekV3ModelConfig, *, registry: Any, vocab_size: int | None = None) -> Any:
    """A DeepSeek-V3 causal LM (MLA attention) with codemoe MoE blocks, shared experts included."""
    from codemoe.core.models.deepseek import SharedExpertsMoEBlock

    block = _block_spec(config, config.num_shared_experts * config.moe_intermediate_size, False)
    return _build(
        "deepseek_v3",
        config,
        vocab_size,
        _deepseek_v3,
        registry=registry,
        block=block,
        block_type=SharedExpertsMoEBlock,
    )


def build_gpt_oss(config: GptOssModelConfig, *, registry: Any = None, vocab_size: int | None = None) -> Any:
    """A GPT-OSS causal LM, ``transformers``' MoE block kept (see the module docstring); it builds
    no nested component, so ``registry`` is not used."""
    return _build("gpt_oss", config, vocab_size, _gpt_oss)


def build_qwen3(config: DenseModelConfig, *, registry: Any = None, vocab_size: int | None = None) -> Any:
    """A dense Qwen3 causal LM."""
    return _build("qwen3", config, vocab_size, _qwen3)


def build_llama(config: DenseModelConfig, *, registry: Any = None, vocab_size: int | None = None) -> Any:
    """A dense Llama causal LM."""
    return _build("llama", config, vocab_size, _llama)
