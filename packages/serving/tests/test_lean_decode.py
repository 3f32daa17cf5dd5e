"""The lean decode step against the model's own forward, on the model shapes it accepts."""

from __future__ import annotations

import pytest
import torch
from codemoe.core.models import build_model
from codemoe.serving import SamplingParams
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig
from codemoe.serving.lean_decode import LeanDecoder

PROMPTS = ["def add(a, b):", "for i in range(", "class Stack:\n    def"]

BASE = {
    "name": "qwen3_moe",
    "hidden_size": 64,
    "num_layers": 3,
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 16,
    "num_experts": 8,
    "moe_intermediate_size": 32,
    "max_position_embeddings": 256,
}
VARIANTS = {
    "softmax-topk": {},
    "dense-layer-and-shared-expert": {
        "dense_layers": [1],
        "intermediate_size": 96,
        "shared_expert_intermediate_size": 48,
    },
    "hash-router": {"router": {"name": "hash", "top_k": 2}},
    "sigmoid-bias-router": {"router": {"name": "sigmoid_bias", "top_k": 2}},
}


def _model(variant: str, vocab: int):
    torch.manual_seed(3)
    return build_model({**BASE, **VARIANTS[variant]}, vocab_size=vocab).eval()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_lean_decode_gives_the_model_forwards_samples_logprobs_and_experts(variant, tokenizer):
    model = _model(variant, len(tokenizer))
    lean = EmbeddedEngine(model, tokenizer)
    plain = EmbeddedEngine(model, tokenizer, EmbeddedEngineConfig(lean_decode=False))
    assert lean.runner.lean is not None and plain.runner.lean is None
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=24, seed=4, ignore_eos=True)
    a, b = lean.generate(PROMPTS, params), plain.generate(PROMPTS, params)
    for out_a, out_b in zip(a, b):
        for x, y in zip(out_a.samples, out_b.samples):
            assert x.token_ids == y.token_ids
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0)
            assert torch.equal(x.routing, y.routing)


def test_lean_decode_reads_weights_updated_in_place(tokenizer):
    """A trainer updates the engine's model in place: the next decode step must use the new weights."""
    model = _model("softmax-topk", len(tokenizer))
    engine = EmbeddedEngine(model, tokenizer)
    params = SamplingParams(temperature=0, max_new_tokens=16, ignore_eos=True)
    before = engine.generate(PROMPTS, params)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.experts.down_proj.mul_(-3.0)
            layer.self_attn.o_proj.weight.mul_(2.0)
    after = engine.generate(PROMPTS, params)
    reference = EmbeddedEngine(model, tokenizer, EmbeddedEngineConfig(lean_decode=False)).generate(PROMPTS, params)
    assert [o.samples[0].token_ids for o in after] == [o.samples[0].token_ids for o in reference]
    assert [o.samples[0].token_ids for o in after] != [o.samples[0].token_ids for o in before]


def test_models_of_other_shapes_use_their_own_forward(hf_model, tokenizer):
    # a plain transformers MoE block, and a capacity limit (drops depend on the whole batch)
    assert LeanDecoder.for_model(hf_model) is None
    capped = build_model({**BASE, "capacity_factor": 1.0}, vocab_size=len(tokenizer))
    assert LeanDecoder.for_model(capped) is None
    assert LeanDecoder.for_model(_model("softmax-topk", len(tokenizer))) is not None


def test_rows_reordered_by_finished_groups_keep_exact_logprobs(tokenizer):
    """Samples that finish early free their rows, the last rows move in and a waiting group joins
    later (rows out of group order, at different positions): log-probs must stay teacher-forced."""
    model = _model("softmax-topk", len(tokenizer))
    engine = EmbeddedEngine(model, tokenizer, EmbeddedEngineConfig(max_batch_size=6))
    parts = [
        (ids, engine.submit(ids, SamplingParams(n=n, max_new_tokens=m, seed=9, ignore_eos=True), prompt_index=i))
        for i, (ids, n, m) in enumerate((engine.encode(p), n, m) for p, n, m in zip(PROMPTS, (2, 3, 3), (4, 18, 11)))
    ]
    for ids, part in parts:
        for sample in engine.collect(ids, part).samples:
            full = torch.tensor([ids + sample.token_ids])
            with torch.no_grad():
                logits = model(full).logits[0, len(ids) - 1 : -1]
            expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(sample.token_ids)[:, None]).squeeze(1)
            torch.testing.assert_close(torch.tensor(sample.logprobs), expected, atol=1e-4, rtol=0)


def test_a_policy_in_training_mode_samples_in_eval_mode_and_stays_in_training_mode(tokenizer):
    """The RL trainer may share its policy with the engine: sampling must not see dropout or router
    noise, and must hand the model back in training mode, every module of it."""
    model = build_model({**BASE, "router": {"name": "noisy_topk", "top_k": 2}}, vocab_size=len(tokenizer))
    params = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)
    expected = EmbeddedEngine(model.eval(), tokenizer).generate(PROMPTS, params)
    engine = EmbeddedEngine(model.train(), tokenizer)
    got = engine.generate(PROMPTS, params)
    assert [o.samples[0].token_ids for o in got] == [o.samples[0].token_ids for o in expected]
    assert all(m.training for m in model.modules())


@pytest.mark.parametrize("lean", [True, False])
def test_generation_does_not_count_in_the_trainers_routing_statistics(tokenizer, lean):
    """A trainer sharing its policy with the engine reads the routing of its own batches only."""
    from codemoe.core.moe import moe_blocks, read_layer_stats

    model = _model("softmax-topk", len(tokenizer)).train()
    read_layer_stats(model)  # start from empty accumulators
    engine = EmbeddedEngine(model, tokenizer, EmbeddedEngineConfig(lean_decode=lean))
    engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=6, seed=0, ignore_eos=True))
    assert [s.tokens for s in read_layer_stats(model)] == [0, 0, 0]
    assert all(block.record_statistics for block in moe_blocks(model))
    ids = torch.tensor([tokenizer("def add(a, b): return a + b")["input_ids"]])
    model(input_ids=ids)  # a training forward still counts
    assert [s.tokens for s in read_layer_stats(model)] == [ids.numel()] * 3


def test_a_dense_qwen3_model_decodes_lean_too(tokenizer):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(5)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
    )
    model = Qwen3ForCausalLM(config).eval()
    lean = EmbeddedEngine(model, tokenizer)
    plain = EmbeddedEngine(model, tokenizer, EmbeddedEngineConfig(lean_decode=False))
    assert lean.runner.lean is not None
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=16, seed=2, ignore_eos=True)
    for x, y in zip(lean.generate(PROMPTS, params), plain.generate(PROMPTS, params)):
        assert [s.token_ids for s in x.samples] == [s.token_ids for s in y.samples]
        for a, b in zip(x.samples, y.samples):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)


def test_the_device_check_passes_on_cpu(tmp_path):
    """``python -m codemoe.serving.device_check`` repeats these contracts on a GPU; here it runs on CPU."""
    import json

    from codemoe.serving.device_check import main

    assert main(["--device", "cpu", "--json", str(tmp_path / "check.json")]) == 0
    checks = json.loads((tmp_path / "check.json").read_text())["checks"]
    assert set(checks) == {
        "logprobs_match_teacher_forcing",
        "roots_formed",
        "sharing_and_roots_give_the_same_samples",
        "greedy_equals_transformers_generate",
        "weight_sync_in_buckets",
    }
    assert checks["logprobs_match_teacher_forcing"]["max_abs_diff"] <= 1e-4
    assert checks["weight_sync_in_buckets"]["max_abs_diff"] <= 1e-4
