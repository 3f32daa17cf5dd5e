import torch
from codemoe.core.moe import capture_routing


def test_records_chosen_experts_per_forward_and_layer(moe_registry, tiny_spec):
    from codemoe.core.models import build_model

    torch.manual_seed(0)
    model = build_model(tiny_spec, registry=moe_registry).eval()
    ids = torch.randint(0, 64, (2, 5))
    with capture_routing(model) as record:
        out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=2)
    assert out.shape == (2, 8)
    # Prefill (2 x 5 tokens), then one forward per generated token (cache: 2 x 1 new tokens each).
    assert [f[0].shape for f in record.forwards] == [(10, 2), (2, 2), (2, 2)]
    assert set(record.forwards[0]) == {0, 1} and record.layer(1).shape == (14, 2)
    # The recorded experts are the ones the router picks for those hidden states: replay a full
    # forward of the same sequence and compare the prompt rows.
    with capture_routing(model) as again:
        model(out[:, :5])
    assert torch.equal(again.forwards[0][1], record.forwards[0][1])
    assert all(block.mlp.capture is None for block in model.model.layers)


def test_nothing_is_recorded_outside_the_context(moe_registry, tiny_spec):
    from codemoe.core.models import build_model

    model = build_model(tiny_spec, registry=moe_registry)
    with capture_routing(model) as record:
        pass
    model(torch.randint(0, 64, (1, 4)))
    assert record.forwards == []
