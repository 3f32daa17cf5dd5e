"""Parameters in their checkpoint's names and layout, a layer at a time: what a server's loader reads
without a checkpoint on disk. ``to_checkpoint`` must give exactly the tensors ``save_pretrained``
writes (names and values) for every family, and ``from_checkpoint`` must invert it."""

from __future__ import annotations

import pytest
import torch
from codemoe.core.models import build_model, save_pretrained
from codemoe.core.models.checkpoint_names import from_checkpoint, layer_of, tied_names, to_checkpoint
from safetensors.torch import load_file

FAMILIES = ["qwen3_moe", "mixtral", "qwen2_moe", "olmoe", "deepseek_v3", "gpt_oss", "qwen3", "llama"]


def _model(family: str, registry):
    torch.manual_seed(0)
    return build_model(f"tiny_{family}" if family != "qwen3_moe" else "tiny", registry=registry)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_stream_is_what_save_pretrained_writes(family, moe_registry, tmp_path):
    model = _model(family, moe_registry)
    save_pretrained(model, None, tmp_path)
    written = {}
    for shard in tmp_path.glob("*.safetensors"):
        written.update(load_file(shard))
    streamed = dict(to_checkpoint(model, model.state_dict().items()))
    assert sorted(streamed) == sorted(written)
    for name, tensor in written.items():  # the same bytes: conversions only move and split values
        assert torch.equal(streamed[name], tensor), name


@pytest.mark.parametrize("family", FAMILIES)
def test_from_checkpoint_inverts_it_a_layer_at_a_time(family, moe_registry):
    model = _model(family, moe_registry)
    layers: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in to_checkpoint(model, model.state_dict().items()):
        layers.setdefault(layer_of(name), {})[name] = tensor
    back = {}
    for tensors in layers.values():
        back.update(from_checkpoint(model, tensors))
    state = model.state_dict()
    tied = set(state) - set(back)  # tied copies (lm_head of a tied embedding) are not in a checkpoint
    assert tied == tied_names(model)
    kept = {state[k].data_ptr() for k in back}
    assert all(state[name].data_ptr() in kept for name in tied)  # each shares a weight that is sent
    for name, tensor in back.items():
        assert torch.equal(tensor, state[name]), name


def test_tensors_out_of_layer_order_are_refused(moe_registry):
    model = _model("qwen3_moe", moe_registry)
    items = list(model.state_dict().items())
    first = next(i for i, (n, _) in enumerate(items) if ".layers.0." in n)
    shuffled = [*items[first + 1 :], items[first]]  # a layer-0 tensor after layer 1's
    with pytest.raises(ValueError, match="was already converted"):
        list(to_checkpoint(model, shuffled))
