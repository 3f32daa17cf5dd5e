"""Conformance contracts for the RL strategy kinds: ``advantage``, ``policy_loss``, ``kl`` and ``loss_agg``.

Used like the core kit (:mod:`codemoe.core.testing`), whose generic checks every contract here
inherits::

    from codemoe.rl.testing import AdvantageContract

    class TestMyAdvantage(AdvantageContract):
        name = "my_advantage"

Each contract states the law the trainer relies on and checks it on random batches with padding.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from codemoe.core.testing import ComponentContract, fp32_close
from codemoe.rl.advantages import AdvantageInput

__all__ = ["AdvantageContract", "KLContract", "LossAggregationContract", "PolicyLossContract"]


def _mask(batch: int, horizon: int, seed: int) -> torch.Tensor:
    """``[B, T]`` completion masks of random lengths 1..T (the rest is padding)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, horizon + 1, (batch,), generator=g)
    return (torch.arange(horizon)[None, :] < lengths[:, None]).float()


class AdvantageContract(ComponentContract):
    """An advantage estimator: ``factory(config)(AdvantageInput) -> AdvantageOutput``.

    Advantages are ``[B, T]``, finite, zero on padding; within a group a better-scored sample gets a
    higher advantage on its first token; a group whose samples all score the same carries no signal
    (zero advantages) when the estimator uses a group baseline; permuting whole groups permutes the
    result; the same input gives the same output.
    """

    kind = "advantage"
    group_size: ClassVar[int] = 4
    groups: ClassVar[int] = 3
    horizon: ClassVar[int] = 6
    needs_values: ClassVar[bool] = False  # critic-based (GAE): the kit passes values V(s) = 0
    group_baseline: ClassVar[bool] = True  # equal rewards in a group give zero advantages

    def make_input(self, scores: torch.Tensor, seed: int = 0) -> AdvantageInput:
        """Outcome rewards ``scores [B]`` on each sequence's last completion token."""
        batch = scores.numel()
        mask = _mask(batch, self.horizon, seed)
        last = mask.sum(-1).long() - 1
        token_rewards = torch.zeros(batch, self.horizon)
        token_rewards[torch.arange(batch), last] = scores
        values = torch.zeros(batch, self.horizon) if self.needs_values else None
        return AdvantageInput(token_rewards=token_rewards, mask=mask, group_size=self.group_size, values=values)

    def scores(self, seed: int = 1) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randn(self.groups * self.group_size, generator=g)

    def test_shape_finite_and_zero_on_padding(self, registry: Any, spec: dict[str, Any]) -> None:
        inp = self.make_input(self.scores())
        out = self.build(registry, spec)(inp)
        assert out.advantages.shape == inp.mask.shape, f"advantages {tuple(out.advantages.shape)}, mask {tuple(inp.mask.shape)}"
        assert torch.isfinite(out.advantages).all(), "non-finite advantages"
        assert (out.advantages[inp.mask == 0] == 0).all(), "padding tokens carry advantage"

    def test_a_better_sample_gets_a_higher_advantage(self, registry: Any, spec: dict[str, Any]) -> None:
        # same lengths for all, so only the scores differ (a discounted estimator sees no length effect)
        scores = self.scores()
        inp = self.make_input(scores)
        inp.mask[:] = 1.0
        inp.token_rewards.zero_()
        inp.token_rewards[:, -1] = scores
        first = self.build(registry, spec)(inp).advantages[:, 0].view(self.groups, self.group_size)
        grouped = scores.view(self.groups, self.group_size)
        for g in range(self.groups):
            order = grouped[g].argsort()
            assert (first[g][order].diff() > 0).all(), f"group {g}: scores {grouped[g].tolist()} -> advantages {first[g].tolist()}"

    def test_a_group_of_equal_rewards_carries_no_signal(self, registry: Any, spec: dict[str, Any]) -> None:
        if not self.group_baseline:
            return
        scores = torch.full((self.groups * self.group_size,), 0.7)
        out = self.build(registry, spec)(self.make_input(scores))
        # the group mean of equal fp32 values equals them up to an ulp; eps-scaled by a tiny std
        assert out.advantages.abs().max() < 1e-4, f"equal rewards gave advantages up to {out.advantages.abs().max():.3g}"

    def test_permuting_groups_permutes_the_advantages(self, registry: Any, spec: dict[str, Any]) -> None:
        inp = self.make_input(self.scores())
        perm = torch.tensor([2, 0, 1])
        rows = (perm[:, None] * self.group_size + torch.arange(self.group_size)).flatten()
        moved = AdvantageInput(token_rewards=inp.token_rewards[rows], mask=inp.mask[rows], group_size=self.group_size,
                               values=None if inp.values is None else inp.values[rows])
        estimator = self.build(registry, spec)
        # batch-whitening sums in another order: fp32 rounding, ~1e-7 relative
        fp32_close(estimator(moved).advantages, estimator(inp).advantages[rows], what="advantages of permuted groups")

    def test_deterministic(self, registry: Any, spec: dict[str, Any]) -> None:
        inp = self.make_input(self.scores())
        a, b = self.build(registry, spec)(inp).advantages, self.build(registry, spec)(inp).advantages
        assert torch.equal(a, b)


class PolicyLossContract(ComponentContract):
    """A policy loss: ``factory(config)(logp, old_logp, advantages, mask) -> PolicyLossOutput``.

    ``per_token``, ``ratio`` and ``clipped`` are ``[B, T]``; on-policy (``logp == old_logp``) the
    ratio is 1 and nothing is clipped; the gradient of the masked loss pushes each completion
    token's log-prob up where its advantage is positive and down where it is negative, and padding
    gets no gradient.
    """

    kind = "policy_loss"
    shape: ClassVar[tuple[int, int]] = (6, 5)

    def batch(self, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        B, T = self.shape
        logp = -torch.rand(B, T, generator=g) * 3 - 0.1
        mask = _mask(B, T, seed + 1)
        sign = torch.where(torch.arange(B) % 2 == 0, 1.0, -1.0)[:, None]
        advantages = (torch.rand(B, 1, generator=g) + 0.5) * sign * mask  # one advantage per sequence
        return logp, logp.clone(), advantages, mask

    def test_outputs_are_token_shaped(self, registry: Any, spec: dict[str, Any]) -> None:
        logp, old, adv, mask = self.batch()
        old = old + 0.1 * torch.randn(old.shape, generator=torch.Generator().manual_seed(3))
        out = self.build(registry, spec)(logp, old, adv, mask)
        for field in ("per_token", "ratio", "clipped"):
            assert getattr(out, field).shape == logp.shape, f"{field} is {tuple(getattr(out, field).shape)}"
        assert out.clipped.dtype == torch.bool
        assert torch.isfinite(out.per_token[mask > 0]).all() and torch.isfinite(out.ratio[mask > 0]).all()
        assert not out.ratio.requires_grad, "the reported ratio must be detached"

    def test_on_policy_the_ratio_is_one_and_nothing_is_clipped(self, registry: Any, spec: dict[str, Any]) -> None:
        logp, old, adv, mask = self.batch()
        out = self.build(registry, spec)(logp, old, adv, mask)
        fp32_close(out.ratio[mask > 0], torch.ones_like(out.ratio[mask > 0]), what="on-policy ratio", atol=1e-6)
        assert not out.clipped[mask > 0].any(), "on-policy tokens were clipped"

    def test_the_gradient_follows_the_advantage(self, registry: Any, spec: dict[str, Any]) -> None:
        logp, old, adv, mask = self.batch()
        logp.requires_grad_(True)
        out = self.build(registry, spec)(logp, old, adv, mask)
        (out.per_token * mask).sum().backward()
        grad = logp.grad
        counted = mask > 0
        assert (grad[~counted] == 0).all(), "padding tokens get a gradient"
        assert (grad[counted] * adv[counted] < 0).all(), (
            "descending the loss must raise the log-prob of tokens with positive advantage and lower the others"
        )

    def test_deterministic(self, registry: Any, spec: dict[str, Any]) -> None:
        logp, old, adv, mask = self.batch()
        old = old + 0.3
        a = self.build(registry, spec)(logp, old, adv, mask).per_token
        b = self.build(registry, spec)(logp, old, adv, mask).per_token
        assert torch.equal(a, b)


class KLContract(ComponentContract):
    """A KL estimator: ``factory(config)(logp, ref_logp) -> [B, T]`` per-token estimates of
    KL(pi || pi_ref) from tokens sampled from pi.

    Zero where the policies agree, finite for any gap, non-negative when :attr:`non_negative`, and
    when :attr:`unbiased` its expectation under pi is the exact KL (known answer on a categorical).
    """

    kind = "kl"
    non_negative: ClassVar[bool] = True
    unbiased: ClassVar[bool] = False

    def test_zero_where_the_policies_agree(self, registry: Any, spec: dict[str, Any]) -> None:
        logp = -torch.rand(4, 7, generator=torch.Generator().manual_seed(0)) * 4
        kl = self.build(registry, spec)(logp, logp.clone())
        assert kl.shape == logp.shape, f"estimate is {tuple(kl.shape)}, inputs {tuple(logp.shape)}"
        assert kl.abs().max() <= 1e-6, f"KL of a policy with itself: up to {kl.abs().max():.3g}"

    def test_finite_and_signed_for_any_gap(self, registry: Any, spec: dict[str, Any]) -> None:
        logp = torch.tensor([[-0.1, -50.0, -3.0, -0.5]])
        ref = torch.tensor([[-60.0, -0.1, -3.5, -0.5]])
        kl = self.build(registry, spec)(logp, ref)
        assert torch.isfinite(kl).all(), f"non-finite estimate for log-ratios of +-50: {kl.tolist()}"
        if self.non_negative:
            assert (kl >= 0).all(), f"negative estimate: {kl.tolist()}"

    def test_expectation_is_the_kl(self, registry: Any, spec: dict[str, Any]) -> None:
        if not self.unbiased:
            return
        p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
        q = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
        estimate = self.build(registry, spec)(p.log()[None], q.log()[None])[0]
        exact = (p * (p / q).log()).sum()
        # float64 sums of four terms: exact to ~1e-16
        assert abs(float((p * estimate).sum() - exact)) < 1e-12, f"E_pi[k] = {float((p * estimate).sum())}, KL = {float(exact)}"

    def test_deterministic(self, registry: Any, spec: dict[str, Any]) -> None:
        logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -0.5]])
        assert torch.equal(self.build(registry, spec)(logp, ref), self.build(registry, spec)(logp, ref))


class LossAggregationContract(ComponentContract):
    """A loss aggregation: ``factory(config)`` with ``terms(per_token, mask) -> (numerator,
    denominator)`` and ``denominator(mask)`` (:class:`~codemoe.rl.loss_agg.LossAggregator`).

    What the trainer relies on to split a step's rows into forwards (``micro_batch_size``) and
    ranks: the numerator is a sum of per-row terms, so any split's numerators add up to the whole
    batch's; the denominator is a function of the mask alone, the one ``terms`` returns; padding
    (mask 0) changes nothing.
    """

    kind = "loss_agg"

    @staticmethod
    def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 losses ``[7, 9]`` and a mask with padding and one empty row."""
        g = torch.Generator().manual_seed(seed)
        mask = _mask(7, 9, seed).double()
        mask[3] = 0
        return torch.randn(7, 9, generator=g, dtype=torch.float64), mask

    def test_the_denominator_depends_on_the_mask_alone(self, registry: Any, spec: dict[str, Any]) -> None:
        agg = self.build(registry, spec)
        per_token, mask = self.batch()
        denominator = agg.denominator(mask)
        assert torch.equal(agg.terms(per_token, mask)[1], denominator), "terms() returns another denominator"
        assert torch.equal(agg.terms(per_token * -3.0 + 1.0, mask)[1], denominator), "the denominator moved with the losses"
        assert float(denominator) > 0, f"denominator {float(denominator)} of a batch with valid tokens"

    def test_a_split_of_the_rows_adds_up_to_the_whole(self, registry: Any, spec: dict[str, Any]) -> None:
        agg = self.build(registry, spec)
        per_token, mask = self.batch(1)
        whole = agg.terms(per_token, mask)[0]
        for split in ([[0, 1, 2], [3, 4, 5, 6]], [[6, 0], [4], [1, 5, 2, 3]]):
            parts = sum(agg.terms(per_token[rows], mask[rows])[0] for rows in split)
            # float64 sums of 63 terms in another order: equal to ~1e-15
            assert torch.allclose(parts, whole, rtol=1e-12, atol=1e-12), f"rows {split}: {float(parts)} != {float(whole)}"

    def test_padding_changes_nothing(self, registry: Any, spec: dict[str, Any]) -> None:
        agg = self.build(registry, spec)
        per_token, mask = self.batch(2)
        noisy = torch.where(mask.bool(), per_token, torch.full_like(per_token, 1e6))
        assert torch.equal(agg.terms(noisy, mask)[0], agg.terms(per_token, mask)[0]), "losses on padding count"

    def test_deterministic(self, registry: Any, spec: dict[str, Any]) -> None:
        per_token, mask = self.batch()
        assert torch.equal(self.build(registry, spec).terms(per_token, mask)[0], self.build(registry, spec).terms(per_token, mask)[0])
