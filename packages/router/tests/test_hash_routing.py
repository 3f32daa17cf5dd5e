import pytest
import torch
from codemoe.core.models.presets import load_preset


def test_experts_are_a_fixed_function_of_the_token_id(router_factory):
    router = router_factory({"name": "hash", "top_k": 2}, num_experts=8)
    ids = torch.tensor([5, 9, 5, 123])
    out = router(torch.randn(4, 16), ids)
    assert torch.equal(out.indices[0], out.indices[2])
    first = (ids * 2654435761) % 2**32 % 8
    assert out.indices[:, 0].tolist() == first.tolist()
    assert out.indices[:, 1].tolist() == ((first + 1) % 8).tolist()
    assert (out.weights == 0.5).all()
    with pytest.raises(ValueError, match="needs the token ids"):
        router(torch.randn(4, 16))


def test_hash_routed_model_generates_with_ids_from_the_forward(registry):
    from codemoe.core.models import build_model
    from codemoe.core.moe import capture_routing

    spec = {
        **load_preset("micro"),
        "num_layers": 1,
        "router": {"name": "hash", "top_k": 1},
    }
    model = build_model(spec, registry=registry).eval()
    ids = torch.tensor([[7, 8, 7]])
    with capture_routing(model) as record:
        out = model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=2)
    expected = (out[0, :-1] * 2654435761) % 2**32 % 4
    routed = record.layer(0)[:, 0]
    assert routed.tolist() == expected.tolist()
