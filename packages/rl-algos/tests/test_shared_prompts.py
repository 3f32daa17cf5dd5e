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
