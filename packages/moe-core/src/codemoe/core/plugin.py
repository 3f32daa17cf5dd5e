"""codemoe-core's own plugin: registered through the ``codemoe`` entry point like any other."""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl


@hookimpl
def codemoe_register_components(registry) -> None:
    registry.register(
        "stage",
        "environment",
        "codemoe.core.stages:EnvironmentStage",
        "codemoe.core.stages:EnvironmentConfig",
        summary="record the software and hardware of the run",
    )
    registry.register(
        "model",
        "qwen3_moe",
        "codemoe.core.models.qwen3_moe:build_qwen3_moe",
        "codemoe.core.models.qwen3_moe:Qwen3MoeModelConfig",
        summary="transformers Qwen3-MoE causal LM with codemoe MoE blocks",
    )
    registry.register(
        "experts",
        "grouped",
        "codemoe.core.moe.experts:build_grouped_experts",
        "codemoe.core.moe.experts:GroupedExpertsConfig",
        summary="per-expert matmuls fused with gather/scatter, hand-written backward (fast)",
    )
    registry.register(
        "experts",
        "grouped_mm",
        "codemoe.core.moe.experts:build_torch_grouped_mm_experts",
        "codemoe.core.moe.experts:GroupedExpertsConfig",
        summary="torch.nn.functional.grouped_mm, one kernel per projection (for GPUs)",
    )
    registry.register(
        "experts",
        "loop",
        "codemoe.core.moe.experts:build_loop_experts",
        "codemoe.core.moe.experts:LoopExpertsConfig",
        summary="one masked pass per expert (reference)",
    )
    registry.register(
        "dispatcher",
        "local",
        "codemoe.core.moe.experts:build_local_dispatcher",
        "codemoe.core.moe.dispatch:LocalDispatcherConfig",
        summary="group (token, expert) assignments by expert within one process",
    )
    registry.register(
        "dispatcher",
        "all_to_all",
        "codemoe.core.moe.expert_parallel:build_all_to_all_dispatcher",
        "codemoe.core.moe.expert_parallel:AllToAllDispatcherConfig",
        summary="expert parallelism: rows exchanged by all-to-all with the ranks holding their experts",
    )


@hookimpl
def codemoe_add_commands(subparsers) -> None:
    from codemoe.core.models.cli import add_model_command

    add_model_command(subparsers)
