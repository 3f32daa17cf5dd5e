"""Known-answer tests of the policy losses (PPO clip with clip-higher and dual clip, GSPO)."""

from __future__ import annotations

import math

import torch


def _call(loss, ratio, adv, mask=None):
    ratio, adv = torch.tensor([ratio]), torch.tensor([adv])
    old = torch.zeros_like(ratio)
    return loss(torch.log(ratio), old, adv, torch.ones_like(ratio) if mask is None else mask)


def test_ppo_clip_symmetric(registry):
    loss = registry.build("policy_loss", "ppo_clip")
    out = _call(loss, [1.5, 0.5, 1.0, 1.1], [1.0, -1.0, 1.0, 1.0])
    assert torch.allclose(out.per_token, torch.tensor([[-1.2, 0.8, -1.0, -1.1]]))
    assert out.clipped.tolist() == [[True, True, False, False]]
    assert torch.allclose(out.ratio, torch.tensor([[1.5, 0.5, 1.0, 1.1]]))


def test_ppo_clip_higher_moves_only_the_upper_bound(registry):
    loss = registry.build("policy_loss", {"name": "ppo_clip", "clip_high": 0.28})
    out = _call(loss, [1.5, 0.5], [1.0, -1.0])
    assert torch.allclose(out.per_token, torch.tensor([[-1.28, 0.8]]))


def test_ppo_dual_clip_caps_negative_advantage_loss(registry):
    loss = registry.build("policy_loss", {"name": "ppo_clip", "dual_clip": 3.0})
    out = _call(loss, [4.0, 2.0, 4.0], [-1.0, -1.0, 1.0])
    # A<0, r=4: max(4, 0.8)=4 > 3 -> 3; r=2: 2 stays; A>0 is never dual-clipped
    assert torch.allclose(out.per_token, torch.tensor([[3.0, 2.0, -1.2]]))
    assert out.clipped.tolist() == [[True, False, True]]


def test_ppo_gradient_vanishes_when_clipped(registry):
    loss = registry.build("policy_loss", "ppo_clip")
    logp = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_()
    out = loss(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    out.per_token.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -1.1]]))  # d(-r)/dlogp = -r


def test_gspo_uses_the_sequence_mean_log_ratio(registry):
    loss = registry.build("policy_loss", {"name": "gspo", "clip_low": 1.0, "clip_high": 1.0})
    logp = torch.tensor([[0.1, 0.3, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the padded token must not count
    out = loss(logp, torch.zeros(1, 3), torch.ones(1, 3), mask)
    r = math.exp(0.2)
    assert torch.allclose(out.ratio, torch.full((1, 3), r))
    ((out.per_token * mask).sum() / 2).backward()
    # loss = -r(logp), r = exp(mean log ratio): d/dlogp_t = -r / n on valid tokens, 0 on padding
    assert torch.allclose(logp.grad, torch.tensor([[-r / 2, -r / 2, 0.0]]), atol=1e-6)


def test_gspo_default_epsilons_clip_tightly(registry):
    loss = registry.build("policy_loss", "gspo")
    out = loss(torch.tensor([[0.1, 0.3]]), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    assert torch.allclose(out.per_token, torch.full((1, 2), -(1 + 4e-4)))
    assert out.clipped.all()
