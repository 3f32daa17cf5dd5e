"""The shared-prompt training forward gives the per-row forward's log-probs and policy gradients."""

from __future__ import annotations

import pytest
import torch
from codemoe.core.moe import capture_routing
from codemoe.rl.logprobs import token_stats
from rl_toy import tiny_policy

# three prompts of different lengths, three samples each, completions padded with 0
PROMPTS = [[5, 9, 11, 4], [7, 3], [8, 8, 2, 6, 12, 10]]


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    prompts = [p for p in PROMPTS for _ in range(3)]
    completions = torch.randint(3, 16, (len(prompts), 6), generator=gen)
    completions[1, 4:] = 0
    completions[5, 2:] = 0
    return prompts, completions


def _grads(model, prompts, completions, share, **kwargs):
    model.zero_grad(set_to_none=True)
    stats = token_stats(model, prompts, completions, pad_id=0, temperature=0.8, share_prompts=share, **kwargs)
    weights = torch.linspace(-1.0, 1.0, completions.numel()).view_as(completions)
    (stats.logp * weights).sum().backward()  # a policy-gradient-shaped loss with mixed-sign advantages
    return stats, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("seed", [0, 1])
def test_shared_prompt_forward_gives_per_row_logprobs_entropies_and_gradients(seed):
    model = tiny_policy(seed)
    prompts, completions = _batch(seed)
    shared, g_shared = _grads(model, prompts, completions, share=True)
    plain, g_plain = _grads(model, prompts, completions, share=False)
    torch.testing.assert_close(shared.logp, plain.logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(shared.entropy, plain.entropy, atol=1e-5, rtol=0)
    assert g_shared.keys() == g_plain.keys()
    for name in g_plain:
        torch.testing.assert_close(g_shared[name], g_plain[name], atol=2e-5, rtol=1e-4, msg=name)


def test_shared_prompt_forward_runs_each_prompt_once():
    model = tiny_policy()
    prompts, completions = _batch()
    with torch.no_grad(), capture_routing(model) as record:
        token_stats(model, prompts, completions, pad_id=0, share_prompts=True)
    prefix, suffix = record.forwards  # one forward of the distinct prompts, one of the rows
    first = min(prefix)
    width = max(len(p) for p in PROMPTS) - 1
    assert prefix[first].shape[0] == len(PROMPTS) * width
    assert suffix[first].shape[0] == len(prompts) * (completions.shape[1] + 1)


def test_shared_prompt_forward_hidden_states_match_for_critics():
    model = tiny_policy()
    prompts, completions = _batch()
    with torch.no_grad():
        shared = token_stats(model, prompts, completions, pad_id=0, hidden=True, share_prompts=True)
        plain = token_stats(model, prompts, completions, pad_id=0, hidden=True)
    torch.testing.assert_close(shared.hidden, plain.hidden, atol=1e-5, rtol=0)


def test_rows_without_a_shared_prompt_take_the_per_row_forward():
    model = tiny_policy()
    prompts, completions = [[5, 9, 11], [7, 3, 2]], torch.tensor([[4, 5], [6, 7]])
    with torch.no_grad(), capture_routing(model) as record:
        token_stats(model, prompts, completions, pad_id=0, share_prompts=True)
    assert len(record.forwards) == 1


@pytest.mark.parametrize("share", [False, True])
def test_a_forward_of_the_used_columns_gives_the_full_forwards_logprobs_there_and_zero_after(share):
    from codemoe.rl.logprobs import used_width

    model = tiny_policy(3)
    prompts, completions = _batch(3)
    mask = torch.zeros(completions.shape)
    mask[:, :2] = 1.0
    mask[4, 3] = 1.0  # the last column any row's loss reads is 3
    assert used_width(mask) == 4 and used_width(torch.zeros(2, 5)) == 1
    full = token_stats(model, prompts, completions, pad_id=0, share_prompts=share)
    cut = token_stats(model, prompts, completions, pad_id=0, share_prompts=share, used=4)
    assert cut.logp.shape == full.logp.shape == cut.entropy.shape
    # the same rows, causal attention: the kept columns see the same tokens; shapes differ, so the
    # kernels may sum in another order (float32 rounding, ~1e-6)
    torch.testing.assert_close(cut.logp[:, :4], full.logp[:, :4], atol=1e-5, rtol=0)
    torch.testing.assert_close(cut.entropy[:, :4], full.entropy[:, :4], atol=1e-5, rtol=0)
    assert cut.logp[:, 4:].eq(0).all() and cut.entropy[:, 4:].eq(0).all()
