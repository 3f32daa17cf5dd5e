"""Upcycling a dense ``transformers`` Qwen3 into a Qwen3-MoE with codemoe blocks.

Every expert starts as a copy of the dense FFN (sparse upcycling, Komatsuzaki et al. 2022), so
the MoE begins where the dense model is: with identical experts and routing weights that sum to
one, its outputs equal the dense model's whatever the router picks. Options:

- ``noise_std``: multiplicative noise on the copies, so experts can drift apart;
- ``granularity`` g > 1: each dense FFN is sliced into g fine-grained experts of width I/g (their
  down projections scaled by g), repeated to fill ``num_experts``; the dense output is then met
  when a token picks one copy of each slice with equal weights;
- the router starts from ``router_init_std`` (0: uniform scores, every expert equally likely).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["UpcycleConfig", "upcycle"]


@dataclass
class UpcycleConfig:
    """How a dense model becomes an MoE."""

    num_experts: int = 8  # routed experts per layer
    router: dict[str, Any] = field(default_factory=lambda: {"name": "softmax_topk", "top_k": 2})  # router spec
    granularity: int = 1  # slices per dense FFN (fine-grained experts of width I / granularity)
    noise_std: float = 0.0  # std of multiplicative noise on each expert copy (0: exact copies)
    router_init_std: float = 0.02  # std of the router initialisation (0: uniform routing)
    seed: int = 0  # seed of the noise and router initialisation


def _moe_spec(dense_config: Any, config: UpcycleConfig) -> dict[str, Any]:
    rope = dense_config.rope_parameters or {}
    if dense_config.intermediate_size % config.granularity:
        raise ValueError(
            f"intermediate_size {dense_config.intermediate_size} is not divisible by granularity {config.granularity}"
        )
    if config.num_experts % config.granularity:
        raise ValueError(f"num_experts {config.num_experts} is not a multiple of granularity {config.granularity}")
    return {
        "name": "qwen3_moe",
        "vocab_size": dense_config.vocab_size,
        "hidden_size": dense_config.hidden_size,
        "num_layers": dense_config.num_hidden_layers,
        "num_heads": dense_config.num_attention_heads,
        "num_kv_heads": dense_config.num_key_value_heads,
        "head_dim": dense_config.head_dim,
        "num_experts": config.num_experts,
        "moe_intermediate_size": dense_config.intermediate_size // config.granularity,
        "intermediate_size": dense_config.intermediate_size,
        "router": dict(config.router),
        "max_position_embeddings": dense_config.max_position_embeddings,
        "rope_theta": float(rope.get("rope_theta", 1_000_000.0)),
        "rms_norm_eps": dense_config.rms_norm_eps,
        "tie_word_embeddings": bool(dense_config.tie_word_embeddings),
        "initializer_range": dense_config.initializer_range,
    }


@torch.no_grad()
def upcycle(dense: nn.Module, config: UpcycleConfig | None = None, *, registry: Any = None) -> nn.Module:
    """A Qwen3-MoE with codemoe blocks whose experts are copies (or slices) of ``dense``'s FFNs."""
    from codemoe.core.models.build import build_model
    from codemoe.core.moe import moe_blocks

    config = config or UpcycleConfig()
    if dense.config.model_type != "qwen3":
        raise ValueError(f"upcycling starts from a dense qwen3 model; this one is '{dense.config.model_type}'")
    moe = build_model(_moe_spec(dense.config, config), registry=registry).to(dense.dtype)
    target = dict(moe.named_parameters())
    for name, param in dense.named_parameters():
        if ".mlp." not in name and name in target:
            target[name].copy_(param)
    generator = torch.Generator().manual_seed(config.seed)
    for block in moe_blocks(moe):
        mlp = dense.model.layers[block.layer].mlp
        _fill_experts(block.experts, mlp, config, generator)
        block.gate.weight.copy_(torch.randn(block.gate.weight.shape, generator=generator) * config.router_init_std)
    return moe


def _fill_experts(experts: nn.Module, mlp: nn.Module, config: UpcycleConfig, generator: torch.Generator) -> None:
    g = config.granularity
    width = mlp.gate_proj.weight.shape[0] // g
    for e in range(experts.num_experts):
        rows = slice((e % g) * width, (e % g + 1) * width)
        gate_up = torch.cat([mlp.gate_proj.weight[rows], mlp.up_proj.weight[rows]], dim=0)  # [2I/g, H]
        down = mlp.down_proj.weight[:, rows] * g  # [H, I/g]
        if config.noise_std > 0:
            gate_up = gate_up * (1 + config.noise_std * torch.randn(gate_up.shape, generator=generator))
            down = down * (1 + config.noise_std * torch.randn(down.shape, generator=generator))
        experts.gate_up_proj[e].copy_(gate_up)
        experts.down_proj[e].copy_(down)
