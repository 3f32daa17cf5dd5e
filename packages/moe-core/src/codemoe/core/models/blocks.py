"""Putting codemoe MoE blocks into ``transformers`` decoder layers, weights carried over."""

from __future__ import annotations

from typing import Any

import torch
from codemoe.core.moe.block import MoEBlock, options_from
from torch import nn

__all__ = ["make_block", "replace_moe_blocks"]


def make_block(config: Any, registry: Any, layer: int, block_type: type[MoEBlock] = MoEBlock) -> MoEBlock:
    """A codemoe MoE block for ``layer`` from a model config (router, experts and block options);
    ``block_type`` is a subclass that names a part as a family's ``transformers`` block does."""
    router = registry.build(
        "router", config.router, where="model.router", hidden_size=config.hidden_size, num_experts=config.num_experts
    )
    experts = registry.build(
        "experts",
        config.experts,
        where="model.experts",
        registry=registry,
        num_experts=config.num_experts,
        hidden_size=config.hidden_size,
        intermediate_size=config.moe_intermediate_size,
    )
    return block_type(router, experts, options_from(config), layer=layer)


@torch.no_grad()
def _copy_matching(src: nn.Module, dst: MoEBlock) -> None:
    """Copy every parameter of ``src`` into the same-named parameter of ``dst``.

    Expert weights are sliced to the experts ``dst`` holds (all of them unless expert-parallel).
    """
    target = dict(dst.named_parameters())
    held = slice(dst.experts.expert_offset, dst.experts.expert_offset + dst.experts.num_experts)
    for name, param in src.named_parameters():
        if name in target:
            target[name].copy_(param[held] if name.startswith("experts.") else param)


def replace_moe_blocks(
    model: nn.Module, config: Any, registry: Any, *, block_type: type[MoEBlock] = MoEBlock
) -> nn.Module:
    """Swap every ``transformers`` sparse MoE block of ``model`` for a codemoe block with its weights.

    Parameters the ``transformers`` block lacks (a shared expert, extra router parameters) keep
    codemoe's initialisation.
    """
    for layer_index, layer in enumerate(model.model.layers):
        old = layer.mlp
        if not hasattr(old, "experts"):
            continue
        block = make_block(config, registry, layer_index, block_type)
        _init_block(block, config.initializer_range, like=old.experts.gate_up_proj)
        _copy_matching(old, block)
        layer.mlp = block
    _attach_token_context(model)
    return model


@torch.no_grad()
def _init_block(block: MoEBlock, std: float, like: torch.Tensor) -> None:
    block.to(device=like.device, dtype=like.dtype)
    for name, param in block.named_parameters():
        if param.device.type == "meta":
            continue
        if name.endswith("shared_expert_gate.weight"):
            param.zero_()
        else:
            param.normal_(0.0, std)
    for buffer in block.buffers():
        if buffer.device.type != "meta" and buffer.is_floating_point():
            buffer.zero_()


def _attach_token_context(model: nn.Module) -> None:
    """Give MoE blocks the attention mask of each forward (padding) and, for routers that hash
    token ids, the input ids; both are dropped when the forward ends."""
    blocks = [m for m in model.modules() if isinstance(m, MoEBlock)]
    model.register_forward_pre_hook(_TokenContext(blocks), with_kwargs=True)
    model.register_forward_hook(_DropTokenContext(blocks), with_kwargs=True)


class _TokenContext:
    """The forward pre-hook of :func:`_attach_token_context` (a class, not a closure, so that a model
    pickles whole: the engine in a child process receives it so)."""

    def __init__(self, blocks: list[MoEBlock]) -> None:
        self.blocks = blocks

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        mask = mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        ids = kwargs.get("input_ids", args[0] if args else None)
        for block in self.blocks:
            block.set_token_context(ids if getattr(block.gate, "needs_token_ids", False) else None, mask)


class _DropTokenContext:
    """The forward hook of :func:`_attach_token_context`: drops what the pre-hook gave."""

    def __init__(self, blocks: list[MoEBlock]) -> None:
        self.blocks = blocks

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        for block in self.blocks:
            block.set_token_context(None, None)
