"""The local dispatcher: assignments grouped by expert, read back to the host once per forward."""

import pytest
import torch
from codemoe.core.moe import MoEBlock, MoEOptions
from codemoe.core.moe.dispatch import LocalDispatcher
from codemoe.core.moe.experts import GroupedExperts
from host_reads import count_host_reads

H, INTER, E, K = 16, 8, 4, 2


def test_assignments_are_grouped_by_expert_and_unrouted_slots_dropped():
    x = torch.randn(3, H)
    indices = torch.tensor([[2, 0], [0, -1], [3, 2]])
    weights = torch.tensor([[0.6, 0.4], [1.0, 0.0], [0.7, 0.3]])
    d = LocalDispatcher().dispatch(x, indices, weights, E)
    assert d.counts == [2, 0, 2, 1]
    assert d.rows.tolist() == [0, 1, 0, 2, 2]  # expert 0: tokens 0, 1; expert 2: tokens 0, 2; expert 3: token 2
    assert d.weights.tolist() == pytest.approx([0.4, 1.0, 0.6, 0.3, 0.7])
    assert d.tokens is x  # read in place, not copied


@pytest.mark.parametrize("options", [{}, {"capacity_factor": 0.5}, {"shared_expert_intermediate_size": 8}])
@pytest.mark.parametrize("grad", [True, False])
def test_a_block_forward_reads_the_host_once_for_the_expert_sizes(moe_registry, options, grad):
    """The grouped experts slice their rows by host sizes: one read a forward, and no other."""
    router = moe_registry.build("router", {"name": "softmax_topk", "top_k": K}, hidden_size=H, num_experts=E)
    block = MoEBlock(router, GroupedExperts(E, H, INTER), MoEOptions(**options))
    for p in block.parameters():
        torch.nn.init.normal_(p, 0.0, 0.2)
    block.set_token_context(None, torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]))  # padding routes nowhere
    x = torch.randn(2, 4, H)
    with torch.set_grad_enabled(grad), count_host_reads() as reads:
        block(x)
    assert reads == ["tolist"]
