import pytest
import torch
from codemoe.core.models import build_model, count_parameters


def test_counts_match_the_hand_computed_numbers(moe_registry, tiny_spec):
    counts = count_parameters(tiny_spec, registry=moe_registry)
    h, v, layers, e, inter, k = 32, 64, 2, 4, 16, 2
    attention = h * 2 * 16 + 2 * h * 16 + 2 * 16 * h + 2 * 16  # q, k+v, o, q_norm+k_norm
    norms = 2 * h
    experts = e * 3 * h * inter
    router = e * h
    assert counts.expert == layers * experts
    assert counts.active_expert == layers * experts * k // e
    assert counts.router == layers * router
    assert counts.embedding == 2 * v * h
    assert counts.dense == layers * (attention + norms) + h  # + final norm
    assert counts.total == counts.embedding + counts.expert + counts.router + counts.dense
    assert counts.active == counts.total - counts.expert + counts.active_expert
    assert counts.flops_per_token == 2 * (counts.active - v * h)
    assert counts.train_flops_per_token == 3 * counts.flops_per_token


def test_a_built_model_counts_the_same_as_its_meta_spec(moe_registry, tiny_spec):
    model = build_model(tiny_spec, registry=moe_registry)
    assert count_parameters(model) == count_parameters(tiny_spec, registry=moe_registry)
    assert count_parameters(model).total == sum(p.numel() for p in model.parameters())


def test_shared_expert_and_tied_embeddings_are_counted_once(moe_registry, tiny_spec):
    base = count_parameters(tiny_spec, registry=moe_registry)
    spec = {**tiny_spec, "shared_expert_intermediate_size": 8, "tie_word_embeddings": True}
    counts = count_parameters(spec, registry=moe_registry)
    shared = 2 * (3 * 32 * 8 + 32)  # per layer: MLP + gate
    assert counts.dense == base.dense + shared
    assert counts.embedding == base.embedding // 2
    assert counts.active == counts.total - counts.expert + counts.active_expert


@pytest.mark.slow
def test_1t_preset_is_about_a_trillion_with_about_100b_active_without_allocating(moe_registry):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    counts = count_parameters("moe_1t", registry=moe_registry)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert 0.95e12 < counts.total < 1.1e12
    assert 0.08e12 < counts.active < 0.12e12
    assert grown_mib < 2000  # 1T fp32 parameters would be 4 TB
    assert torch.empty(0).device.type == "cpu"


def test_20b_preset_is_the_seed_starting_point(moe_registry):
    counts = count_parameters("moe_20b", registry=moe_registry)
    assert 19e9 < counts.total < 22e9
    assert 2.5e9 < counts.active < 3.5e9
    assert counts.flops_per_token == 2 * (counts.active - counts.embedding // 2)  # untied: head computes
