"""codemoe.router's plugin: registers the routing strategies (kind ``router``)."""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl

ROUTERS = {
    "softmax_topk": ("softmax_topk", "SoftmaxTopKConfig", "softmax over experts, top-k per token (Qwen3-MoE, Mixtral)"),
}


@hookimpl
def codemoe_register_components(registry) -> None:
    for name, (module, config, summary) in ROUTERS.items():
        registry.register(
            "router", name, f"codemoe.router.{module}:build", f"codemoe.router.{module}:{config}", summary=summary
        )
