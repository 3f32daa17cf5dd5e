"""Every router survives save_pretrained / load_pretrained with identical logits."""

import pytest
import torch
from codemoe.core.models.presets import load_preset
from codemoe.router.plugin import COMPONENTS

SPECS = {
    "softmax_topk": {"top_k": 2, "order": "topk_softmax"},
    "sigmoid_bias": {"top_k": 2, "num_groups": 2, "topk_groups": 1},
    "group_limited": {"top_k": 2, "num_groups": 2, "topk_groups": 1},
    "noisy_topk": {"top_k": 2},
    "expert_choice": {"top_k": 2},
    "hash": {"top_k": 2},
}


def test_every_registered_router_has_a_case():
    assert set(SPECS) == {name for kind, name, *_ in COMPONENTS if kind == "router"}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_round_trip_gives_identical_logits(registry, tmp_path, name):
    from codemoe.core.models import build_model, load_pretrained, save_pretrained

    spec = {
        **load_preset("micro"),
        "router": {"name": name, **SPECS[name]},
    }
    torch.manual_seed(0)
    model = build_model(spec, registry=registry).eval()
    save_pretrained(model, None, tmp_path)
    loaded, _ = load_pretrained(tmp_path, registry=registry)
    loaded.eval()
    assert type(loaded.model.layers[0].mlp.gate) is type(model.model.layers[0].mlp.gate)
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
