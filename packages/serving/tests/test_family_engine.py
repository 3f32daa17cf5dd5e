"""The embedded engine on every model family: its log-probs are a teacher-forced forward's, whether
decode reads the prompt through the shared-prefix attention or gathers keys for the model's own
attention (GPT-OSS's sinks and sliding windows, DeepSeek-V3's latent KV cache), with prompts and
completions longer than GPT-OSS's window, continuous batching and the prefix cache across turns."""

from __future__ import annotations

import pytest
import torch
from codemoe.core.contracts import EngineError
from codemoe.core.models import build_model
from codemoe.serving import SamplingParams
from codemoe.serving.attention import unshared_reason
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig
from codemoe.serving.kv_cache import StepPlan
from codemoe.serving.runner import key_positions, window_masks

# family -> why decode cannot use the shared-prefix attention (None: it does)
FAMILIES = {
    "mixtral": None,
    "qwen2_moe": None,
    "olmoe": None,
    "deepseek_v3": "latent (MLA) keys and values",
    "gpt_oss": "attention sinks",
    "qwen3": None,
    "llama": None,
}
# families whose decode steps are computed from the weights (lean_decode.py): OLMoE's q/k norms span
# the whole projection, not a head
LEAN = {"mixtral", "qwen2_moe", "qwen3", "llama"}

# tokens 3 .. 17 then 2 more: 15- and 17-token prompts sharing 15 tokens, plus a short one; with
# 14 new tokens every sequence outgrows GPT-OSS's 8-token window
PROMPTS = [list(range(3, 18)), [5, 6, 7], [*range(3, 18), 40, 41]]


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_model(request):
    torch.manual_seed(0)
    return request.param, build_model(f"tiny_{request.param}").eval()


def teacher_forced_logprobs(model, prompt_ids, token_ids):
    full = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(token_ids)[:, None]).squeeze(1)


def _assert_teacher_forced(model, outputs):
    # fp32: the engine and the full forward differ by the order of a few sums (~1e-6 seen); 1e-4 is
    # the engine's contract and ~100x below a missing window or sink (~1e-2)
    for out in outputs:
        for sample in out.samples:
            expected = teacher_forced_logprobs(model, out.prompt_token_ids, sample.token_ids)
            assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("shared_attention", [True, False], ids=["shared-prefix-attention", "gathered-keys"])
def test_logprobs_equal_a_teacher_forced_forward(family_model, shared_attention):
    family, model = family_model
    config = EmbeddedEngineConfig(shared_prefix_attention=shared_attention, max_batch_size=4)
    engine = EmbeddedEngine(model, None, config)
    assert engine.runner.shared_attention == (shared_attention and FAMILIES[family] is None)
    assert (engine.runner.lean is not None) == (shared_attention and family in LEAN)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=14, seed=1, ignore_eos=True)
    _assert_teacher_forced(model, engine.generate(PROMPTS, params))  # 6 samples through 4 slots


def test_next_turns_reuse_the_prefix_cache_with_the_same_logprobs(family_model):
    _, model = family_model
    engine = EmbeddedEngine(model, None, EmbeddedEngineConfig(prefix_cache_tokens=512))
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=1, ignore_eos=True)
    first = engine.generate(PROMPTS, params)
    # an agent's next turn: the history (prompt, completion but its last token) and an observation
    turns = [out.prompt_token_ids + out.samples[0].token_ids[:-1] + [9, 10] for out in first]
    second = engine.generate(turns, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=2, ignore_eos=True))
    assert engine.health()["prefix_cache_reused_tokens"] > 0
    _assert_teacher_forced(model, second)


def test_why_a_family_decodes_without_the_shared_prefix_attention(family_model):
    family, model = family_model
    assert unshared_reason(model) == FAMILIES[family]


def test_window_masks_hide_keys_a_window_behind_each_query():
    """Known answer: a gathered decode step, prompt of 3 keys (0..2) then the row's own 2 (3, 4),
    the query at position 4; with a window of 2 it sees positions 3 and 4 only."""
    plan = StepPlan(
        decoding=True,
        prefix_mask=torch.zeros(1, 1, 1, 3),
        suffix_mask=torch.zeros(1, 1, 1, 2),
        suffix_pos=torch.tensor([1]),
    )
    positions = torch.tensor([[4]])
    assert key_positions(plan, positions, 5).tolist() == [[0, 1, 2, 3, 4]]
    masks = window_masks(torch.zeros(1, 1, 1, 5), positions, plan, {"sliding_attention": 2})
    assert torch.equal(masks["full_attention"], torch.zeros(1, 1, 1, 5))
    hidden = torch.finfo(torch.float32).min
    assert masks["sliding_attention"][0, 0, 0].tolist() == [hidden, hidden, hidden, 0.0, 0.0]
    prefill = window_masks(torch.zeros(1, 1, 3, 3), torch.tensor([[0, 1, 2]]), StepPlan(), {"*": 2})
    assert (prefill[0, 0] == 0).tolist() == [[True, True, True], [True, True, True], [False, True, True]]


def test_attention_the_engine_cannot_mask_is_refused():
    torch.manual_seed(0)
    model = build_model("tiny_llama").eval()
    model.config.attention_chunk_size = 4
    with pytest.raises(EngineError, match="attention_chunk_size"):
        EmbeddedEngine(model, None)


def test_a_transformers_moe_policy_asked_for_its_balance_loss_is_served():
    """A trainer turns on ``output_router_logits`` of a plain transformers MoE policy; the engine's
    forwards (right-padded prompts, gathered keys) do not compute that loss."""
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_local_experts=4,
        max_position_embeddings=128,
        output_router_logits=True,
    )
    model = MixtralForCausalLM(config).eval()
    engine = EmbeddedEngine(model, None, EmbeddedEngineConfig(shared_prefix_attention=False))
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=1, ignore_eos=True)
    _assert_teacher_forced(model, engine.generate([[3, 4, 5, 6], [7, 8]], params))
