"""Recording which experts each token went to, for routing replay.

The serving engine records the routing of every sampled token so that the trainer can replay
the same experts when it recomputes log-probs (routers drift between sampling and update).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from codemoe.core.moe.readout import moe_blocks
from torch import nn

__all__ = ["RoutingRecord", "capture_choices", "capture_routing", "replay_routing"]


@dataclass
class RoutingRecord:
    """Chosen experts per forward and MoE layer.

    ``forwards[f][layer]`` is an int64 tensor ``[T, k]`` for forward ``f``, where ``T = batch · seq``
    of that forward in row-major order (with a KV cache: the prompt, then one row per sampled
    token per sequence) and ``layer`` is the decoder layer index. Negative entries are slots that
    routed nowhere (dropped by a capacity limit).
    """

    forwards: list[dict[int, torch.Tensor]] = field(default_factory=list)

    def layer(self, layer: int) -> torch.Tensor:
        """All forwards of one layer concatenated along tokens: ``[sum T, k]``."""
        return torch.cat([f[layer] for f in self.forwards], dim=0)

    def sequences(self, layer: int, batch: int) -> torch.Tensor:
        """One layer's routing as ``[batch, seq, k]``, forwards joined along the sequence.

        For a ``generate`` call: the prompt forward, then one forward per new token. The last
        sampled token is never fed back, so ``seq`` is prompt + new tokens - 1: replay a forward
        over ``sequences[:, :-1]`` (which is also all a log-prob recompute needs).
        """
        parts = [f[layer].view(batch, -1, f[layer].shape[-1]) for f in self.forwards]
        return torch.cat(parts, dim=1)

    def clear(self) -> None:
        self.forwards.clear()


@contextmanager
def capture_routing(model: nn.Module) -> Iterator[RoutingRecord]:
    """Record the chosen experts of every forward of ``model`` inside the block.

    >>> with capture_routing(model) as record:  # doctest: +SKIP
    ...     model(input_ids)
    >>> record.forwards[0][0].shape  # doctest: +SKIP
    torch.Size([T, k])
    """
    blocks = list(moe_blocks(model))
    record = RoutingRecord()
    buffers: dict[int, list[torch.Tensor]] = {}
    for block in blocks:
        buffers[block.layer] = block.start_capture()

    def collect() -> None:
        while any(buffers.values()):
            record.forwards.append({layer: buf.pop(0) for layer, buf in buffers.items() if buf})

    hook = model.register_forward_hook(lambda *_: collect())
    try:
        yield record
    finally:
        hook.remove()
        collect()
        for block in blocks:
            block.stop_capture()


@contextmanager
def capture_choices(model: nn.Module) -> Iterator[dict[int, list[torch.Tensor]]]:
    """Inside the block, each MoE layer's router's own choice ``[T, k]`` per forward, by layer:
    what it picks, or under :func:`replay_routing` what it would have picked (routing agreement)."""
    blocks = list(moe_blocks(model))
    choices = {block.layer: block.start_choice_capture() for block in blocks}
    try:
        yield choices
    finally:
        for block in blocks:
            block.stop_choice_capture()


@contextmanager
def replay_routing(model: nn.Module, routes: Mapping[int, torch.Tensor]) -> Iterator[None]:
    """Inside the block, MoE layer ``l`` sends its tokens to ``routes[l]`` instead of choosing.

    ``routes[l]`` is ``[T, k]`` (or ``[batch, seq, k]``) for every forward inside the block, in
    the row-major token order of :class:`RoutingRecord`. The router's current logits still weigh
    the given experts, so the recomputed log-probs match the sampled ones and the router gets
    gradients. Layers missing from ``routes`` choose as usual.
    """
    blocks = [block for block in moe_blocks(model) if block.layer in routes]
    for block in blocks:
        block.set_replay(routes[block.layer])
    try:
        yield
    finally:
        for block in blocks:
            block.set_replay(None)
