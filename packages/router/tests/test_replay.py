"""Routing replay: given the experts a router chose, it reproduces the weights it gave them."""

import pytest
import torch
from codemoe.router.plugin import COMPONENTS

SPECS = {
    "softmax_topk": [{"top_k": 2}, {"top_k": 2, "normalize": False}, {"top_k": 3, "order": "topk_softmax"}],
    "sigmoid_bias": [{"top_k": 2, "route_scale": 2.5}, {"top_k": 2, "normalize": False, "num_groups": 2}],
    "group_limited": [{"top_k": 2, "num_groups": 2}, {"top_k": 2, "num_groups": 4, "normalize": True}],
    "noisy_topk": [{"top_k": 2}],
    "expert_choice": [{"top_k": 2, "capacity_factor": 1.5}],
    "hash": [{"top_k": 2}],
}
CASES = [(name, spec) for name, specs in SPECS.items() for spec in specs]


def test_every_registered_router_has_a_case():
    assert set(SPECS) == {name for kind, name, *_ in COMPONENTS if kind == "router"}


@pytest.mark.parametrize(("name", "spec"), CASES)
def test_replaying_the_routers_own_choice_gives_its_weights(router_factory, name, spec):
    router = router_factory({"name": name, **spec}).eval()
    x, ids = torch.randn(24, 16), torch.randint(0, 100, (24,))
    if name == "sigmoid_bias":  # a trained bias changes the choice, never the weights
        with torch.no_grad():
            router.e_score_correction_bias.normal_()
    chosen = router(x, ids)
    replayed = router.replay(x, chosen.indices)
    assert torch.equal(replayed.indices, chosen.indices)
    torch.testing.assert_close(replayed.weights, chosen.weights)
    torch.testing.assert_close(replayed.probs, chosen.probs)
