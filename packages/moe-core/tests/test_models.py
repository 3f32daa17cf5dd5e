import json

import pytest
import torch
from codemoe.core.models import build_model, from_transformers, is_standard, load_pretrained, save_pretrained
from codemoe.core.moe import MoEBlock
from codemoe.core.tokenizer import train_tokenizer
from transformers import AutoModelForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["def add(a, b):\n    return a + b\n", "x = [i * i for i in range(9)]\n"] * 10, 280)


def test_preset_name_builds_a_transformers_causal_lm_with_codemoe_blocks(moe_registry):
    model = build_model("tiny", vocab_size=300, registry=moe_registry)
    assert isinstance(model, Qwen3MoeForCausalLM)
    assert model.config.vocab_size == 300 and model.get_input_embeddings().weight.shape[0] == 300
    assert all(isinstance(layer.mlp, MoEBlock) for layer in model.model.layers)
    assert 1_000_000 < sum(p.numel() for p in model.parameters()) < 10_000_000  # a few million


def test_generate_with_kv_cache_matches_full_recompute(moe_registry, tiny_spec):
    torch.manual_seed(0)
    model = build_model(tiny_spec, registry=moe_registry).eval()
    ids = torch.randint(3, 64, (2, 6))
    cached = model.generate(ids, max_new_tokens=6, do_sample=False, use_cache=True, pad_token_id=2)
    uncached = model.generate(ids, max_new_tokens=6, do_sample=False, use_cache=False, pad_token_id=2)
    assert torch.equal(cached, uncached)
    with torch.no_grad():
        step_logits = model(cached[:, :-1]).logits[:, -1]
    assert torch.equal(step_logits.argmax(-1), cached[:, -1])


def test_checkpoint_loads_in_plain_transformers_with_identical_logits(moe_registry, tiny_spec, tokenizer, tmp_path):
    torch.manual_seed(0)
    model = build_model(tiny_spec, vocab_size=len(tokenizer), registry=moe_registry).eval()
    save_pretrained(model, tokenizer, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "qwen3_moe" and config["norm_topk_prob"] is True
    assert config["num_experts_per_tok"] == 2 and config["codemoe"]["router"]["name"] == "softmax_topk"
    plain = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(plain.model.layers[0].mlp).__name__ == "Qwen3MoeSparseMoeBlock"
    ids = torch.randint(0, len(tokenizer), (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)
        assert torch.equal(
            plain.generate(ids, max_new_tokens=4, do_sample=False),
            model.generate(ids, max_new_tokens=4, do_sample=False),
        )


def test_load_pretrained_restores_model_and_tokenizer_exactly(moe_registry, tiny_spec, tokenizer, tmp_path):
    spec = {**tiny_spec, "shared_expert_intermediate_size": 8, "capacity_factor": 2.0, "experts": {"name": "loop"}}
    model = build_model(spec, vocab_size=len(tokenizer), registry=moe_registry).eval()
    save_pretrained(model, tokenizer, tmp_path)
    loaded, loaded_tok = load_pretrained(tmp_path, registry=moe_registry)
    assert loaded.model.layers[0].mlp.options == model.model.layers[0].mlp.options
    assert loaded.model.layers[0].mlp.shared_expert is not None
    ids = torch.randint(0, len(tokenizer), (1, 9))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert loaded_tok.get_vocab() == tokenizer.get_vocab()
    messages = [{"role": "user", "content": "add"}]
    assert loaded_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == (
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    )


def test_plain_transformers_model_converts_to_codemoe_blocks_with_the_same_outputs(moe_registry):
    config = Qwen3MoeConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        norm_topk_prob=False,
    )
    torch.manual_seed(0)
    plain = Qwen3MoeForCausalLM(config).eval()
    ids = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        expected = plain(ids).logits
        converted = from_transformers(plain, registry=moe_registry)
        assert isinstance(converted.model.layers[1].mlp, MoEBlock)
        assert converted.model.layers[1].mlp.gate.config.normalize is False
        torch.testing.assert_close(converted(ids).logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("changes", "standard"),
    [
        ({}, True),
        ({"router": {"name": "softmax_topk", "top_k": 2, "order": "topk_softmax"}}, True),
        ({"router": {"name": "sigmoid_bias", "top_k": 2}}, False),
        ({"shared_expert_intermediate_size": 8}, False),
        ({"capacity_factor": 1.0}, False),
    ],
)
def test_is_standard_says_when_plain_transformers_computes_the_same_model(moe_registry, tiny_spec, changes, standard):
    with torch.device("meta"):
        model = build_model({**tiny_spec, **changes}, registry=moe_registry)
    assert is_standard(model) is standard
