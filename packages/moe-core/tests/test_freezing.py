import pytest
import torch
from codemoe.core.moe import PHASES, parameter_groups, set_trainable


@pytest.fixture
def model(moe_registry, tiny_spec):
    from codemoe.core.models import build_model

    return build_model({**tiny_spec, "shared_expert_intermediate_size": 8}, registry=moe_registry)


def _trainable_groups(model) -> set[str]:
    return {g for g, params in parameter_groups(model).items() if params and all(p.requires_grad for p in params)}


@pytest.mark.parametrize(
    ("phase", "groups"),
    [
        ("router", {"router"}),
        ("experts", {"experts"}),
        ("moe", {"router", "experts"}),
        ("frozen_router", {"experts", "dense"}),
        ("dense", {"dense"}),
        ("all", {"router", "experts", "dense"}),
    ],
)
def test_phases_train_exactly_their_groups(model, phase, groups):
    counts = set_trainable(model, phase)
    assert _trainable_groups(model) == groups
    assert counts["trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert counts["trainable"] + counts["frozen"] == sum(p.numel() for p in model.parameters())


def test_groups_cover_router_experts_shared_expert_and_dense(model):
    groups = parameter_groups(model)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].endswith("mlp.gate.weight") for p in groups["router"])
    assert any("shared_expert" in names[id(p)] for p in groups["experts"])
    assert any("embed_tokens" in names[id(p)] for p in groups["dense"])
    assert set(PHASES) == {"router", "experts", "moe", "frozen_router", "dense", "all"}


def test_router_warm_up_changes_only_the_router(model):
    set_trainable(model, "router")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optim = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ids = torch.randint(0, 64, (2, 8))
    model(ids, labels=ids).loss.backward()
    optim.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.endswith("mlp.gate.weight") for n in changed)


def test_unknown_phase_names_the_valid_ones(model):
    with pytest.raises(ValueError, match="choose one of router, experts"):
        set_trainable(model, "routers")
