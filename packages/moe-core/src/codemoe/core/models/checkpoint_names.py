"""Parameters in the names and layout of a model's Hugging Face checkpoint, one layer at a time.

A ``transformers`` 5 model keeps some weights in another layout than its checkpoint: a MoE layer's
experts live in fused 3-D tensors (``mlp.experts.gate_up_proj``) that its ``save_pretrained``
writes as one tensor per expert and projection (``mlp.experts.3.gate_proj.weight``), which is what
SGLang's and vLLM's loaders read. Weights sent to a server without a checkpoint on disk must be
converted the same way, and a server that receives checkpoint-format tensors must convert them
back. Both directions here use ``transformers``' own conversion mapping for the model, so they
match ``save_pretrained`` / ``from_pretrained`` by construction; every conversion of the supported
families stays inside one decoder layer, so the tensors are converted a layer at a time and no
caller ever holds more than one layer converted.

- :func:`to_checkpoint` — ``(name, tensor)`` pairs keyed as the model names them, in (the order of
  ``state_dict()``), to checkpoint names, lazily; tied copies (``lm_head`` tied to the embedding)
  are left out as ``save_pretrained`` leaves them out;
- :func:`from_checkpoint` — a dict of checkpoint-format tensors (whole layers) to the model's names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from copy import deepcopy
from typing import Any

import torch

__all__ = ["from_checkpoint", "layer_of", "tied_names", "to_checkpoint"]

_LAYER = re.compile(r"^(.*?\blayers\.\d+)\.")


def layer_of(name: str) -> str:
    """The group a parameter converts with: its decoder layer's prefix, or the name itself."""
    match = _LAYER.match(name)
    return match.group(1) if match else name


def tied_names(model: Any) -> set[str]:
    """The model's state-dict names that are tied copies of another weight (left out of checkpoints)."""
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = dict(model.state_dict(keep_vars=True))
    kept = remove_tied_weights_from_state_dict(dict(state), model)
    return set(state) - set(kept)


def _conversions(model: Any) -> list[Any]:
    """The model's weight conversions, as ``save_pretrained`` reverts them (no prefix changes for a
    model not loaded by ``from_pretrained``)."""
    conversions = getattr(model, "_weight_conversions", None)
    if conversions is None:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import PrefixChange

        conversions = [c for c in get_model_conversion_mapping(model, add_legacy=False) if not isinstance(c, PrefixChange)]
    return list(conversions or [])


def _revert(model: Any, group: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from transformers.core_model_loading import revert_weight_conversion

    return revert_weight_conversion(model, group)


def to_checkpoint(model: Any, named: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """``named`` (model names, grouped by layer as ``state_dict()`` orders them) in checkpoint names
    and layout, one layer converted at a time. A name that comes back after its layer was converted
    is a :class:`ValueError` (its layer would be converted twice, half each time)."""
    skip = tied_names(model)
    done: set[str] = set()
    group: dict[str, torch.Tensor] = {}
    current: str | None = None
    for name, tensor in named:
        if name in skip:
            continue
        layer = layer_of(name)
        if layer != current:
            if group:
                yield from _revert(model, group).items()
                done.add(current)  # type: ignore[arg-type]
            if layer in done:
                raise ValueError(f"{name!r}: its layer {layer!r} was already converted (tensors out of layer order)")
            group, current = {}, layer
        group[name] = tensor
    if group:
        yield from _revert(model, group).items()


def from_checkpoint(model: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint-format ``tensors`` (every tensor of each layer they touch) keyed and laid out as
    ``model.state_dict()``; the inverse of :func:`to_checkpoint` (``from_pretrained``'s conversion)."""
    from transformers.core_model_loading import (
        WeightConverter,
        WeightRenaming,
        apply_converters,
        apply_renamings,
        dot_natural_key,
    )

    conversions = _conversions(model)
    renamings = [c for c in conversions if isinstance(c, WeightRenaming)]
    converters = [c for c in conversions if isinstance(c, WeightConverter)]
    by_pattern = {p: c for c in converters for p in c.source_patterns}
    pending: dict[str, Any] = {}
    for key, tensor in sorted(tensors.items(), key=lambda kv: dot_natural_key(kv[0])):
        renamed, pattern = apply_converters(apply_renamings(key, renamings), converters)
        if pattern is None:
            converter, pattern = pending.setdefault(renamed, WeightRenaming(key, renamed)), key
        else:
            converter = pending.setdefault(renamed, deepcopy(by_pattern[pattern]))
        converter.add_tensor(renamed, key, pattern, tensor)
    out: dict[str, torch.Tensor] = {}
    for first, converter in pending.items():
        for name, value in converter.convert(first, model=model, config=model.config).items():
            out[name] = value[0] if isinstance(value, list) else value
    return out
