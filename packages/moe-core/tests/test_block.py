import pytest
import torch
from codemoe.core.moe import MoEBlock, MoEOptions
from codemoe.core.moe.experts import GroupedExperts, LoopExperts, TorchGroupedMMExperts
from float_close import close as _close
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

H, INTER, E, K = 32, 16, 8, 2


def _hf_block(implementation: str) -> Qwen3MoeSparseMoeBlock:
    config = Qwen3MoeConfig(
        hidden_size=H, moe_intermediate_size=INTER, num_experts=E, num_experts_per_tok=K, norm_topk_prob=True
    )
    config._experts_implementation = implementation
    torch.manual_seed(0)
    block = Qwen3MoeSparseMoeBlock(config)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.2)
    return block


def _codemoe_block(moe_registry, experts_cls, hf: Qwen3MoeSparseMoeBlock, **options) -> MoEBlock:
    router = moe_registry.build("router", {"name": "softmax_topk", "top_k": K}, hidden_size=H, num_experts=E)
    block = MoEBlock(router, experts_cls(E, H, INTER), MoEOptions(**options))
    result = block.load_state_dict(hf.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert all(key.startswith("shared_expert") for key in result.missing_keys)
    return block


@pytest.mark.parametrize("experts_cls", [GroupedExperts, TorchGroupedMMExperts, LoopExperts])
@pytest.mark.parametrize("implementation", ["eager", "grouped_mm"])
def test_same_outputs_and_gradients_as_transformers_block(moe_registry, experts_cls, implementation):
    hf = _hf_block(implementation)
    ours = _codemoe_block(moe_registry, experts_cls, hf)
    assert set(dict(ours.named_parameters())) == set(dict(hf.named_parameters()))
    x = torch.randn(3, 7, H)
    x_hf, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    probe = torch.randn(3, 7, H)
    out_hf, out_ours = hf(x_hf), ours(x_ours)
    _close(out_ours, out_hf)
    (out_hf * probe).sum().backward()
    (out_ours * probe).sum().backward()
    _close(x_ours.grad, x_hf.grad)
    grads_hf = {n: p.grad for n, p in hf.named_parameters()}
    for name, p in ours.named_parameters():
        _close(p.grad, grads_hf[name], msg=name)


def test_shared_expert_is_added_with_its_sigmoid_gate(moe_registry):
    hf = _hf_block("eager")
    ours = _codemoe_block(moe_registry, GroupedExperts, hf, shared_expert_intermediate_size=8)
    x = torch.randn(5, H)
    with torch.no_grad():
        ours.shared_expert_gate.weight.zero_()  # sigmoid(0) = 1/2
        expected = hf(x.view(1, 5, H)).view(5, H) + 0.5 * ours.shared_expert(x)
        _close(ours(x.view(1, 5, H)).view(5, H), expected)


def test_capacity_drops_assignments_and_counts_them(moe_registry):
    hf = _hf_block("eager")
    ours = _codemoe_block(moe_registry, GroupedExperts, hf, capacity_factor=0.5)
    with torch.no_grad():
        ours(torch.randn(1, 32, H))
    stats = ours.stats.read(0)
    cap = 4  # ceil(0.5 * 32 * 2 / 8)
    assert max(stats.tokens_per_expert) <= cap
    assert stats.dropped_fraction == pytest.approx(1 - sum(stats.tokens_per_expert) / 64)
    assert stats.dropped_fraction >= 0.5


def test_with_statistics_off_a_forward_leaves_no_losses_and_counts_nothing(moe_registry):
    """What a generation engine relies on: its forwards do not reach a trainer's metrics or losses."""
    ours = _codemoe_block(moe_registry, GroupedExperts, _hf_block("eager"))
    x = torch.randn(2, 5, H)
    ours.set_record_statistics(False)
    ours(x)
    assert ours.last_losses == {} and ours.stats.read(0).tokens == 0
    ours.set_record_statistics(True)
    ours(x)
    assert set(ours.last_losses) == {"balance", "z"} and ours.stats.read(0).tokens == 10


def test_infer_gives_the_forward_output_and_the_chosen_experts(moe_registry):
    from codemoe.core.moe import capture_routing

    ours = _codemoe_block(moe_registry, GroupedExperts, _hf_block("eager"), shared_expert_intermediate_size=8)
    x = torch.randn(6, H)
    with torch.no_grad(), capture_routing(ours) as record:
        out, experts = ours.infer(x)
        _close(out, ours(x.view(1, 6, H)).view(6, H))
    assert torch.equal(experts, record.forwards[0][0])  # one forward captured: infer is not recorded
    assert len(record.forwards) == 1


def test_a_second_capture_of_the_same_block_is_refused(moe_registry):
    ours = _codemoe_block(moe_registry, GroupedExperts, _hf_block("eager"))
    first = ours.start_capture()
    with pytest.raises(RuntimeError, match="already being captured"):
        ours.start_capture()
    ours(torch.randn(1, 3, H))
    ours.stop_capture()
    assert len(first) == 1 and not ours.capturing
