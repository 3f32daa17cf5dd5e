import torch
from codemoe.core.models.presets import load_preset
from codemoe.core.moe import UNROUTED
from codemoe.core.moe.balance import assignment_counts


def test_every_expert_takes_exactly_its_capacity_of_top_scoring_tokens(router_factory):
    router = router_factory({"name": "expert_choice", "top_k": 2, "capacity_factor": 1.0}, num_experts=8)
    x = torch.randn(40, 16)
    out = router(x)
    capacity = 10  # ceil(1.0 * 40 * 2 / 8)
    assert assignment_counts(out.indices, 8).sum(0).tolist() == [float(capacity)] * 8
    probs = torch.softmax(x @ router.weight.t(), dim=-1)
    for e in range(8):
        tokens = (out.indices == e).any(-1).nonzero().flatten()
        assert set(tokens.tolist()) == set(probs[:, e].topk(capacity).indices.tolist())
    empty = out.indices == UNROUTED
    assert (out.weights[empty] == 0).all()
    torch.testing.assert_close(out.weights[~empty], probs.gather(-1, out.indices.clamp(min=0))[~empty])


def test_capacity_is_respected_inside_a_model(registry):
    from codemoe.core.models import build_model
    from codemoe.core.moe import read_layer_stats

    spec = {
        **load_preset("micro"),
        "num_layers": 1,
        "router": {"name": "expert_choice", "top_k": 1, "capacity_factor": 1.5},
    }
    model = build_model(spec, registry=registry)
    model(torch.randint(0, 64, (2, 10)))
    stats = read_layer_stats(model)[0]
    assert stats.tokens_per_expert == [8.0] * 4  # ceil(1.5 * 20 * 1 / 4)
