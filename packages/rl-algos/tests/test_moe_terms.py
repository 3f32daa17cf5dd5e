"""The MoE numbers the RL trainer logs every step."""

import pytest
import torch
from codemoe.core.models import build_model
from codemoe.rl.moe_terms import expert_load


def test_expert_load_logs_each_experts_share_per_layer_and_the_aggregates():
    torch.manual_seed(0)
    model = build_model("tiny", vocab_size=64)
    model(torch.randint(0, 64, (2, 12)))
    metrics = expert_load(model)
    layers = model.config.num_hidden_layers
    experts = model.config.num_experts
    shares = [[metrics[f"expert_load/{layer}/{e}"] for e in range(experts)] for layer in range(layers)]
    assert all(abs(sum(row) - 1.0) < 1e-6 for row in shares)  # shares of each layer's routed tokens
    assert metrics["moe/max_over_mean"] == pytest.approx(max(max(row) * experts for row in shares))
    assert expert_load(model)["moe/tokens"] == 0  # reading closed the step: nothing routed since
