"""codemoe.router's plugin: the routing strategies (kind ``router``).

:data:`COMPONENTS` is the package's one registration table, walked by the hook below. Factories and
configs are ``"module:attr"`` strings, imported only when a component is built, so listing
components imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemoe.core.hookspecs import hookimpl

if TYPE_CHECKING:
    from codemoe.core.registry import Registry

# (kind, name, "module:factory", "module:Config", summary)
COMPONENTS: list[tuple[str, str, str, str, str]] = [
    (
        "router",
        "softmax_topk",
        "codemoe.router.softmax_topk:build",
        "codemoe.router.softmax_topk:SoftmaxTopKConfig",
        "softmax over experts, top-k per token (Qwen3-MoE, Mixtral)",
    ),
    (
        "router",
        "sigmoid_bias",
        "codemoe.router.sigmoid_bias:build",
        "codemoe.router.sigmoid_bias:SigmoidBiasConfig",
        "sigmoid scores + aux-loss-free balancing bias (DeepSeek-V3)",
    ),
    (
        "router",
        "group_limited",
        "codemoe.router.group_limited:build",
        "codemoe.router.group_limited:GroupLimitedConfig",
        "softmax top-k within each token's best expert groups",
    ),
    (
        "router",
        "noisy_topk",
        "codemoe.router.noisy_topk:build",
        "codemoe.router.noisy_topk:NoisyTopKConfig",
        "top-k of noisy logits while training (Shazeer et al.)",
    ),
    (
        "router",
        "expert_choice",
        "codemoe.router.expert_choice:build",
        "codemoe.router.expert_choice:ExpertChoiceConfig",
        "each expert picks its top-C tokens (Zhou et al.)",
    ),
    (
        "router",
        "hash",
        "codemoe.router.hash_routing:build",
        "codemoe.router.hash_routing:HashConfig",
        "experts from a hash of the token id (Roller et al.)",
    ),
]


@hookimpl
def codemoe_register_components(registry: Registry) -> None:
    """Register every row of :data:`COMPONENTS`."""
    for kind, name, factory, config, summary in COMPONENTS:
        registry.register(kind, name, factory, config, summary=summary)
