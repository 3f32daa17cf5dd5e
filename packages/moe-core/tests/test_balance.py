import pytest
import torch
from codemoe.core.moe import aux_losses, balance_loss, z_loss
from codemoe.core.moe.balance import assignment_counts


def _balanced(tokens: int, experts: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every expert gets the same number of assignments; router probabilities uniform."""
    indices = (torch.arange(tokens).unsqueeze(-1) * k + torch.arange(k)) % experts
    return torch.full((tokens, experts), 1.0 / experts), indices


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("scope", ["micro_batch", "sequence", "global"])
def test_perfect_balance_is_one_for_any_k_and_scope(k, scope):
    probs, indices = _balanced(tokens=16, experts=8, k=k)
    loss = balance_loss(probs, indices, scope=scope, batch_shape=(2, 8))
    assert loss.item() == pytest.approx(1.0)


def test_all_tokens_on_one_expert_is_num_experts():
    experts = 8
    probs = torch.zeros(10, experts)
    probs[:, 3] = 1.0
    indices = torch.full((10, 1), 3)
    assert balance_loss(probs, indices).item() == pytest.approx(experts)


def test_collapse_with_top_k_is_num_experts_over_k():
    experts, k = 8, 2
    probs = torch.zeros(10, experts)
    probs[:, 3] = 1.0
    indices = torch.tensor([[3, 5]] * 10)
    assert balance_loss(probs, indices).item() == pytest.approx(experts / k)


def test_sequence_scope_sees_imbalance_that_the_batch_hides():
    # Sequence 0 sends everything to expert 0, sequence 1 to expert 1: balanced over the batch only.
    probs = torch.tensor([[1.0, 0.0]] * 4 + [[0.0, 1.0]] * 4)
    indices = torch.tensor([[0]] * 4 + [[1]] * 4)
    assert balance_loss(probs, indices, scope="micro_batch", batch_shape=(2, 4)).item() == pytest.approx(1.0)
    assert balance_loss(probs, indices, scope="sequence", batch_shape=(2, 4)).item() == pytest.approx(2.0)


def test_unrouted_slots_do_not_count():
    counts = assignment_counts(torch.tensor([[0, -1], [1, 1]]), num_experts=3)
    assert counts.tolist() == [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]


def test_z_loss_known_answer():
    logits = torch.zeros(3, 4)  # logsumexp = log 4 for every token
    assert z_loss(logits).item() == pytest.approx(torch.log(torch.tensor(4.0)).item() ** 2)
    logits[2] = 100.0  # a padded token with huge logits does not count
    mask = torch.tensor([True, True, False])
    assert z_loss(logits, mask).item() == pytest.approx(torch.log(torch.tensor(4.0)).item() ** 2)


def test_balance_loss_reaches_the_router_gradient(moe_registry, tiny_spec):
    from codemoe.core.models import build_model

    torch.manual_seed(0)
    model = build_model(tiny_spec, registry=moe_registry)
    model(torch.randint(0, 64, (2, 12)))
    losses = aux_losses(model)
    assert set(losses) == {"balance", "z", "weighted"}
    assert losses["balance"].item() >= 1.0 - 1e-6
    losses["balance"].backward()
    routers = [p for n, p in model.named_parameters() if n.endswith("mlp.gate.weight")]
    assert routers and all(p.grad is not None and p.grad.abs().sum() > 0 for p in routers)
    last_experts = model.model.layers[-1].mlp.experts  # earlier layers' experts feed later routers
    assert last_experts.gate_up_proj.grad is None and last_experts.down_proj.grad is None


def test_weighted_uses_the_config_coefficients(moe_registry, tiny_spec):
    from codemoe.core.models import build_model

    model = build_model({**tiny_spec, "balance_coef": 0.5, "z_coef": 0.25}, registry=moe_registry)
    model(torch.randint(0, 64, (1, 9)))
    losses = aux_losses(model)
    torch.testing.assert_close(losses["weighted"], 0.5 * losses["balance"] + 0.25 * losses["z"])


@pytest.mark.parametrize("scope", ["micro_batch", "sequence", "global"])
def test_padding_counts_in_neither_loads_nor_probabilities(scope):
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(2, 5, 4), dim=-1)
    indices = torch.randint(0, 4, (2, 5, 2))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    padded = balance_loss(probs.view(10, 4), indices.view(10, 2), scope=scope, batch_shape=(2, 5), mask=mask.view(-1))
    if scope == "sequence":
        first = balance_loss(probs[0, :3], indices[0, :3], scope=scope, batch_shape=(1, 3))
        second = balance_loss(probs[1], indices[1], scope=scope, batch_shape=(1, 5))
        expected = (first + second) / 2
    else:
        real = mask.view(-1)
        expected = balance_loss(probs.view(10, 4)[real], indices.view(10, 2)[real], scope=scope)
    torch.testing.assert_close(padded, expected)


def test_padded_batch_routes_real_tokens_only_and_keeps_their_outputs(moe_registry, tiny_spec):
    from codemoe.core.models import build_model
    from codemoe.core.moe import read_layer_stats

    torch.manual_seed(0)
    model = build_model(tiny_spec, registry=moe_registry).eval()
    a, b = torch.randint(3, 64, (1, 6)), torch.randint(3, 64, (1, 4))
    ids = torch.cat([a, torch.cat([b, torch.full((1, 2), 2)], dim=1)])
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    with torch.no_grad():
        batched = model(ids, attention_mask=mask).logits
        stats = read_layer_stats(model)
        alone = model(b).logits
    assert stats[0].tokens == 10 and sum(stats[0].tokens_per_expert) == 20
    torch.testing.assert_close(batched[1, :4], alone[0], rtol=1e-5, atol=1e-5)
    assert all(v is None for layer in model.model.layers for v in layer.mlp.token_context)  # dropped after the forward


@pytest.mark.parametrize("copy_by", ["deepcopy", "pickle"])
def test_a_copied_model_masks_its_own_padding(moe_registry, tiny_spec, copy_by):
    """A copy of a model (the trainer's frozen reference, an engine's copy of the policy, a model sent
    to a child process) gives its own blocks the forward's padding mask: its statistics count only
    the real tokens, like the original's, and the original's blocks are left alone."""
    import copy
    import pickle

    from codemoe.core.models import build_model
    from codemoe.core.moe import read_layer_stats

    torch.manual_seed(0)
    model = build_model(tiny_spec, registry=moe_registry).eval()
    twin = copy.deepcopy(model) if copy_by == "deepcopy" else pickle.loads(pickle.dumps(model))
    ids = torch.randint(3, 64, (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    seen = []
    model.model.layers[0].mlp.register_forward_pre_hook(lambda m, a: seen.append(m.token_context[1]))
    with torch.no_grad():
        twin(ids, attention_mask=mask)
    assert read_layer_stats(twin)[0].tokens == 10  # 12 positions, 2 of them padding
    assert seen == []  # the original's blocks ran no forward and were given nothing
    with torch.no_grad():
        model(ids, attention_mask=mask)
    assert read_layer_stats(model)[0].tokens == 10 and seen[0] is not None
