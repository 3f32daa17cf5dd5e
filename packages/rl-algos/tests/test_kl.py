"""Known-answer tests of the k1, k2, k3 KL estimators."""

from __future__ import annotations

import math

import torch


def test_estimators_on_a_known_ratio(registry):
    logp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    lr = math.log(2)
    assert math.isclose(registry.build("kl", "k1")(logp, ref).item(), lr, rel_tol=1e-6)
    assert math.isclose(registry.build("kl", "k2")(logp, ref).item(), lr**2 / 2, rel_tol=1e-6)
    assert math.isclose(registry.build("kl", "k3")(logp, ref).item(), 0.5 + lr - 1, rel_tol=1e-6)


def test_all_estimators_are_zero_at_equal_policies_and_k3_is_non_negative(registry):
    logp = torch.randn(64)
    for name in ("k1", "k2", "k3"):
        assert torch.equal(registry.build("kl", name)(logp, logp), torch.zeros(64))
    assert (registry.build("kl", "k3")(logp, torch.randn(64)) >= 0).all()


def test_k1_and_k3_estimate_the_true_kl_without_bias(registry):
    gen = torch.Generator().manual_seed(0)
    p, q = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.4, 0.4, 0.2])
    true_kl = (p * (p / q).log()).sum().item()
    samples = torch.multinomial(p, 200_000, replacement=True, generator=gen)
    logp, ref = p.log()[samples], q.log()[samples]
    for name in ("k1", "k3"):
        assert abs(registry.build("kl", name)(logp, ref).mean().item() - true_kl) < 5e-3


def test_clamp_keeps_k3_finite(registry):
    k3 = registry.build("kl", "k3")(torch.tensor([-200.0]), torch.tensor([0.0]))
    assert torch.isfinite(k3).all()
    assert math.isclose(k3.item(), math.exp(10) - 10 - 1, rel_tol=1e-5)
