"""Parameter groups and training phases for the router cold start.

The seeds warm the router and experts up on supervised data before joint and RL training (a
router that starts with no knowledge sends tokens at random and training oscillates). Phases
name which parameter groups train; everything else is frozen:

- ``router``: only router parameters (experts and the dense model frozen);
- ``experts``: only the experts (routed and shared);
- ``moe``: router and experts;
- ``frozen_router``: everything except the router (train the model under fixed routing);
- ``dense``: only the non-MoE parameters (attention, norms, embeddings);
- ``all``: everything.
"""

from __future__ import annotations

from codemoe.core.moe.readout import moe_blocks
from torch import nn

__all__ = ["PHASES", "parameter_groups", "set_trainable"]

PHASES: dict[str, frozenset[str]] = {
    "router": frozenset({"router"}),
    "experts": frozenset({"experts"}),
    "moe": frozenset({"router", "experts"}),
    "frozen_router": frozenset({"experts", "dense"}),
    "dense": frozenset({"dense"}),
    "all": frozenset({"router", "experts", "dense"}),
}


def parameter_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Parameters by group: ``router``, ``experts`` (routed and shared), ``dense`` (the rest)."""
    router_ids: set[int] = set()
    expert_ids: set[int] = set()
    for block in moe_blocks(model):
        router_ids.update(id(p) for p in block.gate.parameters())
        expert_ids.update(id(p) for p in block.experts.parameters())
        for module in (block.shared_expert, block.shared_expert_gate):
            if module is not None:
                expert_ids.update(id(p) for p in module.parameters())
    groups: dict[str, list[nn.Parameter]] = {"router": [], "experts": [], "dense": []}
    for p in model.parameters():
        group = "router" if id(p) in router_ids else "experts" if id(p) in expert_ids else "dense"
        groups[group].append(p)
    return groups


def set_trainable(model: nn.Module, phase: str) -> dict[str, int]:
    """Freeze and unfreeze parameter groups for ``phase``; returns trainable and frozen parameter counts."""
    try:
        trainable_groups = PHASES[phase]
    except KeyError:
        raise ValueError(f"unknown training phase '{phase}': choose one of {', '.join(PHASES)}") from None
    counts = {"trainable": 0, "frozen": 0}
    for group, params in parameter_groups(model).items():
        on = group in trainable_groups
        for p in params:
            p.requires_grad_(on)
            counts["trainable" if on else "frozen"] += p.numel()
    return counts
