import pytest
import torch
from codemoe.core.moe import UNROUTED, apply_capacity, capacity


def test_capacity_formula():
    assert capacity(num_tokens=32, top_k=2, num_experts=8, factor=1.0) == 8
    assert capacity(num_tokens=32, top_k=2, num_experts=8, factor=1.25) == 10
    assert capacity(num_tokens=3, top_k=1, num_experts=8, factor=0.1) == 1


def test_weight_policy_keeps_the_most_confident_assignments():
    indices = torch.tensor([[0, 1], [0, 2], [0, 1], [2, 0]])
    weights = torch.tensor([[0.6, 0.4], [0.9, 0.1], [0.7, 0.3], [0.8, 0.2]])
    kept, kept_w, dropped = apply_capacity(indices, weights, num_experts=3, cap=2, policy="weight")
    # expert 0 has four assignments (0.6, 0.9, 0.7, 0.2): the 0.9 and 0.7 ones stay
    assert kept.tolist() == [[UNROUTED, 1], [0, 2], [0, 1], [2, UNROUTED]]
    torch.testing.assert_close(kept_w, torch.tensor([[0.0, 0.4], [0.9, 0.1], [0.7, 0.3], [0.8, 0.0]]))
    assert int(dropped) == 2


def test_position_policy_keeps_earlier_tokens_and_first_choices():
    indices = torch.tensor([[1, 0], [0, 1], [0, 1], [1, 0]])
    weights = torch.full((4, 2), 0.5)
    kept, _, dropped = apply_capacity(indices, weights, num_experts=2, cap=2, policy="position")
    # first choices first, in token order: expert 1 <- t0, t3; expert 0 <- t1, t2
    assert kept.tolist() == [[1, UNROUTED], [0, UNROUTED], [0, UNROUTED], [1, UNROUTED]]
    assert int(dropped) == 4


def test_unrouted_slots_stay_unrouted_and_are_not_counted_as_dropped():
    indices = torch.tensor([[0, UNROUTED], [0, UNROUTED]])
    kept, _, dropped = apply_capacity(indices, torch.ones(2, 2), num_experts=2, cap=1)
    assert kept.tolist() == [[0, UNROUTED], [UNROUTED, UNROUTED]] and int(dropped) == 1


def test_unknown_policy_names_the_valid_ones():
    with pytest.raises(ValueError, match="choose one of weight, position"):
        apply_capacity(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1), num_experts=2, cap=1, policy="random")
