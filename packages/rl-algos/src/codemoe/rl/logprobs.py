"""Teacher-forced log-probs of sampled tokens under a causal LM, the same way the engine computed them.

Each row is ``prompt + completion`` right-padded, so padding only ever follows the tokens that
count and a causal model needs no attention mask or position ids. The log-prob of completion token
``t`` is read at position ``len(prompt) + t - 1``. Logits are divided by the sampling temperature,
the engine contract's convention, so trainer and engine log-probs are comparable.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from codemoe.core.moe import moe_blocks, replay_routing
from torch import Tensor

__all__ = ["TokenStats", "pack", "token_stats"]


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def pack(prompt_ids: list[list[int]], completions: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
    """``(input_ids [B, L], positions [B, T])``: rows ``prompt + completion``, and where each
    completion token's predicting logit sits."""
    b, t = completions.shape
    lengths = torch.tensor([len(p) for p in prompt_ids])
    width = int(lengths.max()) + t
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    for i, prompt in enumerate(prompt_ids):
        p = len(prompt)
        input_ids[i, :p] = torch.tensor(prompt, dtype=torch.long)
        input_ids[i, p : p + t] = completions[i]
    positions = lengths.unsqueeze(-1) - 1 + torch.arange(t)  # [B, T]
    return input_ids, positions


@dataclass
class TokenStats:
    """Per-token quantities of the completions."""

    logp: Tensor  # [B, T] log pi(token)
    entropy: Tensor  # [B, T] entropy of the predictive distribution (detached)
    hidden: Tensor | None  # [B, T, H] last hidden state at the predicting positions (critics only)
    outputs: Any  # the model's raw output (MoE aux losses)


def token_stats(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    completions: Tensor,
    *,
    pad_id: int,
    temperature: float = 1.0,
    hidden: bool = False,
    routes: list[Tensor] | None = None,
) -> TokenStats:
    """Run ``model`` on prompt+completion rows and read the completion tokens' log-probs.

    With ``routes`` (per row ``[positions, layers, k]`` from the engine) the MoE layers use the
    engine's experts instead of choosing (routing replay).
    """
    input_ids, positions = pack(prompt_ids, completions, pad_id)
    with _replay(model, routes, input_ids.shape[1]):
        return _token_stats(model, input_ids, positions, completions, temperature, hidden)


@contextmanager
def _replay(model: torch.nn.Module, routes: list[Tensor] | None, width: int) -> Iterator[None]:
    """Route every position of the packed rows as the engine did; positions it never ran (the
    last sampled token, padding) take experts 0..k-1, which no log-prob read here depends on."""
    if routes is None:
        yield
        return
    layers = [block.layer for block in moe_blocks(model)]
    k = routes[0].shape[-1]
    full = torch.arange(k).expand(len(routes), width, len(layers), k).clone()  # [B, L, layers, k]
    for row, route in enumerate(routes):
        full[row, : route.shape[0]] = route
    with replay_routing(model, {layer: full[:, :, i, :] for i, layer in enumerate(layers)}):
        yield


def _token_stats(
    model: torch.nn.Module,
    input_ids: Tensor,
    positions: Tensor,
    completions: Tensor,
    temperature: float,
    hidden: bool,
) -> TokenStats:
    device = next(model.parameters()).device
    kwargs: dict[str, Any] = {"output_hidden_states": hidden}
    first = int(positions.min())
    if _accepts_logits_to_keep(model):
        # The head runs only on the span that holds completion positions, not on every prompt token.
        kwargs["logits_to_keep"] = torch.arange(first, int(positions.max()) + 1, device=device)
    else:
        first = 0
    outputs = model(input_ids=input_ids.to(device), **kwargs)
    index = positions.to(device)
    span = (index - first).unsqueeze(-1).expand(-1, -1, outputs.logits.shape[-1])
    logits = outputs.logits.gather(1, span)
    logits = logits.float() / (temperature if temperature > 0 else 1.0)  # [B, T, V]
    logprobs = torch.log_softmax(logits, dim=-1)
    logp = logprobs.gather(-1, completions.to(device).unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    last_hidden = None
    if hidden:
        states = outputs.hidden_states[-1]
        last_hidden = states.gather(1, index.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
    return TokenStats(logp=logp, entropy=entropy, hidden=last_hidden, outputs=outputs)
