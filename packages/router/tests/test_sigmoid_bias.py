import pytest
import torch
from codemoe.core.models.presets import load_preset


def test_bias_follows_the_sign_rule_from_the_step_loads(router_factory):
    router = router_factory({"name": "sigmoid_bias", "top_k": 1, "bias_rate": 0.1}, num_experts=4)
    router.train()
    with torch.no_grad():
        router.weight.zero_()
        router.weight[2, 0] = 5.0  # feature 0 selects expert 2
        router.weight[0, 1] = 5.0  # feature 1 selects expert 0
    x = torch.zeros(8, 16)
    x[:6, 0] = 1.0  # 6 tokens to expert 2
    x[6:, 1] = 1.0  # 2 tokens to expert 0
    out = router(x)
    router.observe(torch.bincount(out.indices.view(-1), minlength=4).float())  # what the MoE block reports
    assert router.step_load.tolist() == [2, 0, 6, 0]
    stats = router.end_step()
    # mean load 2: expert 2 overloaded (-γ), 1 and 3 idle (+γ), expert 0 exactly at the mean (0).
    torch.testing.assert_close(router.e_score_correction_bias, torch.tensor([0.0, 0.1, -0.1, 0.1]))
    assert stats == {
        "bias_abs_mean": 0.07500000298023224,
        "bias_min": -0.10000000149011612,
        "bias_max": 0.10000000149011612,
    }
    assert router.step_load.sum() == 0


def test_bias_changes_the_choice_but_not_the_weights(router_factory):
    router = router_factory({"name": "sigmoid_bias", "top_k": 2, "normalize": False}, num_experts=4)
    x = torch.randn(6, 16)
    before = router(x)
    with torch.no_grad():
        router.e_score_correction_bias[before.indices[:, 0]] -= 100.0  # push every first choice out
    after = router(x)
    assert not torch.equal(after.indices, before.indices)
    scores = torch.sigmoid(x @ router.weight.t())
    torch.testing.assert_close(after.weights, scores.gather(-1, after.indices))  # unbiased affinities


def test_loads_come_from_training_forwards_of_real_tokens_only(registry):
    from codemoe.core.models import build_model
    from codemoe.core.moe import moe_metrics

    spec = {
        **load_preset("micro"),
        "num_layers": 1,
        "router": {"name": "sigmoid_bias", "top_k": 2, "bias_rate": 0.5},
    }
    model = build_model(spec, registry=registry)
    gate = model.model.layers[0].mlp.gate
    model.eval()
    model(torch.randint(0, 64, (2, 5)))
    model.train()
    with torch.no_grad():
        model(torch.randint(0, 64, (2, 5)))
    assert gate.step_load.sum() == 0  # neither evaluation nor no-grad forwards count
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    model(torch.randint(0, 64, (2, 5)), attention_mask=mask)
    assert gate.step_load.sum() == 8 * 2  # 8 real tokens, 2 experts each
    metrics = moe_metrics(model)
    assert gate.step_load.sum() == 0 and gate.e_score_correction_bias.abs().sum() > 0
    assert metrics["moe/layer0/bias_abs_mean"] == float(gate.e_score_correction_bias.abs().mean())


def test_group_limited_choice_and_route_scale(router_factory):
    spec = {"name": "sigmoid_bias", "top_k": 2, "num_groups": 4, "topk_groups": 1, "route_scale": 2.5}
    out = router_factory(spec, num_experts=8)(torch.randn(30, 16))
    assert ((out.indices // 2)[:, 0] == (out.indices // 2)[:, 1]).all()  # both from one group of 2
    torch.testing.assert_close(out.weights.sum(-1), torch.full((30,), 2.5))


def test_bias_is_saved_and_restored_with_the_checkpoint(registry, tmp_path):
    from codemoe.core.models import build_model, load_pretrained, save_pretrained

    spec = {
        **load_preset("micro"),
        "router": {"name": "sigmoid_bias", "top_k": 2},
    }
    model = build_model(spec, registry=registry)
    with torch.no_grad():
        model.model.layers[1].mlp.gate.e_score_correction_bias.copy_(torch.tensor([0.3, -0.2, 0.1, 0.0]))
    save_pretrained(model, None, tmp_path)
    loaded, tokenizer = load_pretrained(tmp_path, registry=registry)
    assert tokenizer is None
    torch.testing.assert_close(
        loaded.model.layers[1].mlp.gate.e_score_correction_bias, torch.tensor([0.3, -0.2, 0.1, 0.0])
    )


def test_bias_stays_fp32_in_a_bf16_model(router_factory):
    router = router_factory({"name": "sigmoid_bias", "top_k": 2, "bias_rate": 0.001}).to(torch.bfloat16)
    assert router.weight.dtype == torch.bfloat16 and router.e_score_correction_bias.dtype == torch.float32
    with torch.no_grad():
        router.e_score_correction_bias.fill_(0.5)
    router.observe(torch.tensor([9.0, 0, 0, 0, 0, 0, 0, 0]))
    router.end_step()
    assert router.e_score_correction_bias[0].item() == pytest.approx(0.499, abs=1e-6)
