"""Recording which experts a codemoe MoE model chose, per forward pass.

Only models built from codemoe MoE blocks report routing (``codemoe.core.moe.capture_routing``);
for any other model there is no recorder and samples carry ``routing=None``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["RoutingRecorder"]


class RoutingRecorder:
    """``with recorder.forward(): model(...)``, then ``recorder.last`` is ``[T, moe_layers, k]`` int32."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.last: torch.Tensor | None = None

    @staticmethod
    def for_model(model: torch.nn.Module) -> RoutingRecorder | None:
        """A recorder when the model has codemoe MoE blocks, else None."""
        from codemoe.core.moe import moe_blocks

        return RoutingRecorder(model) if any(True for _ in moe_blocks(model)) else None

    @contextmanager
    def forward(self) -> Iterator[None]:
        from codemoe.core.moe import capture_routing

        with capture_routing(self.model) as record:
            yield
        (layers,) = record.forwards  # one model call inside the block
        # layers: {decoder layer index: [T, k]}, T = batch x sequence in row-major order
        self.last = torch.stack([layers[i] for i in sorted(layers)], dim=1).to(torch.int32)
