"""Model families besides qwen3_moe: each tiny preset builds its ``transformers`` architecture with
codemoe blocks where the family's routing is codemoe's, and its checkpoint loads in plain
``transformers`` (and back in codemoe) with the same logits."""

from __future__ import annotations

import json

import pytest
import torch
from codemoe.core.errors import ConfigError
from codemoe.core.models import build_model, load_pretrained, save_pretrained
from codemoe.core.moe import MoEBlock, moe_blocks
from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM

# family -> (transformers class, its own MoE block's class name, MoE layers swapped for codemoe blocks)
FAMILIES = {
    "mixtral": ("MixtralForCausalLM", "MixtralSparseMoeBlock", 2),
    "qwen2_moe": ("Qwen2MoeForCausalLM", "Qwen2MoeSparseMoeBlock", 2),
    "olmoe": ("OlmoeForCausalLM", "OlmoeSparseMoeBlock", 2),
    "deepseek_v3": ("DeepseekV3ForCausalLM", "DeepseekV3MoE", 1),  # its first layer is dense
    "gpt_oss": ("GptOssForCausalLM", "GptOssMLP", 0),  # transformers' block kept
    "qwen3": ("Qwen3ForCausalLM", "Qwen3MLP", 0),
    "llama": ("LlamaForCausalLM", "LlamaMLP", 0),
}

# fp32 forwards of a 2-layer model: codemoe's grouped experts and transformers' per-expert loop sum
# the same products in another order, a few ulps (~1e-7) per layer on logits of order 1
ATOL = 1e-5


def _model(family: str, registry, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(f"tiny_{family}", registry=registry).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tiny_preset_builds_its_transformers_architecture(family, moe_registry):
    model = _model(family, moe_registry)
    class_name, _, swapped = FAMILIES[family]
    assert type(model).__name__ == class_name and model.config.model_type == family
    assert len(list(moe_blocks(model))) == swapped
    assert 100_000 < sum(p.numel() for p in model.parameters()) < 1_000_000  # a few hundred thousand


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_family_checkpoint_loads_in_plain_transformers_with_the_same_logits(family, moe_registry, tmp_path):
    model = _model(family, moe_registry)
    if family == "deepseek_v3":  # a trained balancing bias steers which experts (and groups) are chosen
        for block in moe_blocks(model):
            block.gate.e_score_correction_bias.copy_(torch.randn(block.num_experts) * 0.5)
    save_pretrained(model, None, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["codemoe"]["name"] == family
    plain = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(plain).__name__ == FAMILIES[family][0]
    assert type(plain.model.layers[-1].mlp).__name__ == FAMILIES[family][1]  # the family's own block
    ids = torch.randint(3, model.config.vocab_size, (2, 24))
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, model(ids).logits, rtol=0, atol=ATOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_load_pretrained_rebuilds_the_family_exactly(family, moe_registry, tmp_path):
    model = _model(family, moe_registry)
    save_pretrained(model, None, tmp_path)
    loaded, _ = load_pretrained(tmp_path, registry=moe_registry)
    assert [type(b) for b in moe_blocks(loaded)] == [type(b) for b in moe_blocks(model)]
    ids = torch.randint(3, model.config.vocab_size, (2, 16))
    with torch.no_grad():
        assert torch.equal(loaded.eval()(ids).logits, model(ids).logits)


def test_deepseek_v3_keeps_its_shared_experts_name_and_routing_keys(moe_registry, tmp_path):
    model = _model("deepseek_v3", moe_registry)
    (block,) = moe_blocks(model)
    names = {name for name, _ in block.named_parameters()}
    assert {"shared_experts.gate_proj.weight", "gate.weight", "experts.gate_up_proj"} <= names
    assert not any(name.startswith("shared_expert.") for name in names)
    assert "gate.e_score_correction_bias" in block.state_dict()
    config = model.config
    assert (config.n_group, config.topk_group, config.num_experts_per_tok) == (2, 1, 2)
    assert config.routed_scaling_factor == 2.5 and config.norm_topk_prob is True


def test_a_plain_transformers_moe_folder_keeps_its_own_block(moe_registry, tmp_path):
    """A Mixtral checkpoint from outside codemoe (no codemoe section) loads as transformers builds it."""
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_local_experts=4,
        max_position_embeddings=128,
    )
    MixtralForCausalLM(config).save_pretrained(tmp_path)
    loaded, tokenizer = load_pretrained(tmp_path, registry=moe_registry)
    assert type(loaded.model.layers[0].mlp).__name__ == "MixtralSparseMoeBlock" and tokenizer is None
    assert not any(isinstance(m, MoEBlock) for m in loaded.modules())


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"name": "qwen2_moe", "shared_expert_intermediate_size": 0}, "model.shared_expert_intermediate_size"),
        ({"name": "deepseek_v3", "num_shared_experts": 0}, "model.num_shared_experts"),
        ({"name": "deepseek_v3", "first_dense_layers": 5}, "model.first_dense_layers"),
        ({"name": "gpt_oss", "attn_implementation": "sdpa"}, "model.attn_implementation"),
        ({"name": "gpt_oss", "layer_types": ["full_attention"]}, "model.layer_types"),
    ],
)
def test_a_family_option_transformers_cannot_build_is_refused_naming_its_key(spec, key, moe_registry):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        build_model(spec, registry=moe_registry)
