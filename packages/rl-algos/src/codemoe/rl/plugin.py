"""codemoe.rl's plugin: registers its components through the ``codemoe`` entry point.

Factories and configs are ``"module:attr"`` strings, so listing components never imports torch.
"""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl

_RL = "codemoe.rl"

# (kind, name, "module:factory", "module:Config", summary)
_COMPONENTS = [
    ("advantage", "grpo", "advantages:GRPOAdvantage", "advantages:GRPOConfig", "group-normalised reward (mean/std)"),
    ("advantage", "dr_grpo", "advantages:DrGRPOAdvantage", "advantages:DrGRPOConfig", "group-centred reward, no std"),
    ("advantage", "rloo", "advantages:RLOOAdvantage", "advantages:RLOOConfig", "leave-one-out baseline"),
    (
        "advantage",
        "reinforce_pp",
        "advantages:ReinforcePPAdvantage",
        "advantages:ReinforcePPConfig",
        "REINFORCE++ with group baseline, batch-whitened",
    ),
    ("advantage", "gae", "advantages:GAEAdvantage", "advantages:GAEConfig", "GAE with a learned critic (PPO)"),
    (
        "policy_loss",
        "ppo_clip",
        "policy_losses:PPOClipLoss",
        "policy_losses:PPOClipConfig",
        "clipped ratio, clip-higher, dual-clip",
    ),
    ("policy_loss", "gspo", "policy_losses:GSPOLoss", "policy_losses:GSPOConfig", "sequence-level clipped ratio"),
    ("kl", "k1", "kl:K1", "kl:KLConfig", "log-ratio KL estimator"),
    ("kl", "k2", "kl:K2", "kl:KLConfig", "squared log-ratio / 2 KL estimator"),
    ("kl", "k3", "kl:K3", "kl:KLConfig", "unbiased non-negative KL estimator"),
    ("loss_agg", "token_mean", "loss_agg:TokenMean", "loss_agg:TokenMeanConfig", "mean over all tokens"),
    (
        "loss_agg",
        "seq_mean_token_mean",
        "loss_agg:SeqMeanTokenMean",
        "loss_agg:SeqMeanTokenMeanConfig",
        "mean over sequences of token means",
    ),
    (
        "loss_agg",
        "seq_mean_token_sum_norm",
        "loss_agg:SeqMeanTokenSumNorm",
        "loss_agg:SeqMeanTokenSumNormConfig",
        "token sum / (sequences * horizon)",
    ),
    ("is_correction", "truncated", "importance:TruncatedIS", "importance:TruncatedISConfig", "truncated IS weight"),
    (
        "is_correction",
        "none",
        "importance:NoCorrection",
        "importance:NoCorrectionConfig",
        "no engine/trainer correction",
    ),
    (
        "algorithm",
        "policy_gradient",
        "algorithm:build_algorithm",
        "algorithm:AlgorithmConfig",
        "policy-gradient RL composed of registered strategies",
    ),
    ("stage", "sft", "stages:SFTStage", "stages:SFTStageConfig", "supervised warm-up with router phases"),
    ("stage", "rl", "stages:RLStage", "stages:RLStageConfig", "RL with engine, sandbox, reward recipe and algorithm"),
    (
        "stage",
        "trajectories",
        "stages:TrajectoriesStage",
        "stages:TrajectoriesStageConfig",
        "record reference agent episodes (the oracle replays gold patches through the tools) for SFT",
    ),
]


@hookimpl
def codemoe_register_components(registry) -> None:
    """Register the RL strategies, the algorithm and the ``sft`` / ``rl`` stages."""
    for kind, name, factory, config, summary in _COMPONENTS:
        registry.register(kind, name, f"{_RL}.{factory}", f"{_RL}.{config}", summary=summary)
