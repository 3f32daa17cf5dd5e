import pytest
import torch
from codemoe.core.moe import CollapseConfig, CollapseDetector, CollapseWarning, moe_metrics, read_layer_stats

E, H = 8, 32


def _model(moe_registry, tiny_spec):
    from codemoe.core.models import build_model

    torch.manual_seed(0)
    spec = {**tiny_spec, "num_experts": E, "hidden_size": H, "router": {"name": "softmax_topk", "top_k": 1}}
    return build_model(spec, registry=moe_registry)


def _route(model, pick) -> None:
    """Send 128 tokens through every MoE block; token t goes to expert pick(t) by construction."""
    tokens = torch.zeros(1, 128, H)
    for t in range(128):
        tokens[0, t, pick(t)] = 1.0  # one-hot features in the first E dims
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.gate.weight.zero_()
            layer.mlp.gate.weight[:, :E] = 10.0 * torch.eye(E)  # logit of expert e = 10 · x[e]
            layer.mlp(tokens)


def test_detector_trips_on_a_collapsed_router_with_layer_numbers_and_remedy(moe_registry, tiny_spec):
    model = _model(moe_registry, tiny_spec)
    _route(model, lambda t: 5)
    stats = read_layer_stats(model)
    assert stats[0].tokens_per_expert[5] == 128 and stats[0].dead_experts == E - 1
    with pytest.warns(
        CollapseWarning, match=r"layer [01]: busiest expert has 8\.00x.*Remedy: raise the balance loss weight"
    ):
        found = CollapseDetector(CollapseConfig()).warn(stats)
    assert [f.layer for f in found] == [0, 1]
    assert "88% of the experts received no token" in found[0].message()


def test_detector_stays_quiet_on_balanced_routing(moe_registry, tiny_spec, recwarn):
    model = _model(moe_registry, tiny_spec)
    _route(model, lambda t: t % E)
    stats = read_layer_stats(model)
    assert stats[0].tokens_per_expert == [16.0] * E and stats[0].max_over_mean == 1.0 and stats[0].cv == 0.0
    assert CollapseDetector(CollapseConfig()).warn(stats) == []
    assert not [w for w in recwarn if issubclass(w.category, CollapseWarning)]


def test_detector_reads_the_flat_metrics_of_a_step(moe_registry, tiny_spec):
    model = _model(moe_registry, tiny_spec)
    _route(model, lambda t: 5 if t < 100 else t % E)
    metrics = moe_metrics(model)
    found = CollapseDetector().check_metrics(metrics)
    assert [f.layer for f in found] == [0, 1]
    assert "busiest expert has" in found[0].message() and "received no token" not in found[0].message()
    assert CollapseDetector(CollapseConfig(max_over_mean=8.0)).check_metrics(metrics) == []


def test_moe_metrics_reports_per_layer_and_aggregates_then_resets(moe_registry, tiny_spec):
    model = _model(moe_registry, tiny_spec)
    model(torch.randint(0, 64, (2, 8)))
    model(torch.randint(0, 64, (2, 8)))
    metrics = moe_metrics(model)
    for name in ("max_over_mean", "cv", "dead_experts", "entropy", "dropped_fraction", "balance_loss", "z_loss"):
        assert f"moe/{name}" in metrics and f"moe/layer0/{name}" in metrics and f"moe/layer1/{name}" in metrics
    assert metrics["moe/max_over_mean"] == max(metrics["moe/layer0/max_over_mean"], metrics["moe/layer1/max_over_mean"])
    assert 0.0 < metrics["moe/entropy"] <= 1.0
    assert metrics["moe/balance_loss"] >= 1.0 - 1e-6
    assert read_layer_stats(model)[0].tokens == 0  # reset after the read
