"""Load balancing losses: the Switch/GShard auxiliary loss and the router z-loss.

**Normalisation of the balance loss (the one convention codemoe uses everywhere).** With ``E``
experts, ``f_e`` the share of (token, expert) assignments that chose expert ``e`` (``Σ_e f_e = 1``,
detached) and ``P_e`` the mean router probability of ``e`` over the same tokens
(``Σ_e P_e = 1``, differentiable)::

    balance = E · Σ_e f_e · P_e

It is **1.0 at perfect balance for any top-k** (``f_e = P_e = 1/E``) and **E when every token and all
probability go to one expert** (top-1; with top-k the collapsed value is ``E/k``, since each token
must spread its ``k`` assignments over ``k`` different experts). Scopes say over which tokens
``f`` and ``P`` are measured:

- ``micro_batch``: the tokens of this forward;
- ``sequence``: each sequence on its own, then the mean over sequences (stricter: balance within
  every sequence);
- ``global``: ``f`` is summed over the data-parallel group before normalising, so every rank sees
  the global-batch load; the loss stays 1.0 at balance for any world size (averaging shares, never
  summing per-rank losses).

The z-loss (ST-MoE) is ``mean_t logsumexp(logits_t)²``: it keeps router logits small so the
softmax stays in fp32's comfortable range.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["BALANCE_SCOPES", "assignment_counts", "balance_loss", "expert_counts", "z_loss"]


def expert_counts(indices: torch.Tensor, num_experts: int, groups: int = 1) -> torch.Tensor:
    """Assignments per expert (float) from ``indices``; negative slots count nowhere.

    With ``groups`` G, the leading dimension of ``indices`` is split into G equal groups (the
    sequences of a batch) and the result is ``[G, E]``; otherwise ``[E]``.
    """
    flat = indices.reshape(groups, -1)  # [G, T/G · k]
    group = torch.arange(groups, device=indices.device).unsqueeze(-1) * (num_experts + 1)
    keys = torch.where(flat < 0, num_experts, flat) + group  # unrouted slots go to a spare bin per group
    counts = torch.bincount(keys.reshape(-1), minlength=groups * (num_experts + 1)).view(groups, num_experts + 1)
    counts = counts[:, :num_experts].float()
    return counts if groups > 1 else counts[0]


def assignment_counts(indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Assignments per expert ``[..., E]`` (float) for each row of ``indices [..., k]``; negative slots count nowhere."""
    rows = indices.reshape(-1, indices.shape[-1]).shape[0]
    return expert_counts(indices, num_experts, groups=rows).view(*indices.shape[:-1], num_experts)


def _loss(counts: torch.Tensor, probs_mean: torch.Tensor) -> torch.Tensor:
    # counts: [..., E] detached; probs_mean: [..., E]
    num_experts = counts.shape[-1]
    shares = counts / counts.sum(-1, keepdim=True).clamp(min=1.0)
    return num_experts * (shares * probs_mean).sum(-1)


def _mean_probs(probs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # probs: [..., T, E]; weight: [..., T] (1 for real tokens, 0 for padding)
    total = (probs * weight.unsqueeze(-1)).sum(-2)
    return total / weight.sum(-1, keepdim=True).clamp(min=1.0)


def _micro_batch(
    probs: torch.Tensor, indices: torch.Tensor, batch_shape: tuple[int, ...], weight: torch.Tensor
) -> torch.Tensor:
    return _loss(expert_counts(indices, probs.shape[-1]), _mean_probs(probs, weight))


def _sequence(
    probs: torch.Tensor, indices: torch.Tensor, batch_shape: tuple[int, ...], weight: torch.Tensor
) -> torch.Tensor:
    batch = batch_shape[0] if len(batch_shape) > 1 else 1
    num_experts = probs.shape[-1]
    counts = expert_counts(indices, num_experts, groups=batch)
    if batch == 1:
        counts = counts.unsqueeze(0)
    weight = weight.view(batch, -1)
    per_sequence = _loss(counts, _mean_probs(probs.view(batch, -1, num_experts), weight))
    present = (weight.sum(-1) > 0).float()  # sequences that are all padding do not count
    return (per_sequence * present).sum() / present.sum().clamp(min=1.0)


def _global(
    probs: torch.Tensor, indices: torch.Tensor, batch_shape: tuple[int, ...], weight: torch.Tensor
) -> torch.Tensor:
    counts = expert_counts(indices, probs.shape[-1])
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(counts)
    return _loss(counts, _mean_probs(probs, weight))


BALANCE_SCOPES: dict[str, Callable[[torch.Tensor, torch.Tensor, tuple[int, ...], torch.Tensor], torch.Tensor]] = {
    "micro_batch": _micro_batch,
    "sequence": _sequence,
    "global": _global,
}


def balance_loss(
    probs: torch.Tensor,
    indices: torch.Tensor,
    *,
    scope: str = "micro_batch",
    batch_shape: tuple[int, ...] = (),
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The balance loss (normalised as in the module docstring) of one layer's routing.

    ``probs [T, E]`` router probabilities, ``indices [T, k]`` chosen experts, ``batch_shape`` the
    ``(batch, seq)`` the ``T`` tokens came from (the ``sequence`` scope needs it), ``mask [T]``
    False for padding: padded tokens count in neither ``f`` nor ``P``.
    """
    try:
        fn = BALANCE_SCOPES[scope]
    except KeyError:
        raise ValueError(f"unknown balance scope '{scope}': choose one of {', '.join(BALANCE_SCOPES)}") from None
    if mask is None:
        weight = torch.ones(probs.shape[0], dtype=probs.dtype, device=probs.device)
    else:
        weight = mask.to(probs.dtype)
        indices = indices.masked_fill(~mask.bool().unsqueeze(-1), -1)
    return fn(probs, indices, batch_shape, weight)


def z_loss(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Router z-loss ``mean_t logsumexp(logits_t)²`` of ``logits [T, E]`` over the tokens ``mask [T]`` keeps."""
    per_token = torch.logsumexp(logits.float(), dim=-1).square()
    if mask is None:
        return per_token.mean()
    weight = mask.to(per_token.dtype)
    return (per_token * weight).sum() / weight.sum().clamp(min=1.0)
