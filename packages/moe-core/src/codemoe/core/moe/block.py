"""The MoE block: route each token to experts, run them, combine their outputs.

Parameter names and layouts match ``transformers``' MoE blocks (``gate.weight [E, H]``,
``experts.gate_up_proj [E, 2I, H]``, ``experts.down_proj [E, H, I]``; a shared expert as
``shared_expert.{gate,up,down}_proj`` with ``shared_expert_gate``), so a block drops into a
``transformers`` decoder layer in place of its ``mlp`` and checkpoints move unchanged.

Besides the output, every forward leaves behind what training and monitoring read:
``last_losses`` (balance and z losses, differentiable), device-side routing statistics, and,
inside :func:`codemoe.core.moe.capture_routing`, the chosen experts.

What the code around a forward may change is a small method API (see "state set around
forwards" in :class:`MoEBlock`): whether statistics are recorded, routing capture, routing
replay, the forward's token context (input ids, padding mask), and :meth:`MoEBlock.infer`, the
forward a generation engine's decode step calls.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from codemoe.core.moe.balance import balance_loss, expert_counts, z_loss
from codemoe.core.moe.capacity import apply_capacity, capacity
from codemoe.core.moe.experts import Experts
from codemoe.core.moe.metrics import RoutingStats
from codemoe.core.moe.routing import UNROUTED, Router, RouterOutput
from torch import nn

__all__ = ["RECOMPUTING", "MoEBlock", "MoEOptions", "SharedExpert"]

# True while activation checkpointing recomputes a forward during backward
# (codemoe.core.moe.checkpointing): the block then computes what the first pass computed (the
# recomputation must save the same tensors) but records no statistics, captures nothing and leaves
# ``last_losses`` as the first pass left them, so every token counts once.
RECOMPUTING: contextvars.ContextVar[bool] = contextvars.ContextVar("codemoe_moe_recomputing", default=False)


@dataclass
class MoEOptions:
    """Block options that are not the router or the experts themselves."""

    shared_expert_intermediate_size: int = 0  # 0: no shared expert; else its MLP width
    shared_expert_gate: bool = True  # scale the shared expert by sigmoid(w·x), as Qwen2-MoE does
    capacity_factor: float = 0.0  # 0: dropless; else at most ceil(factor·T·k/E) assignments per expert
    drop_policy: str = "weight"  # which assignments a full expert drops: 'weight' (lowest first) or 'position'
    balance_scope: str = "micro_batch"  # tokens the balance loss balances: 'micro_batch', 'sequence', 'global'
    balance_coef: float = 0.001  # weight of the balance loss in the training loss
    z_coef: float = 0.0  # weight of the router z-loss in the training loss


class SharedExpert(nn.Module):
    """A dense SwiGLU MLP every token goes through (named as ``transformers`` names its MLPs)."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEBlock(nn.Module):
    """Router + experts (+ optional shared expert); input and output ``[B, S, H]``."""

    def __init__(self, router: Router, experts: Experts, options: MoEOptions | None = None, layer: int = 0) -> None:
        super().__init__()
        self.options = options or MoEOptions()
        self.layer = layer
        self.gate = router
        self.experts = experts
        hidden = experts.hidden_dim
        if self.options.shared_expert_intermediate_size > 0:
            self.shared_expert = SharedExpert(hidden, self.options.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False) if self.options.shared_expert_gate else None
        else:
            self.shared_expert = None
            self.shared_expert_gate = None
        self.stats = RoutingStats(router.num_experts)
        self.last_losses: dict[str, torch.Tensor] = {}  # balance and z losses of the last forward (aux_losses)
        # the forward in progress's inputs (set_token_context, by the model's forward hooks)
        self._token_ids: torch.Tensor | None = None  # [B, S] input ids (hash routing)
        self._attention_mask: torch.Tensor | None = None  # [B, past + S] (padding)
        self._record_statistics = True
        self._capture: list[torch.Tensor] | None = None
        self._choices: list[torch.Tensor] | None = None  # the router's own picks, also under replay
        self._replay: torch.Tensor | None = None  # [T, k]

    @property
    def num_experts(self) -> int:
        """All routed experts of the layer (with expert parallelism, this process holds a share)."""
        return self.gate.num_experts

    # ---------------------------------------------------------------------------------------------
    # state set around forwards (between them, never inside one)
    # ---------------------------------------------------------------------------------------------

    @property
    def record_statistics(self) -> bool:
        """Whether forwards add to the routing statistics and compute the balance and z losses."""
        return self._record_statistics

    def set_record_statistics(self, record: bool) -> None:
        """Switch statistics on or off. A generation engine switches them off around its steps: its
        forwards are not training data, so a trainer sharing the policy reads its own batches only,
        and the unread losses are not computed."""
        self._record_statistics = record

    def set_token_context(self, token_ids: torch.Tensor | None, attention_mask: torch.Tensor | None) -> None:
        """The model forward's input ids (for routers that hash them) and 2-D padding mask; set
        before the decoder runs and cleared (``None, None``) after it, by the hooks
        :func:`codemoe.core.models.blocks.replace_moe_blocks` puts on the model."""
        self._token_ids, self._attention_mask = token_ids, attention_mask

    @property
    def token_context(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(token_ids, attention_mask)`` of the forward in progress; ``(None, None)`` between forwards."""
        return self._token_ids, self._attention_mask

    @property
    def capturing(self) -> bool:
        """Whether forwards record their chosen experts (:meth:`start_capture`)."""
        return self._capture is not None

    def start_capture(self) -> list[torch.Tensor]:
        """From now on every forward appends its chosen experts ``[T, k]`` to the returned list."""
        if self._capture is not None:
            raise RuntimeError(f"routing of layer {self.layer} is already being captured (nested capture_routing)")
        self._capture = []
        return self._capture

    def stop_capture(self) -> None:
        self._capture = None

    def start_choice_capture(self) -> list[torch.Tensor]:
        """From now on every forward appends ``[T, k]``: the experts this layer's router would
        choose, also while it replays given ones (then computed beside them, without gradients and
        without touching the random state), so a replayed forward can say how far the router's own
        choice has drifted from the replayed one."""
        if self._choices is not None:
            raise RuntimeError(f"the router choices of layer {self.layer} are already being captured")
        self._choices = []
        return self._choices

    def stop_choice_capture(self) -> None:
        self._choices = None

    @property
    def replaying(self) -> bool:
        """Whether forwards use given experts instead of choosing (:meth:`set_replay`)."""
        return self._replay is not None

    def set_replay(self, routes: torch.Tensor | None) -> None:
        """Route the next forwards' tokens to ``routes`` (``[T, k]`` or ``[batch, seq, k]``, row-major
        tokens) instead of choosing; None chooses again."""
        self._replay = None if routes is None else routes.reshape(-1, routes.shape[-1]).long()

    def infer(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Output ``[T, H]`` for ``x [T, H]`` and the chosen experts ``[T, k]``, without the training
        side (no losses, statistics, capture or replay): a generation engine's decode step, called
        under ``no_grad`` (the experts then use their inference kernel). ``token_ids [T]``: the
        tokens' ids, for routers that hash them. Dropless only: capacity drops depend on the whole
        batch's loads."""
        routed = self.gate(x, token_ids)
        out = self.experts(x, routed.indices, routed.weights.to(x.dtype))
        if self.shared_expert is not None:
            out = out + self._shared(x)
        return out, routed.indices

    # ---------------------------------------------------------------------------------------------
    # forward
    # ---------------------------------------------------------------------------------------------

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch_shape = hidden_states.shape[:-1]
        x = hidden_states.reshape(-1, hidden_states.shape[-1])  # [T, H]
        routed = self._route(x)
        indices, weights = routed.indices, routed.weights
        recomputed = RECOMPUTING.get()  # activation checkpointing's second pass: count nothing twice
        if self._capture is not None and not recomputed:
            self._capture.append(indices.detach().clone())
        if self._choices is not None and not recomputed:
            self._choices.append(self._own_choice(x, indices))
        mask = self._token_mask(tuple(batch_shape))
        if mask is not None:  # padding goes to no expert: it neither costs compute nor takes capacity
            indices = indices.masked_fill(~mask.unsqueeze(-1), UNROUTED)
        dropped: torch.Tensor | int = 0
        if self.options.capacity_factor > 0:
            cap = capacity(x.shape[0], indices.shape[-1], self.num_experts, self.options.capacity_factor)
            indices, weights, dropped = apply_capacity(
                indices, weights, self.num_experts, cap, self.options.drop_policy
            )
        out = self.experts(x, indices, weights.to(x.dtype))
        if self.shared_expert is not None:
            out = out + self._shared(x)
        if self._record_statistics:
            # recomputed: the same loss computation (checkpointing needs the same saved tensors),
            # but the first pass's losses stand and nothing is counted again
            self._record(routed, indices, dropped, tuple(batch_shape), mask, count=not recomputed)
        elif not recomputed:
            self.last_losses = {}
        return out.reshape(hidden_states.shape)

    def _route(self, x: torch.Tensor) -> RouterOutput:
        """The router's choice for ``x [T, H]``, or the replayed experts inside ``replay_routing``."""
        if self._replay is None:
            return self.gate(x, None if self._token_ids is None else self._token_ids.reshape(-1))
        if self._replay.shape[0] != x.shape[0]:
            raise ValueError(
                f"routing replay for MoE layer {self.layer} has {self._replay.shape[0]} token rows, "
                f"the forward has {x.shape[0]} (batch x sequence)"
            )
        return self.gate.replay(x, self._replay.to(x.device))

    def _own_choice(self, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The experts the router picks for ``x``: ``indices`` unless they were replayed."""
        if self._replay is None:
            return indices.detach().clone()
        ids = None if self._token_ids is None else self._token_ids.reshape(-1)
        with torch.no_grad(), torch.random.fork_rng(devices=[]):  # a noisy router draws from a forked stream
            return self.gate(x.detach(), ids).indices.detach()

    def _shared(self, x: torch.Tensor) -> torch.Tensor:
        shared = self.shared_expert(x)
        if self.shared_expert_gate is not None:
            shared = torch.sigmoid(self.shared_expert_gate(x)) * shared
        return shared

    def _token_mask(self, batch_shape: tuple[int, ...]) -> torch.Tensor | None:
        """``[T]`` bool, False for padding, from the model's attention mask (None without one).

        With a KV cache the mask covers past and current tokens; the current ones are its last
        ``S`` columns. No host sync: masks are applied arithmetically even when nothing is padding.
        """
        mask = self._attention_mask
        if mask is None or len(batch_shape) != 2 or mask.dim() != 2:
            return None
        batch, seq = batch_shape
        if mask.shape[0] != batch or mask.shape[1] < seq:
            return None
        return mask[:, -seq:].reshape(-1).bool()

    def _record(
        self,
        routed: RouterOutput,
        kept: torch.Tensor,
        dropped: torch.Tensor | int,
        batch_shape: tuple[int, ...],
        mask: torch.Tensor | None,
        count: bool = True,
    ) -> None:
        """Keep this forward's losses (for the trainer) and add to the routing statistics (with
        ``count`` False, compute the losses only).

        The balance loss measures the router's choices (before any capacity drop: it is the router
        that has to learn to spread them) over the real tokens; padding counts nowhere.
        """
        chosen, probs, logits = routed.indices, routed.probs, routed.logits
        if mask is not None:
            chosen = chosen.masked_fill(~mask.unsqueeze(-1), UNROUTED)
        scope = self.options.balance_scope
        if scope == "global" and not torch.is_grad_enabled():
            scope = "micro_batch"  # no collective outside training: ranks may not be in lockstep (generation)
        balance = balance_loss(probs, chosen, scope=scope, batch_shape=batch_shape, mask=mask)
        z = z_loss(logits, mask)
        if not count:
            return
        self.last_losses = {"balance": balance, "z": z}
        if self.training and torch.is_grad_enabled():
            self.gate.observe(expert_counts(chosen, self.num_experts))
        kept_counts = expert_counts(kept, self.num_experts)
        self.stats.add(probs.detach(), kept_counts, dropped, balance, z, mask)

    def extra_repr(self) -> str:
        return f"layer={self.layer}, options={self.options}"


def options_from(config: Any) -> MoEOptions:
    """The :class:`MoEOptions` fields of any config object that has them."""
    return MoEOptions(**{name: getattr(config, name) for name in MoEOptions.__dataclass_fields__})
