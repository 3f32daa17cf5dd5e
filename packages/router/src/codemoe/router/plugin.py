"""codemoe.router's plugin: registers the routing strategies (kind ``router``)."""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl

# name -> (module, config class, summary)
ROUTERS = {
    "softmax_topk": ("softmax_topk", "SoftmaxTopKConfig", "softmax over experts, top-k per token (Qwen3-MoE, Mixtral)"),
    "sigmoid_bias": (
        "sigmoid_bias",
        "SigmoidBiasConfig",
        "sigmoid scores + aux-loss-free balancing bias (DeepSeek-V3)",
    ),
    "group_limited": ("group_limited", "GroupLimitedConfig", "softmax top-k within each token's best expert groups"),
    "noisy_topk": ("noisy_topk", "NoisyTopKConfig", "top-k of noisy logits while training (Shazeer et al.)"),
    "expert_choice": ("expert_choice", "ExpertChoiceConfig", "each expert picks its top-C tokens (Zhou et al.)"),
    "hash": ("hash_routing", "HashConfig", "experts from a hash of the token id (Roller et al.)"),
}


@hookimpl
def codemoe_register_components(registry) -> None:
    for name, (module, config, summary) in ROUTERS.items():
        registry.register(
            "router", name, f"codemoe.router.{module}:build", f"codemoe.router.{module}:{config}", summary=summary
        )
