"""Parameter accounting on the meta device: any preset, 1T included, without allocating it.

Active parameters are those one token uses: every dense parameter, the router, and ``k`` of the
``E`` routed experts of each MoE layer (shared experts count in full). The input embedding is a
lookup, so forward FLOPs per token are ``2 · (active − input embedding)`` (one multiply and one
add per weight), and training FLOPs three times that (forward plus a backward twice as costly).
Attention's sequence-length term is left out: it depends on the context, not the preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ParameterCount", "count_parameters"]


@dataclass
class ParameterCount:
    """Parameter counts of one model."""

    total: int  # every parameter (tied weights once)
    active: int  # parameters one token uses
    embedding: int  # input embedding and output head (once if tied)
    expert: int  # routed expert parameters (all experts of all layers)
    active_expert: int  # routed expert parameters one token uses
    router: int  # router parameters
    dense: int  # everything else: attention, norms, dense MLPs, shared experts
    flops_per_token: int  # forward FLOPs per token, 2 · (active − input embedding)
    train_flops_per_token: int  # forward + backward, 3 × the forward

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def count_parameters(model_or_spec: Any, *, registry: Any = None, vocab_size: int | None = None) -> ParameterCount:
    """Count the parameters of a model, or of a spec/preset built on the meta device (no memory)."""
    import torch
    from codemoe.core.models.build import build_model
    from codemoe.core.moe import moe_blocks

    model = model_or_spec
    if isinstance(model_or_spec, (str, Mapping)):
        with torch.device("meta"):
            model = build_model(model_or_spec, registry=registry, vocab_size=vocab_size)
    total = sum(p.numel() for p in model.parameters())
    expert = active_expert = router = 0
    for block in moe_blocks(model):
        n = sum(p.numel() for p in block.experts.parameters())
        expert += n
        active_expert += n * block.gate.top_k // block.experts.num_experts
        router += sum(p.numel() for p in block.gate.parameters())
    input_embedding = model.get_input_embeddings().weight.numel()
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is model.get_input_embeddings().weight
    embedding = input_embedding + (0 if tied or output is None else output.weight.numel())
    active = total - expert + active_expert
    compute = active - input_embedding + (input_embedding if tied else 0)  # a tied head still multiplies
    return ParameterCount(
        total=total,
        active=active,
        embedding=embedding,
        expert=expert,
        active_expert=active_expert,
        router=router,
        dense=total - expert - router - embedding,
        flops_per_token=2 * compute,
        train_flops_per_token=6 * compute,
    )
