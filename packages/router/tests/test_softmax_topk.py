import pytest
import torch


def test_both_orders_choose_the_same_experts_and_renormalised_weights_agree(router_factory):
    x = torch.randn(20, 16)
    a = router_factory({"name": "softmax_topk", "top_k": 3, "order": "softmax_topk", "normalize": True})(x)
    b = router_factory({"name": "softmax_topk", "top_k": 3, "order": "topk_softmax"})(x)
    assert torch.equal(a.indices, b.indices)
    torch.testing.assert_close(a.weights, b.weights)
    torch.testing.assert_close(a.weights.sum(-1), torch.ones(20))


def test_without_renormalisation_weights_are_the_softmax_probabilities(router_factory):
    router = router_factory({"name": "softmax_topk", "top_k": 2, "normalize": False})
    x = torch.randn(5, 16)
    out = router(x)
    probs = torch.softmax(x @ router.weight.t(), dim=-1)
    torch.testing.assert_close(out.weights, probs.gather(-1, out.indices))
    assert (out.weights.sum(-1) < 1).all()
    assert router.hf_config() == {"num_experts_per_tok": 2, "norm_topk_prob": False}


def test_logits_are_fp32_for_a_bf16_model(router_factory):
    router = router_factory({"name": "softmax_topk", "top_k": 2}).to(torch.bfloat16)
    out = router(torch.randn(4, 16, dtype=torch.bfloat16))
    assert out.logits.dtype == torch.float32 and out.probs.dtype == torch.float32


def test_bad_order_and_top_k_are_rejected(registry):
    with pytest.raises(ValueError, match="order 'softmax' is not one of softmax_topk, topk_softmax"):
        registry.build("router", {"name": "softmax_topk", "order": "softmax"}, hidden_size=4, num_experts=4)
    with pytest.raises(ValueError, match="top_k=5 must be between 1 and num_experts=4"):
        registry.build("router", {"name": "softmax_topk", "top_k": 5}, hidden_size=4, num_experts=4)
