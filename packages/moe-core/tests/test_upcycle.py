import pytest
import torch
from codemoe.core.models import UpcycleConfig, upcycle
from codemoe.core.moe import MoEBlock
from transformers import Qwen3Config, Qwen3ForCausalLM


@pytest.fixture
def dense():
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config).eval()


@pytest.mark.parametrize("router", [{"name": "softmax_topk", "top_k": 2}, {"name": "sigmoid_bias", "top_k": 3}])
def test_copied_experts_reproduce_the_dense_model(dense, moe_registry, router):
    moe = upcycle(dense, UpcycleConfig(num_experts=4, router=router, router_init_std=0.5), registry=moe_registry).eval()
    assert all(isinstance(layer.mlp, MoEBlock) for layer in moe.model.layers)
    assert moe.model.layers[0].mlp.experts.gate_up_proj.shape == (4, 96, 32)
    ids = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(moe(ids).logits, dense(ids).logits, rtol=1e-5, atol=1e-5)


def test_noise_makes_experts_differ_and_fine_grained_slices_keep_shapes(dense, moe_registry):
    noisy = upcycle(dense, UpcycleConfig(num_experts=4, noise_std=0.01), registry=moe_registry)
    w = noisy.model.layers[0].mlp.experts.gate_up_proj
    assert not torch.equal(w[0], w[1])
    torch.testing.assert_close(w[0], w[1], rtol=0.1, atol=0.01)
    sliced = upcycle(dense, UpcycleConfig(num_experts=4, granularity=2), registry=moe_registry)
    experts = sliced.model.layers[0].mlp.experts
    assert experts.gate_up_proj.shape == (4, 48, 32) and experts.down_proj.shape == (4, 32, 24)
    mlp = dense.model.layers[0].mlp
    torch.testing.assert_close(experts.down_proj[1], 2 * mlp.down_proj.weight[:, 24:])
