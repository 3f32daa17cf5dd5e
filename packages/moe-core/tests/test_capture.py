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
    assert not any(block.mlp.capturing for block in model.model.layers)


def test_nothing_is_recorded_outside_the_context(moe_registry, tiny_spec):
    from codemoe.core.models import build_model

    model = build_model(tiny_spec, registry=moe_registry)
    with capture_routing(model) as record:
        pass
    model(torch.randint(0, 64, (1, 4)))
    assert record.forwards == []


def test_replay_uses_the_recorded_experts_after_the_router_changed(moe_registry, tiny_spec):
    from codemoe.core.models import build_model
    from codemoe.core.moe import replay_routing

    torch.manual_seed(0)
    model = build_model({**tiny_spec, "num_experts": 8}, registry=moe_registry).eval()
    prompt = torch.randint(3, 64, (2, 5))
    with capture_routing(model) as sampled:
        out = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=2)
    routes = {layer: sampled.sequences(layer, batch=2) for layer in (0, 1)}
    assert routes[0].shape == (2, 8, 2)  # prompt 5 + 4 new - 1 (the last token is never fed back)
    with torch.no_grad():  # a training update moves the routers
        for layer in model.model.layers:
            layer.mlp.gate.weight.add_(torch.randn_like(layer.mlp.gate.weight))
    with capture_routing(model) as free:
        model(out[:, :-1])
    assert not torch.equal(free.forwards[0][0], routes[0].reshape(-1, 2))
    with replay_routing(model, routes), capture_routing(model) as replayed:
        logits = model(out[:, :-1]).logits
    for layer in (0, 1):
        assert torch.equal(replayed.forwards[0][layer], routes[layer].reshape(-1, 2))
    logits.sum().backward()
    assert model.model.layers[1].mlp.gate.weight.grad.abs().sum() > 0  # the router still learns
    assert not any(layer.mlp.replaying for layer in model.model.layers)


def test_replay_with_the_wrong_token_count_names_the_layer(moe_registry, tiny_spec):
    import pytest
    from codemoe.core.models import build_model
    from codemoe.core.moe import replay_routing

    model = build_model(tiny_spec, registry=moe_registry)
    with (
        replay_routing(model, {1: torch.zeros(3, 2, dtype=torch.long)}),
        pytest.raises(ValueError, match="layer 1 has 3"),
    ):
        model(torch.randint(0, 64, (1, 4)))


def test_choices_under_replay_are_what_the_router_would_pick_and_draw_no_random_numbers(moe_registry, tiny_spec):
    from codemoe.core.models import build_model
    from codemoe.core.moe import capture_choices, replay_routing

    torch.manual_seed(0)
    model = build_model({**tiny_spec, "num_experts": 8}, registry=moe_registry).eval()
    ids = torch.randint(0, 64, (1, 6))
    with torch.no_grad(), capture_routing(model) as free:
        model(ids)
    given = {layer: torch.roll(rows, 1, dims=-1).add(1).remainder(8) for layer, rows in free.forwards[0].items()}
    state = torch.random.get_rng_state()
    with torch.no_grad(), replay_routing(model, given), capture_routing(model) as used, capture_choices(model) as own:
        model(ids)
    assert torch.equal(torch.random.get_rng_state(), state)
    for layer in given:
        assert torch.equal(used.forwards[0][layer], given[layer])  # the forward computed with the given experts
        assert torch.equal(own[layer][0], free.forwards[0][layer])  # the router's own pick, beside them
