"""The MoE layer: routers, experts, dispatch, balancing losses, metrics and training phases.

Entry points for trainers and engines:

- :func:`aux_losses` — balance and z losses of the last forward (add ``["weighted"]`` to the loss);
- :func:`moe_metrics` — routing metrics, read once per step;
- :func:`capture_routing` — the chosen experts of every forward, for routing replay;
- :func:`capture_choices` — what the routers would choose, also while replaying (routing agreement);
- :func:`replay_routing` — recompute with given experts instead of choosing;
- :func:`set_trainable` — freeze/unfreeze router, experts and dense parameters by phase;
- :func:`checkpoint_layers` — activation checkpointing per block, routing counted once.
"""

from codemoe.core.moe.balance import BALANCE_SCOPES, balance_loss, z_loss
from codemoe.core.moe.block import MoEBlock, MoEOptions, SharedExpert
from codemoe.core.moe.capacity import DROP_POLICIES, apply_capacity, capacity
from codemoe.core.moe.capture import RoutingRecord, capture_choices, capture_routing, replay_routing
from codemoe.core.moe.checkpointing import checkpoint_layers
from codemoe.core.moe.collapse import CollapseConfig, CollapseDetector, CollapseWarning, RouterCollapse
from codemoe.core.moe.dispatch import Dispatched, LocalDispatcher
from codemoe.core.moe.expert_parallel import AllToAllDispatcher
from codemoe.core.moe.experts import Experts, GroupedExperts, LoopExperts, TorchGroupedMMExperts
from codemoe.core.moe.freezing import PHASES, parameter_groups, set_trainable
from codemoe.core.moe.metrics import LayerStats, RoutingStats
from codemoe.core.moe.readout import aux_losses, metrics_from_stats, moe_blocks, moe_metrics, read_layer_stats
from codemoe.core.moe.routing import UNROUTED, Router, RouterOutput

__all__ = [
    "BALANCE_SCOPES",
    "DROP_POLICIES",
    "PHASES",
    "UNROUTED",
    "AllToAllDispatcher",
    "CollapseConfig",
    "CollapseDetector",
    "CollapseWarning",
    "Dispatched",
    "Experts",
    "GroupedExperts",
    "LayerStats",
    "LocalDispatcher",
    "LoopExperts",
    "MoEBlock",
    "MoEOptions",
    "Router",
    "RouterCollapse",
    "RouterOutput",
    "RoutingRecord",
    "RoutingStats",
    "SharedExpert",
    "TorchGroupedMMExperts",
    "apply_capacity",
    "aux_losses",
    "balance_loss",
    "capacity",
    "capture_choices",
    "capture_routing",
    "checkpoint_layers",
    "metrics_from_stats",
    "moe_blocks",
    "moe_metrics",
    "parameter_groups",
    "read_layer_stats",
    "replay_routing",
    "set_trainable",
    "z_loss",
]
