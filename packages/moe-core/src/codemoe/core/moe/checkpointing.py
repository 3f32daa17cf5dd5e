"""Activation checkpointing per transformer block, with MoE routing counted once per token.

``checkpoint_layers(layers)`` makes each layer's forward keep only its inputs and recompute the
rest during backward (``torch.utils.checkpoint``, non-reentrant, RNG state preserved so a noisy
router draws the same noise). The recomputation runs with :data:`~codemoe.core.moe.block.RECOMPUTING`
set: MoE blocks inside it record no routing statistics, capture nothing and keep the first pass's
losses, and a block that replayed given experts in the first pass replays the same ones again
(the replay is set around the forward, which has returned by the time backward runs).

The layer's forward is rebound on the instance, so parameter names and state dicts do not change,
and a deep copy of a checkpointed model is a checkpointed copy of itself. Forwards without
gradients (an engine's, a reference policy's) run unchanged.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from codemoe.core.moe.block import RECOMPUTING, MoEBlock
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["checkpoint_layers", "is_checkpointed"]

_MARK = "_codemoe_checkpointed"
_BLOCKS = "_codemoe_moe_blocks"


def is_checkpointed(layer: nn.Module) -> bool:
    return bool(getattr(layer, _MARK, False))


def checkpoint_layers(layers: Iterable[nn.Module]) -> None:
    """Checkpoint each of ``layers`` (transformer blocks); idempotent."""
    for layer in layers:
        if not is_checkpointed(layer):
            layer.forward = types.MethodType(_checkpointed_forward, layer)  # type: ignore[method-assign]
            # found once; a plain list, so not submodules twice, and a deep copy points at its own blocks
            object.__setattr__(layer, _BLOCKS, [m for m in layer.modules() if isinstance(m, MoEBlock)])
            setattr(layer, _MARK, True)


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    forward = types.MethodType(type(self).forward, self)
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    blocks: list[MoEBlock] = getattr(self, _BLOCKS)
    replays = [block._replay for block in blocks]  # what the first pass routes to, if it replays

    def contexts() -> tuple[contextlib.AbstractContextManager[None], contextlib.AbstractContextManager[None]]:
        return contextlib.nullcontext(), _recomputation(blocks, replays)

    return checkpoint(forward, *args, use_reentrant=False, context_fn=contexts, **kwargs)


@contextlib.contextmanager
def _recomputation(blocks: list[MoEBlock], replays: list[torch.Tensor | None]) -> Iterator[None]:
    token = RECOMPUTING.set(True)
    current = [block._replay for block in blocks]
    for block, replay in zip(blocks, replays, strict=True):
        block._replay = replay
    try:
        yield
    finally:
        for block, replay in zip(blocks, current, strict=True):
            block._replay = replay
        RECOMPUTING.reset(token)
