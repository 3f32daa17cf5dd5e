"""Where codemoe's strategy choices coincide with TRL's GRPO loss types, the numbers are the same.

TRL's ``GRPOTrainer._compute_loss`` is called on the same log-probs, advantages and reference
log-probs; only the trainer object around it is a stand-in, so the loss arithmetic is TRL's own.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from codemoe.rl.advantages import AdvantageInput
from trl import GRPOTrainer

B, T, MAX_LEN, BETA = 4, 5, 6, 0.04


def _inputs():
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(B, T, generator=gen) * 2
    old = logp + 0.3 * torch.randn(B, T, generator=gen)
    ref = logp + 0.2 * torch.randn(B, T, generator=gen)
    mask = torch.ones(B, T)
    mask[1, 3:] = 0
    mask[2, 1:] = 0
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2])
    return logp, old, ref, mask, adv


def _trl_loss(loss_type: str, logp: torch.Tensor, level: str = "token") -> torch.Tensor:
    _, old, ref, mask, adv = _inputs()
    ident = SimpleNamespace(gather=lambda x: x, reduce=lambda x, reduction="sum": x, gather_for_metrics=lambda x: x)
    fake = SimpleNamespace(
        loss_type=loss_type,
        beta=BETA,
        epsilon_low=0.2,
        epsilon_high=0.28,
        importance_sampling_level=level,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_LEN,
        accelerator=SimpleNamespace(num_processes=1, **vars(ident)),
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
        _metrics=defaultdict(lambda: defaultdict(list)),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros(B, T), None),
    )
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    return GRPOTrainer._compute_loss(fake, None, inputs)


def _codemoe_loss(registry, logp, policy_loss, loss_agg):
    _, old, ref, mask, adv = _inputs()
    algo = registry.build(
        "algorithm",
        {
            "name": "policy_gradient",
            "policy_loss": policy_loss,
            "loss_agg": loss_agg,
            "kl": {"name": "k3", "clamp": None},
            "kl_coef": BETA,
            "is_correction": "none",
        },
        registry=registry,
    )
    terms = algo.loss_terms(logp, old, adv.unsqueeze(-1) * mask, mask, torch.ones(B, T), ref)
    return terms.numerator / terms.denominator


CASES = [
    ("grpo", "token", {"name": "ppo_clip", "clip_high": 0.28}, "seq_mean_token_mean"),
    ("bnpo", "token", {"name": "ppo_clip", "clip_high": 0.28}, "token_mean"),
    ("dapo", "token", {"name": "ppo_clip", "clip_high": 0.28}, "token_mean"),
    (
        "dr_grpo",
        "token",
        {"name": "ppo_clip", "clip_high": 0.28},
        {"name": "seq_mean_token_sum_norm", "horizon": MAX_LEN},
    ),
    ("grpo", "sequence", {"name": "gspo", "clip_low": 0.2, "clip_high": 0.28}, "seq_mean_token_mean"),
]


@pytest.mark.parametrize(("loss_type", "level", "policy_loss", "loss_agg"), CASES)
def test_loss_and_gradient_match_trl(registry, loss_type, level, policy_loss, loss_agg):
    logp = _inputs()[0]
    ours_logp, trl_logp = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    ours = _codemoe_loss(registry, ours_logp, policy_loss, loss_agg)
    theirs = _trl_loss(loss_type, trl_logp, level)
    assert torch.allclose(ours, theirs, atol=1e-6), (ours.item(), theirs.item())
    ours.backward()
    theirs.backward()
    mask = _inputs()[3]
    assert torch.allclose(ours_logp.grad * mask, trl_logp.grad * mask, atol=1e-6)


def test_grpo_advantage_matches_trl_scaling(registry):
    from trl.trainer.utils import nanstd

    rewards = torch.tensor([0.2, 1.0, 0.0, 0.5, 3.0, 3.0, 1.0, 0.0])
    grouped = rewards.view(-1, 4)
    theirs = (grouped - grouped.mean(-1, keepdim=True)) / (
        torch.stack([nanstd(g) for g in grouped]).unsqueeze(-1) + 1e-4
    )
    est = registry.build("advantage", {"name": "grpo", "std_eps": 1e-4})
    ours = est(AdvantageInput(rewards.unsqueeze(-1), torch.ones(8, 1), group_size=4)).advantages
    assert torch.allclose(ours.view(-1, 4), theirs, atol=1e-6)
