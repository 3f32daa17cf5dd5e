"""Known-answer tests of the loss aggregation modes, including split-invariance."""

from __future__ import annotations

import torch
from codemoe.rl.loss_agg import aggregate

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
