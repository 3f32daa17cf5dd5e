import pytest
import torch


def test_experts_come_only_from_the_best_groups(router_factory):
    router = router_factory({"name": "group_limited", "top_k": 3, "num_groups": 4, "topk_groups": 2}, num_experts=8)
    x = torch.randn(50, 16)
    out = router(x)
    probs = torch.softmax(x @ router.weight.t(), dim=-1)
    best_groups = probs.view(50, 4, 2).max(-1).values.topk(2, dim=-1).indices  # [T, 2]
    for t in range(50):
        assert set((out.indices[t] // 2).tolist()) <= set(best_groups[t].tolist())
    torch.testing.assert_close(out.weights, probs.gather(-1, out.indices))


def test_top2_sum_group_score_and_validation(registry, router_factory):
    out = router_factory(
        {"name": "group_limited", "top_k": 2, "num_groups": 2, "topk_groups": 1, "group_score": "top2_sum"}
    )(torch.randn(10, 16))
    assert ((out.indices // 4)[:, 0] == (out.indices // 4)[:, 1]).all()
    with pytest.raises(ValueError, match="exceeds the experts"):
        registry.build("router", {"name": "group_limited", "top_k": 3, "num_groups": 4}, hidden_size=4, num_experts=4)
