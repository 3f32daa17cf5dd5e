"""Known-answer tests of the loss aggregation modes, including split-invariance."""

from __future__ import annotations

import pytest
import torch
from codemoe.rl.loss_agg import LossAggregator, aggregate

PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_token_mean(registry):
    assert aggregate(registry.build("loss_agg", "token_mean"), PER_TOKEN, MASK).item() == 10 / 4


def test_seq_mean_token_mean(registry):
    assert aggregate(registry.build("loss_agg", "seq_mean_token_mean"), PER_TOKEN, MASK).item() == (2 + 4) / 2


def test_seq_mean_token_sum_norm(registry):
    agg = registry.build("loss_agg", "seq_mean_token_sum_norm")
    assert abs(aggregate(agg, PER_TOKEN, MASK).item() - 10 / 6) < 1e-6  # horizon defaults to T = 3
    fixed = registry.build("loss_agg", {"name": "seq_mean_token_sum_norm", "horizon": 5})
    assert aggregate(fixed, PER_TOKEN, MASK).item() == 1.0


def test_summed_terms_of_chunks_equal_the_whole(registry):
    for name in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"):
        agg = registry.build("loss_agg", name)
        parts = [agg.terms(PER_TOKEN[i : i + 1], MASK[i : i + 1]) for i in range(2)]
        whole = sum(n for n, _ in parts) / sum(d for _, d in parts)
        assert torch.allclose(whole, aggregate(agg, PER_TOKEN, MASK))


def test_the_denominator_is_the_one_terms_gives_and_depends_on_the_mask_alone(registry):
    for name, expected in (("token_mean", 4.0), ("seq_mean_token_mean", 2.0), ("seq_mean_token_sum_norm", 6.0)):
        agg = registry.build("loss_agg", name)
        assert isinstance(agg, LossAggregator)
        assert agg.denominator(MASK).item() == expected == agg.terms(PER_TOKEN, MASK)[1].item()
        assert agg.terms(torch.randn(2, 3), MASK)[1].item() == expected  # other losses, the same denominator


def test_an_aggregation_without_a_denominator_is_refused_naming_it(registry):
    from codemoe.core.errors import ConfigError
    from codemoe.core.registry import Registry
    from codemoe.rl.algorithm import AlgorithmConfig, build_algorithm

    class Legacy:
        """terms only: its denominator might depend on the losses, which micro-batches cannot sum."""

        def __init__(self, config=None) -> None:
            pass

        def terms(self, per_token, mask):
            return (per_token * mask).sum(), per_token.abs().sum()

    mine = Registry()
    for component in registry.components():
        mine.register(component.kind, component.name, component.factory, component.config)
    mine.register("loss_agg", "legacy", Legacy)
    with pytest.raises(ConfigError, match=r"'algo.loss_agg': .*legacy.*no denominator method"):
        build_algorithm(AlgorithmConfig(loss_agg={"name": "legacy"}), mine)
