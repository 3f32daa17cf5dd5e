"""Known-answer tests of the advantage estimators, on hand-computed tensors."""

from __future__ import annotations

import math

import pytest
import torch
from codemoe.rl.advantages import AdvantageInput


def _outcome(scores, length=1):
    """Outcome rewards on the last of ``length`` tokens, every token valid."""
    b = len(scores)
    rewards = torch.zeros(b, length)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)
    return rewards, torch.ones(b, length)


def test_grpo_normalises_by_group_mean_and_unbiased_std(registry):
    rewards, mask = _outcome([1, 0, 0, 1, 2, 2, 2, 2], length=2)
    est = registry.build("advantage", {"name": "grpo", "std_eps": 0.0})
    adv = est(AdvantageInput(rewards, mask, group_size=4)).advantages
    half_sqrt3 = math.sqrt(3) / 2  # (1 - 0.5) / sqrt(1/3)
    expected = torch.tensor([half_sqrt3, -half_sqrt3, -half_sqrt3, half_sqrt3])
    assert torch.allclose(adv[:4, 0], expected) and torch.allclose(adv[:4, 1], expected)
    eps_est = registry.build("advantage", {"name": "grpo"})
    assert torch.equal(eps_est(AdvantageInput(rewards, mask, group_size=4)).advantages[4:], torch.zeros(4, 2))


def test_grpo_is_zero_on_padding(registry):
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = registry.build("advantage", "grpo")(AdvantageInput(rewards, mask, group_size=2)).advantages
    assert adv[1, 1] == 0 and adv[1, 0] < 0 < adv[0, 0] == adv[0, 1]


def test_dr_grpo_only_centres(registry):
    rewards, mask = _outcome([1, 0, 0, 1])
    adv = registry.build("advantage", "dr_grpo")(AdvantageInput(rewards, mask, group_size=4)).advantages
    assert torch.allclose(adv[:, 0], torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_rloo_uses_leave_one_out_mean(registry):
    rewards, mask = _outcome([1, 0, 0, 1])
    adv = registry.build("advantage", "rloo")(AdvantageInput(rewards, mask, group_size=4)).advantages
    assert torch.allclose(adv[:, 0], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))
    with pytest.raises(ValueError, match="at least 2"):
        registry.build("advantage", "rloo")(AdvantageInput(rewards, mask, group_size=1))


def test_reinforce_pp_returns_baseline_and_whitening(registry):
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = registry.build("advantage", "reinforce_pp")(AdvantageInput(rewards, mask, group_size=2)).advantages
    # returns [[1, 1], [0, -]] minus baseline 0.5 -> [.5, .5, -.5]; mean 1/6, std sqrt(2/9)
    std = math.sqrt(2 / 9)
    expected = torch.tensor([[(0.5 - 1 / 6) / std, (0.5 - 1 / 6) / std], [(-0.5 - 1 / 6) / std, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-6)


def test_gae_known_answer(registry):
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 0.7, 9.0]])  # the padded value must be ignored
    est = registry.build("advantage", {"name": "gae", "gamma": 1.0, "lam": 0.5, "whiten": False})
    out = est(AdvantageInput(rewards, mask, group_size=1, values=values))
    # delta = [0.1, 0.1, 0.3]; A2 = 0.3, A1 = 0.1 + 0.5*0.3, A0 = 0.1 + 0.5*0.25
    assert torch.allclose(out.advantages, torch.tensor([[0.225, 0.25, 0.3, 0.0]]))
    assert torch.allclose(out.returns, torch.tensor([[0.725, 0.85, 1.0, 0.0]]))


def test_gae_whitens_and_needs_values(registry):
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.ones(2, 2)
    est = registry.build("advantage", "gae")
    adv = est(AdvantageInput(rewards, mask, group_size=1, values=torch.zeros(2, 2))).advantages
    assert abs(adv.mean().item()) < 1e-6 and abs(adv.std(unbiased=False).item() - 1) < 1e-4
    with pytest.raises(ValueError, match="critic"):
        est(AdvantageInput(rewards, mask, group_size=1))
