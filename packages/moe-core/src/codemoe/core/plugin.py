"""codemoe-core's own plugin: registered through the ``codemoe`` entry point like any other.

:data:`COMPONENTS` is the package's one registration table, walked by the hook below. Factories and
configs are ``"module:attr"`` strings, imported only when a component is built, so listing
components imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemoe.core.hookspecs import hookimpl

if TYPE_CHECKING:
    import argparse

    from codemoe.core.registry import Registry

# (kind, name, "module:factory", "module:Config", summary)
COMPONENTS: list[tuple[str, str, str, str, str]] = [
    (
        "stage",
        "environment",
        "codemoe.core.stages:EnvironmentStage",
        "codemoe.core.stages:EnvironmentConfig",
        "record the software and hardware of the run",
    ),
    (
        "model",
        "qwen3_moe",
        "codemoe.core.models.qwen3_moe:build_qwen3_moe",
        "codemoe.core.models.qwen3_moe:Qwen3MoeModelConfig",
        "transformers Qwen3-MoE causal LM with codemoe MoE blocks",
    ),
    (
        "model",
        "mixtral",
        "codemoe.core.models.families:build_mixtral",
        "codemoe.core.models.families:SoftmaxMoeModelConfig",
        "transformers Mixtral causal LM with codemoe MoE blocks",
    ),
    (
        "model",
        "qwen2_moe",
        "codemoe.core.models.families:build_qwen2_moe",
        "codemoe.core.models.families:Qwen2MoeModelConfig",
        "transformers Qwen2-MoE causal LM with codemoe MoE blocks and its gated shared expert",
    ),
    (
        "model",
        "olmoe",
        "codemoe.core.models.families:build_olmoe",
        "codemoe.core.models.families:SoftmaxMoeModelConfig",
        "transformers OLMoE causal LM with codemoe MoE blocks",
    ),
    (
        "model",
        "deepseek_v3",
        "codemoe.core.models.families:build_deepseek_v3",
        "codemoe.core.models.families:DeepseekV3ModelConfig",
        "transformers DeepSeek-V3 causal LM (MLA) with codemoe blocks, sigmoid_bias routing",
    ),
    (
        "model",
        "gpt_oss",
        "codemoe.core.models.families:build_gpt_oss",
        "codemoe.core.models.families:GptOssModelConfig",
        "transformers GPT-OSS causal LM (sinks, sliding windows), its own MoE block kept",
    ),
    (
        "model",
        "qwen3",
        "codemoe.core.models.families:build_qwen3",
        "codemoe.core.models.families:DenseModelConfig",
        "transformers Qwen3 dense causal LM",
    ),
    (
        "model",
        "llama",
        "codemoe.core.models.families:build_llama",
        "codemoe.core.models.families:DenseModelConfig",
        "transformers Llama dense causal LM",
    ),
    (
        "experts",
        "grouped",
        "codemoe.core.moe.experts:build_grouped_experts",
        "codemoe.core.moe.experts:GroupedExpertsConfig",
        "per-expert matmuls fused with gather/scatter, hand-written backward (fast)",
    ),
    (
        "experts",
        "grouped_mm",
        "codemoe.core.moe.experts:build_torch_grouped_mm_experts",
        "codemoe.core.moe.experts:GroupedExpertsConfig",
        "torch.nn.functional.grouped_mm, one kernel per projection (for GPUs)",
    ),
    (
        "experts",
        "loop",
        "codemoe.core.moe.experts:build_loop_experts",
        "codemoe.core.moe.experts:LoopExpertsConfig",
        "one masked pass per expert (reference)",
    ),
    (
        "dispatcher",
        "local",
        "codemoe.core.moe.experts:build_local_dispatcher",
        "codemoe.core.moe.dispatch:LocalDispatcherConfig",
        "group (token, expert) assignments by expert within one process",
    ),
    (
        "logger",
        "tensorboard",
        "codemoe.core.loggers:build_tensorboard",
        "codemoe.core.loggers:TensorBoardConfig",
        "every metric to TensorBoard event files in the run directory (needs the tensorboard extra)",
    ),
    (
        "logger",
        "wandb",
        "codemoe.core.loggers:build_wandb",
        "codemoe.core.loggers:WandbConfig",
        "every metric to a Weights & Biases run, offline by default (needs the wandb extra)",
    ),
    (
        "dispatcher",
        "all_to_all",
        "codemoe.core.moe.expert_parallel:build_all_to_all_dispatcher",
        "codemoe.core.moe.expert_parallel:AllToAllDispatcherConfig",
        "expert parallelism: rows exchanged by all-to-all with the ranks holding their experts",
    ),
]


@hookimpl
def codemoe_register_components(registry: Registry) -> None:
    """Register every row of :data:`COMPONENTS`."""
    for kind, name, factory, config, summary in COMPONENTS:
        registry.register(kind, name, factory, config, summary=summary)


@hookimpl
def codemoe_add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``codemoe model`` (summary, convert, ...)."""
    from codemoe.core.models.cli import add_model_command

    add_model_command(subparsers)
