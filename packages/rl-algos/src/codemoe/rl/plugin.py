"""codemoe.rl's plugin: the RL strategies, the algorithm, the ``sft``, ``rl`` and ``trajectories`` stages, ``codemoe sft``.

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
        "advantage",
        "grpo",
        "codemoe.rl.advantages:GRPOAdvantage",
        "codemoe.rl.advantages:GRPOConfig",
        "group-normalised reward (mean/std)",
    ),
    (
        "advantage",
        "dr_grpo",
        "codemoe.rl.advantages:DrGRPOAdvantage",
        "codemoe.rl.advantages:DrGRPOConfig",
        "group-centred reward, no std",
    ),
    (
        "advantage",
        "rloo",
        "codemoe.rl.advantages:RLOOAdvantage",
        "codemoe.rl.advantages:RLOOConfig",
        "leave-one-out baseline",
    ),
    (
        "advantage",
        "reinforce_pp",
        "codemoe.rl.advantages:ReinforcePPAdvantage",
        "codemoe.rl.advantages:ReinforcePPConfig",
        "REINFORCE++ with group baseline, batch-whitened",
    ),
    (
        "advantage",
        "gae",
        "codemoe.rl.advantages:GAEAdvantage",
        "codemoe.rl.advantages:GAEConfig",
        "GAE with a learned critic (PPO)",
    ),
    (
        "policy_loss",
        "ppo_clip",
        "codemoe.rl.policy_losses:PPOClipLoss",
        "codemoe.rl.policy_losses:PPOClipConfig",
        "clipped ratio, clip-higher, dual-clip",
    ),
    (
        "policy_loss",
        "gspo",
        "codemoe.rl.policy_losses:GSPOLoss",
        "codemoe.rl.policy_losses:GSPOConfig",
        "sequence-level clipped ratio",
    ),
    (
        "kl",
        "k1",
        "codemoe.rl.kl:K1",
        "codemoe.rl.kl:KLConfig",
        "log-ratio KL estimator",
    ),
    (
        "kl",
        "k2",
        "codemoe.rl.kl:K2",
        "codemoe.rl.kl:KLConfig",
        "squared log-ratio / 2 KL estimator",
    ),
    (
        "kl",
        "k3",
        "codemoe.rl.kl:K3",
        "codemoe.rl.kl:KLConfig",
        "unbiased non-negative KL estimator",
    ),
    (
        "loss_agg",
        "token_mean",
        "codemoe.rl.loss_agg:TokenMean",
        "codemoe.rl.loss_agg:TokenMeanConfig",
        "mean over all tokens",
    ),
    (
        "loss_agg",
        "seq_mean_token_mean",
        "codemoe.rl.loss_agg:SeqMeanTokenMean",
        "codemoe.rl.loss_agg:SeqMeanTokenMeanConfig",
        "mean over sequences of token means",
    ),
    (
        "loss_agg",
        "seq_mean_token_sum_norm",
        "codemoe.rl.loss_agg:SeqMeanTokenSumNorm",
        "codemoe.rl.loss_agg:SeqMeanTokenSumNormConfig",
        "token sum / (sequences * horizon)",
    ),
    (
        "is_correction",
        "truncated",
        "codemoe.rl.importance:TruncatedIS",
        "codemoe.rl.importance:TruncatedISConfig",
        "truncated IS weight, per token or per sequence",
    ),
    (
        "is_correction",
        "masked",
        "codemoe.rl.importance:MaskedIS",
        "codemoe.rl.importance:MaskedISConfig",
        "masked IS: drop tokens or sequences whose ratio leaves a band",
    ),
    (
        "is_correction",
        "decoupled",
        "codemoe.rl.importance:DecoupledIS",
        "codemoe.rl.importance:DecoupledISConfig",
        "decoupled PPO: behaviour-to-proximal weight, clip against the proximal policy",
    ),
    (
        "is_correction",
        "none",
        "codemoe.rl.importance:NoCorrection",
        "codemoe.rl.importance:NoCorrectionConfig",
        "no engine/trainer correction",
    ),
    (
        "algorithm",
        "policy_gradient",
        "codemoe.rl.algorithm:build_algorithm",
        "codemoe.rl.algorithm:AlgorithmConfig",
        "policy-gradient RL composed of registered strategies",
    ),
    (
        "stage",
        "sft",
        "codemoe.rl.stages:SFTStage",
        "codemoe.rl.stages:SFTStageConfig",
        "supervised warm-up with router phases",
    ),
    (
        "stage",
        "rl",
        "codemoe.rl.stages:RLStage",
        "codemoe.rl.stages:RLStageConfig",
        "RL with engine, sandbox, reward recipe and algorithm",
    ),
    (
        "stage",
        "trajectories",
        "codemoe.rl.stages:TrajectoriesStage",
        "codemoe.rl.stages:TrajectoriesStageConfig",
        "record reference agent episodes (the oracle replays gold patches through the tools) for SFT",
    ),
]


@hookimpl
def codemoe_register_components(registry: Registry) -> None:
    """Register every row of :data:`COMPONENTS`."""
    for kind, name, factory, config, summary in COMPONENTS:
        registry.register(kind, name, factory, config, summary=summary)


@hookimpl
def codemoe_add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``codemoe sft`` (copy-probe)."""
    from codemoe.rl.copy_probe import add_sft_command

    add_sft_command(subparsers)
