"""Activation checkpointing per block: the same losses and gradients as without it, routing
statistics and captures counted once per token, and replayed experts replayed again in the
recomputation."""

from __future__ import annotations

import copy

import torch
from codemoe.core.models import build_model
from codemoe.core.moe import capture_routing, checkpoint_layers, moe_blocks, read_layer_stats, replay_routing


def _pair(moe_registry, tiny_spec):
    torch.manual_seed(0)
    plain = build_model(tiny_spec, registry=moe_registry).double()  # float64: only the recomputation differs
    checkpointed = copy.deepcopy(plain)
    checkpoint_layers(checkpointed.model.layers)
    return plain, checkpointed


def _step(model, ids, routes=None):
    """One forward and backward; the routing captured over both, the gradients and the routing
    statistics (raw token counts) of the step."""
    model.zero_grad(set_to_none=True)
    with capture_routing(model) as record:
        if routes is None:
            logits = model(ids).logits
        else:
            with replay_routing(model, routes):
                logits = model(ids).logits
        (logits.square().mean()).backward()  # outside the replay, as a trainer's backward is
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    counts = [(s.tokens, s.tokens_per_expert) for s in read_layer_stats(model)]
    return record, grads, counts, logits.detach()


def test_a_checkpointed_model_trains_like_the_plain_one_and_counts_routing_once(moe_registry, tiny_spec):
    plain, checkpointed = _pair(moe_registry, tiny_spec)
    ids = torch.randint(0, tiny_spec["vocab_size"], (2, 7))
    rec_a, grads_a, counts_a, logits_a = _step(plain, ids)
    rec_b, grads_b, counts_b, logits_b = _step(checkpointed, ids)
    assert torch.equal(logits_a, logits_b)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-10, atol=1e-12, msg=name)
    assert counts_a[0][0] == 2 * 7 and counts_b == counts_a  # the recomputation counted no token again
    for layer in range(len(list(moe_blocks(plain)))):
        assert rec_b.layer(layer).shape == rec_a.layer(layer).shape  # one capture per forward, not two


def test_replayed_experts_are_replayed_again_in_the_recomputation(moe_registry, tiny_spec):
    plain, checkpointed = _pair(moe_registry, tiny_spec)
    ids = torch.randint(0, tiny_spec["vocab_size"], (2, 7))
    with torch.no_grad(), capture_routing(plain) as record:
        plain(ids)
    routes = {i: record.layer(i) for i in range(len(list(moe_blocks(plain))))}
    for model in (plain, checkpointed):  # both routers drift away from the recorded choices
        with torch.no_grad():
            for block in moe_blocks(model):
                block.gate.weight.add_(torch.randn(block.gate.weight.shape, generator=torch.Generator().manual_seed(1)))
    _, grads_a, _, _ = _step(plain, ids, routes)
    _, grads_b, _, _ = _step(checkpointed, ids, routes)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-10, atol=1e-12, msg=name)


def test_a_copy_of_a_checkpointed_model_runs_its_own_weights(moe_registry, tiny_spec):
    _, checkpointed = _pair(moe_registry, tiny_spec)
    twin = copy.deepcopy(checkpointed)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    ids = torch.randint(0, tiny_spec["vocab_size"], (1, 5))
    out, twin_out = checkpointed(ids).logits, twin(ids).logits
    assert not torch.allclose(out, twin_out)
    assert twin.model.layers[0].forward.__self__ is twin.model.layers[0]
