"""Known answers for the batch-independent sampler."""

from __future__ import annotations

import math

import torch
from codemoe.serving.sampling import sample_key, sample_next, uniform


def draw(logits, n, temperature=1.0, top_p=1.0, top_k=0, step=0):
    """``n`` draws from the same logits with ``n`` different sample keys."""
    rows = logits.expand(n, -1)
    keys = torch.tensor([sample_key(123, 0, j) for j in range(n)])
    return sample_next(
        rows,
        torch.full((n,), temperature),
        torch.full((n,), top_p),
        torch.full((n,), top_k),
        keys,
        torch.full((n,), step),
    )


def test_uniform_is_deterministic_in_range_and_spread():
    keys = torch.tensor([sample_key(1, 0, j) for j in range(4000)])
    u = uniform(keys, torch.zeros(4000, dtype=torch.long))
    assert torch.equal(u, uniform(keys, torch.zeros(4000, dtype=torch.long)))
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.02 and abs(u.var().item() - 1 / 12) < 0.01
    assert not torch.equal(u, uniform(keys, torch.ones(4000, dtype=torch.long)))  # next step, new numbers


def test_frequencies_follow_the_tempered_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    tokens, logprobs = draw(logits, 20000, temperature=0.5)
    want = torch.softmax(logits[0] / 0.5, dim=-1)
    freq = torch.bincount(tokens, minlength=4).double() / 20000
    assert torch.allclose(freq, want.double(), atol=0.01)
    assert torch.allclose(logprobs, torch.log(want)[tokens], atol=1e-6)


def test_top_p_and_top_k_never_leave_their_support():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    tokens, logprobs = draw(logits, 5000, top_p=0.7)  # nucleus {0, 1}: 0.5 < 0.7 <= 0.8
    assert set(tokens.tolist()) == {0, 1}
    freq = (tokens == 0).double().mean().item()
    assert abs(freq - 0.5 / 0.8) < 0.02  # renormalised inside the nucleus
    assert math.isclose(logprobs[tokens == 1][0].item(), math.log(0.3), abs_tol=1e-6)  # not renormalised
    tokens, _ = draw(logits, 5000, top_k=3)
    assert set(tokens.tolist()) == {0, 1, 2}


def test_temperature_zero_is_argmax_with_untempered_logprob():
    logits = torch.tensor([[0.1, 3.0, 2.9]])
    tokens, logprobs = draw(logits, 3, temperature=0.0)
    assert tokens.tolist() == [1, 1, 1]
    assert torch.allclose(logprobs, torch.log_softmax(logits[0], -1)[1].expand(3))


def test_a_row_draws_the_same_token_whatever_else_is_in_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    keys = torch.tensor([sample_key(9, i, 0) for i in range(6)])
    ones, zeros = torch.ones(6), torch.zeros(6, dtype=torch.long)
    full, _ = sample_next(logits, ones, ones, zeros, keys, zeros + 3)
    alone = [
        sample_next(logits[i : i + 1], ones[:1], ones[:1], zeros[:1], keys[i : i + 1], zeros[:1] + 3)[0]
        for i in range(6)
    ]
    assert full.tolist() == [t.item() for t in alone]


def test_the_engine_sampler_matches_sample_next_and_reads_back_only_the_tokens(monkeypatch):
    """``draw`` decides greedy rows and the top-k/top-p support from the parameters on the host:
    no tensor is read back to decide a branch (a wait for the device on an accelerator)."""
    from codemoe.core.contracts import SamplingParams
    from codemoe.serving.sampling import draw

    logits = torch.randn(4, 50)
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.0, top_k=5),
        SamplingParams(temperature=0.7, top_p=0.9),
        SamplingParams(temperature=1.3),
    ]
    keys, steps = [sample_key(7, 0, j) for j in range(4)], [0, 3, 1, 9]
    want_tokens, want_logprobs = sample_next(
        logits,
        torch.tensor([p.temperature for p in params]),
        torch.tensor([p.top_p for p in params]),
        torch.tensor([p.top_k for p in params]),
        torch.tensor(keys),
        torch.tensor(steps),
    )

    def refused(self):
        raise AssertionError("a tensor was read back to decide a branch")

    monkeypatch.setattr(torch.Tensor, "__bool__", refused)
    tokens, logprobs = draw(logits, params, keys, steps)
    assert tokens == want_tokens.tolist() and logprobs == want_logprobs.tolist()
