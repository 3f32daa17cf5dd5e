"""Expert implementations: the same weights, computed in different ways.

Every implementation stores the experts as ``transformers`` 5 does, so weights move between the
two unchanged:

- ``gate_up_proj [E, 2I, H]``: the gate projection (rows ``:I``) and up projection (rows ``I:``)
  fused;
- ``down_proj [E, H, I]``;

and computes the SwiGLU MLP ``down(act(gate(x)) * up(x))`` of each chosen expert, weighted by the
router. ``loop`` is the reference (one masked pass per expert, easy to check by eye); ``grouped``
sorts the assignments by expert through a dispatcher and runs grouped matmuls with a hand-written
backward, which is what training uses. Kernels for accelerators register more implementations
under kind ``experts``; their factories are called as
``factory(config, registry=..., num_experts=E, hidden_size=H, intermediate_size=I)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from codemoe.core.moe.dispatch import LocalDispatcher
from torch import nn

__all__ = ["Experts", "GroupedExperts", "GroupedExpertsConfig", "LoopExperts", "LoopExpertsConfig"]


class Experts(nn.Module):
    """Base class: the expert weights in the ``transformers`` layout, and the activation."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, hidden_act: str = "silu") -> None:
        super().__init__()
        self.num_experts = num_experts
        self.hidden_dim = hidden_size
        self.intermediate_dim = intermediate_size
        self.hidden_act = hidden_act
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))

    def forward(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Mix of the chosen experts' outputs ``[T, H]`` for tokens ``x [T, H]``.

        ``indices [T, k]`` are expert ids (negative: the slot routes nowhere), ``weights [T, k]``
        their combine weights.
        """
        raise NotImplementedError


def _activation(name: str):
    from transformers.activations import ACT2FN

    return ACT2FN[name]


# ---------------------------------------------------------------------------------------------
# reference: one masked pass per expert
# ---------------------------------------------------------------------------------------------


@dataclass
class LoopExpertsConfig:
    """The reference loop has no options."""


class LoopExperts(Experts):
    """Reference implementation: for each expert, pick its tokens with a mask and run its MLP."""

    def forward(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        # x: [T, H]; indices, weights: [T, k]
        act = _activation(self.hidden_act)
        out = torch.zeros_like(x)
        for e in range(self.num_experts):
            token, slot = torch.where(indices == e)
            if token.numel() == 0:
                continue
            gate, up = F.linear(x[token], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(act(gate) * up, self.down_proj[e])
            out = out.index_add(0, token, y * weights[token, slot, None].to(y.dtype))
        return out


def build_loop_experts(config: LoopExpertsConfig, *, registry: Any = None, **shape: Any) -> LoopExperts:
    """Reference experts: one masked pass per expert (for tests)."""
    return LoopExperts(**shape)


# ---------------------------------------------------------------------------------------------
# grouped: dispatch, grouped matmuls with a fused SwiGLU backward, combine
# ---------------------------------------------------------------------------------------------


def _segments(counts: list[int]):
    """(expert, row slice) for every expert that has rows."""
    start = 0
    for e, n in enumerate(counts):
        if n:
            yield e, slice(start, start + n)
        start += n


class _GroupedSwiGLU(torch.autograd.Function):
    """``down_e(silu(gate_e(x)) * up_e(x))`` for rows grouped by expert, with a hand-written backward.

    Autograd over per-expert slices would record hundreds of small nodes and keep every
    intermediate; here forward keeps only the projections ``h [S, 2I]`` and the activations
    ``a [S, I]``, and backward writes each expert's gradient in place with one matmul per tensor.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, counts: list[int]) -> torch.Tensor:
        # x: [S, H]; gate_up: [E, 2I, H]; down: [E, H, I]
        inter = down.shape[-1]
        h = x.new_empty(x.shape[0], 2 * inter)
        y = x.new_empty(x.shape[0], down.shape[1])
        for e, rows in _segments(counts):
            torch.mm(x[rows], gate_up[e].t(), out=h[rows])
        gate, up = h[:, :inter], h[:, inter:]
        sig = torch.sigmoid(gate)
        a = gate * sig * up
        for e, rows in _segments(counts):
            torch.mm(a[rows], down[e].t(), out=y[rows])
        ctx.save_for_backward(x, gate_up, down, h, sig, a)
        ctx.counts = counts
        return y

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, gate_up, down, h, sig, a = ctx.saved_tensors
        counts = ctx.counts
        inter = down.shape[-1]
        grad_y = grad_y.contiguous()
        grad_a = torch.empty_like(a)
        grad_down = torch.zeros_like(down)
        for e, rows in _segments(counts):
            torch.mm(grad_y[rows], down[e], out=grad_a[rows])
            torch.mm(grad_y[rows].t(), a[rows], out=grad_down[e])
        gate, up = h[:, :inter], h[:, inter:]
        grad_h = torch.empty_like(h)
        # d silu(g)/dg = sig * (1 + g * (1 - sig))
        torch.mul(grad_a, gate * sig, out=grad_h[:, inter:])
        torch.mul(grad_a * up, sig * (1 + gate * (1 - sig)), out=grad_h[:, :inter])
        grad_x = torch.zeros_like(x)
        grad_gate_up = torch.zeros_like(gate_up)
        for e, rows in _segments(counts):
            torch.mm(grad_h[rows], gate_up[e], out=grad_x[rows])
            torch.mm(grad_h[rows].t(), x[rows], out=grad_gate_up[e])
        return grad_x, grad_gate_up, grad_down, None


@dataclass
class GroupedExpertsConfig:
    """Options of the grouped experts."""

    dispatcher: dict[str, Any] = field(default_factory=lambda: {"name": "local"}, metadata={"kind": "dispatcher"})
    # how assignments reach the experts: 'local' sorts them in-process; expert parallelism plugs in here


class GroupedExperts(Experts):
    """Fast experts: dispatch rows by expert, run grouped matmuls, combine (any load, empty experts too)."""

    def __init__(self, *args: Any, dispatcher: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.hidden_act != "silu":
            raise ValueError(f"grouped experts implement the SwiGLU MLP (hidden_act='silu'), got '{self.hidden_act}'")
        self.dispatcher = dispatcher or LocalDispatcher()

    def forward(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        # x: [T, H]; indices, weights: [T, k]
        dispatched = self.dispatcher.dispatch(x, indices, weights, self.num_experts)
        y = _GroupedSwiGLU.apply(dispatched.tokens, self.gate_up_proj, self.down_proj, dispatched.counts)
        return self.dispatcher.combine(y, dispatched, x.shape[0])


def build_grouped_experts(config: GroupedExpertsConfig, *, registry: Any = None, **shape: Any) -> GroupedExperts:
    """Grouped experts: sort by expert, grouped matmuls with a fused SwiGLU backward, unsort."""
    dispatcher = None
    if registry is not None:
        dispatcher = registry.build("dispatcher", config.dispatcher, where="experts.dispatcher")
    return GroupedExperts(**shape, dispatcher=dispatcher)


def build_local_dispatcher(config: Any) -> LocalDispatcher:
    """Sort (token, expert) assignments by expert within one process."""
    return LocalDispatcher(config)
