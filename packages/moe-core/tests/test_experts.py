import pytest
import torch
from codemoe.core.moe import UNROUTED, GroupedExperts, LocalDispatcher, LoopExperts, TorchGroupedMMExperts
from float_close import close as _close

E, H, INTER = 6, 16, 8


@pytest.fixture(params=[GroupedExperts, TorchGroupedMMExperts], ids=["grouped", "grouped_mm"])
def fast(request):
    return request.param


def _pair(fast_cls):
    torch.manual_seed(0)
    loop, grouped = LoopExperts(E, H, INTER), fast_cls(E, H, INTER)
    with torch.no_grad():
        loop.gate_up_proj.normal_(0, 0.3)
        loop.down_proj.normal_(0, 0.3)
    grouped.load_state_dict(loop.state_dict())
    return loop, grouped


def _check_equal(indices: torch.Tensor, fast_cls) -> None:
    loop, grouped = _pair(fast_cls)
    x = torch.randn(indices.shape[0], H, requires_grad=True)
    weights = torch.rand(indices.shape, requires_grad=True)
    outputs, grads = [], []
    for experts in (loop, grouped):
        out = experts(x, indices, weights)
        (out * torch.linspace(-1, 1, H)).sum().backward()
        outputs.append(out.detach())
        grads.append([t.grad.clone() for t in (x, weights, experts.gate_up_proj, experts.down_proj)])
        x.grad = weights.grad = None
    _close(outputs[1], outputs[0])
    for got, want in zip(grads[1], grads[0]):
        _close(got, want)


@pytest.mark.parametrize("seed", range(4))
def test_grouped_equals_loop_for_random_loads_with_empty_experts(seed, fast):
    g = torch.Generator().manual_seed(seed)
    tokens = 40
    # Only experts 0, 2, 3 receive tokens: 1, 4 and 5 stay empty; loads are skewed.
    pool = torch.tensor([0, 0, 0, 2, 3])
    first = pool[torch.randint(0, len(pool), (tokens,), generator=g)]
    second = torch.where(first == 0, torch.tensor(2), torch.tensor(0))
    _check_equal(torch.stack([first, second], dim=-1), fast)


def test_grouped_equals_loop_with_unrouted_slots_and_all_tokens_on_one_expert(fast):
    indices = torch.full((12, 2), UNROUTED)
    indices[:, 0] = 4
    indices[::3, 1] = 1
    _check_equal(indices, fast)


def test_dispatch_groups_assignments_by_expert_without_copying_tokens():
    x = torch.arange(8.0).view(4, 2)
    indices = torch.tensor([[2, 0], [0, UNROUTED], [2, 1], [1, 0]])
    weights = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75], [0.6, 0.4]])
    d = LocalDispatcher().dispatch(x, indices, weights, num_experts=4)
    assert d.tokens is x
    assert d.counts == [3, 2, 2, 0]
    assert d.rows.tolist() == [0, 1, 3, 2, 3, 0, 2]
    torch.testing.assert_close(d.weights, torch.tensor([0.5, 1.0, 0.4, 0.75, 0.6, 0.5, 0.25]))


def test_inference_path_equals_loop_and_the_training_kernel():
    """Under no_grad the experts take the inference kernel: same outputs as the reference loop and
    as the autograd kernel, on a few rows with unrouted slots and on a decode-sized random load."""
    loop, grouped = _pair(GroupedExperts)
    x = torch.randn(5, H)
    indices = torch.tensor([[0, 3], [3, UNROUTED], [5, 0], [0, 3], [2, 5]])
    weights = torch.rand(5, 2)
    with torch.no_grad():
        _close(grouped(x, indices, weights), loop(x, indices, weights))
    x = torch.randn(128, H)
    indices = torch.randint(0, E, (128, 2))
    indices[indices == 1] = 2  # expert 1 gets no rows
    weights = torch.rand(128, 2)
    trained = grouped(x, indices, weights)
    with torch.no_grad():
        inferred = grouped(x, indices, weights)
        _close(inferred, loop(x, indices, weights))
    torch.testing.assert_close(inferred, trained.detach(), rtol=1e-6, atol=1e-6)
