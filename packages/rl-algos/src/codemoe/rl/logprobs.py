"""Teacher-forced log-probs of sampled tokens under a causal LM, the same way the engine computed them.

Each row is ``prompt + completion`` right-padded, so padding only ever follows the tokens that
count and a causal model needs no attention mask or position ids. The log-prob of completion token
``t`` is read at position ``len(prompt) + t - 1``. Logits are divided by the sampling temperature,
the engine contract's convention, so trainer and engine log-probs are comparable.

Shared prompts (``share_prompts``, GRPO's shape: ``n`` rows per prompt): every distinct prompt but
its last token is run once, and its keys and values are handed to all its rows, whose forward
covers only ``last prompt token + completion``. The rows read the same keys and values they
would have computed themselves, and gradients from every row flow back into the one prompt
forward (they add up through the row index), so log-probs and policy gradients are those of the
per-row forward, for about ``1/n`` of the prompt compute. The MoE balance and z losses of the
two forwards are combined weighted by their token counts (the prompt now counts once per group).

Routing agreement (``agreement=True`` with the engine's ``routes``): the share of (position, MoE
layer) pairs the engine ran at which this forward's routers, replaying or not, pick the same set of
experts as the engine did. With replay on, it measures how far the trainer's routers have drifted
from the engine's choices (1.0: none); with it off, how often the trainer computes with other
experts than the engine sampled with.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from codemoe.core.moe import capture_choices, moe_blocks, replay_routing
from torch import Tensor

__all__ = ["TokenStats", "pack", "token_stats", "used_width"]


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def pack(prompt_ids: list[list[int]], completions: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
    """``(input_ids [B, L], positions [B, T])``: rows ``prompt + completion``, and where each
    completion token's predicting logit sits; on the completions' device."""
    b, t = completions.shape
    device = completions.device
    lengths = torch.tensor([len(p) for p in prompt_ids])
    width = int(lengths.max()) + t
    input_ids = torch.full((b, width), pad_id, dtype=torch.long, device=device)
    for i, prompt in enumerate(prompt_ids):
        p = len(prompt)
        input_ids[i, :p] = torch.tensor(prompt, dtype=torch.long)
        input_ids[i, p : p + t] = completions[i]
    positions = (lengths.unsqueeze(-1) - 1 + torch.arange(t)).to(device)  # [B, T]
    return input_ids, positions


@dataclass
class TokenStats:
    """Per-token quantities of the completions."""

    logp: Tensor  # [B, T] log pi(token)
    entropy: Tensor  # [B, T] entropy of the predictive distribution (detached)
    hidden: Tensor | None  # [B, T, H] last hidden state at the predicting positions (critics only)
    outputs: Any  # the model's raw output (MoE aux losses)
    # (positions x MoE layers where the routers chose the engine's experts, positions x layers
    # compared): with agreement=True and the engine's routes, else None
    agreement: tuple[Tensor, Tensor] | None = None


def token_stats(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    completions: Tensor,
    *,
    pad_id: int,
    temperature: float = 1.0,
    hidden: bool = False,
    routes: list[Tensor] | None = None,
    share_prompts: bool = False,
    replay: bool = True,
    agreement: bool = False,
    used: int | None = None,
) -> TokenStats:
    """Run ``model`` on prompt+completion rows and read the completion tokens' log-probs.

    With ``routes`` (per row ``[positions, layers, k]`` from the engine) the MoE layers use the
    engine's experts instead of choosing (routing replay; ``replay=False`` keeps the routes for
    ``agreement`` only). With ``share_prompts`` rows with the same prompt share one forward of it
    (see the module docstring); it applies when some prompt repeats and the model takes a
    ``transformers`` KV cache. ``agreement``: also measure the routing agreement with ``routes``.

    ``used``: only the first ``used`` completion columns are read (a batch padded to its horizon
    whose rows all end earlier, e.g. agent episodes padded to ``max_turns`` full turns); the model
    runs on those alone and the per-token results are zero past them. Exact for every column kept:
    the rows are right-padded and attention is causal, so nothing kept sees a column cut.
    """
    t = completions.shape[1]
    if used is not None and used < t:
        stats = token_stats(model, prompt_ids, completions[:, : max(used, 1)], pad_id=pad_id, temperature=temperature,
                            hidden=hidden, routes=routes, share_prompts=share_prompts, replay=replay,
                            agreement=agreement)
        return _padded(stats, t)
    input_ids, positions = pack(prompt_ids, completions, pad_id)
    table = _route_table(model, routes, input_ids.shape[1])
    lengths = torch.tensor([r.shape[0] for r in routes]) if agreement and table is not None else None
    if share_prompts and _can_share(model, prompt_ids):
        return _shared_prompt_stats(model, prompt_ids, completions, pad_id, temperature, hidden, table,
                                    replay=replay, route_lengths=lengths)
    with _replay(model, table if replay else None), _choices(model, lengths is not None) as choices:
        stats = _token_stats(model, input_ids, positions, completions, temperature, hidden)
    if lengths is not None:
        valid = torch.arange(input_ids.shape[1]) < lengths.unsqueeze(-1)  # [B, width]: positions the engine ran
        stats.agreement = _agreement(choices, table[0], [(table[1], valid, None)])
    return stats


def used_width(mask: Tensor) -> int:
    """Completion columns up to the last one any row's ``mask`` covers (what a loss reads)."""
    covered = mask.ne(0).any(0).nonzero()
    return int(covered.max()) + 1 if covered.numel() else 1


def _padded(stats: TokenStats, t: int) -> TokenStats:
    """``stats`` of the first columns, zero-padded back to ``t`` columns."""
    extra = t - stats.logp.shape[1]
    pad = torch.nn.functional.pad
    return TokenStats(
        logp=pad(stats.logp, (0, extra)),
        entropy=pad(stats.entropy, (0, extra)),
        hidden=None if stats.hidden is None else pad(stats.hidden, (0, 0, 0, extra)),
        outputs=stats.outputs,
        agreement=stats.agreement,
    )


@contextmanager
def _choices(model: torch.nn.Module, on: bool) -> Iterator[dict[int, list[Tensor]]]:
    if not on:
        yield {}
        return
    with capture_choices(model) as choices:
        yield choices


def _agreement(choices: dict[int, list[Tensor]], layers: list[int],
               forwards: list[tuple[Tensor, Tensor, Tensor | None]]) -> tuple[Tensor, Tensor]:
    """(agreeing, compared) (position, layer) pairs of the batch's rows: forward ``f``'s own choices
    per layer against ``forwards[f] = (engine experts [N, W, layers, k], valid [N, W], rows [N] or
    None)``, as sets of experts; ``rows`` counts how many of the batch's rows a forward row stands
    for (a shared prompt's forward: all rows of its group)."""
    agree = compared = None
    for f, (engine, valid, rows) in enumerate(forwards):
        valid = valid.to(engine.device)
        weight = torch.ones(valid.shape[0], dtype=torch.long, device=engine.device) if rows is None else rows.to(engine.device)
        for i, layer in enumerate(layers):
            own = choices[layer][f].view(*engine.shape[:2], -1)
            same = (own.sort(-1).values == engine[:, :, i].sort(-1).values).all(-1) & valid
            agreed, counted = (same.sum(-1) * weight).sum(), (valid.sum(-1) * weight).sum()
            agree = agreed if agree is None else agree + agreed
            compared = counted if compared is None else compared + counted
    return agree, compared


def _route_table(model: torch.nn.Module, routes: list[Tensor] | None, width: int) -> tuple[list[int], Tensor] | None:
    """(MoE layer ids, ``[B, width, layers, k]`` experts of every packed position) from the engine's
    routes; positions it never ran (the last sampled token, padding) take experts 0..k-1, which no
    log-prob read here depends on."""
    if routes is None:
        return None
    layers = [block.layer for block in moe_blocks(model)]
    k = routes[0].shape[-1]
    device = next(model.parameters()).device
    full = torch.arange(k, device=device).expand(len(routes), width, len(layers), k).clone()  # [B, L, layers, k]
    for row, route in enumerate(routes):
        route = route[:width]  # a forward of the first columns only (token_stats' ``used``)
        full[row, : route.shape[0]] = route
    return layers, full


@contextmanager
def _replay(model: torch.nn.Module, table: tuple[list[int], Tensor] | None) -> Iterator[None]:
    """Inside the block the MoE layers route the forward's ``[rows, positions]`` as ``table`` says."""
    if table is None:
        yield
        return
    layers, full = table
    with replay_routing(model, {layer: full[:, :, i, :] for i, layer in enumerate(layers)}):
        yield


def _cache_argument(model: torch.nn.Module) -> str | None:
    """The name under which ``model.forward`` takes a KV cache, or None."""
    params = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def _can_share(model: torch.nn.Module, prompt_ids: list[list[int]]) -> bool:
    distinct = {tuple(p) for p in prompt_ids}
    return (
        len(distinct) < len(prompt_ids)
        and all(len(p) >= 2 for p in prompt_ids)
        and _cache_argument(model) is not None
        and hasattr(model, "config")
        # a transformers cache keeps only the last window of a sliding-window layer (GPT-OSS)
        and not getattr(model.config, "sliding_window", None)
        # transformers' own MoE balance loss needs one padding mask over exactly the forward's tokens
        and not getattr(model.config, "output_router_logits", False)
    )


def _shared_prompt_stats(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    completions: Tensor,
    pad_id: int,
    temperature: float,
    hidden: bool,
    table: tuple[list[int], Tensor] | None,
    *,
    replay: bool = True,
    route_lengths: Tensor | None = None,
) -> TokenStats:
    """Token stats with each distinct prompt's forward run once (see the module docstring)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    index: dict[tuple[int, ...], int] = {}
    owner = torch.tensor([index.setdefault(tuple(p), len(index)) for p in prompt_ids])  # [B] distinct prompt
    distinct = [list(p) for p in index]
    first_row = torch.tensor([[tuple(p) for p in prompt_ids].index(tuple(d)) for d in distinct])  # [U]
    b, t = completions.shape
    lengths = torch.tensor([len(p) for p in distinct])  # [U]
    width = int(lengths.max()) - 1
    # the prompts but their last tokens, right-padded: [U, width]
    prefix = torch.full((len(distinct), width), pad_id, dtype=torch.long)
    for u, prompt in enumerate(distinct):
        prefix[u, : len(prompt) - 1] = torch.tensor(prompt[:-1], dtype=torch.long)
    prefix_mask = (torch.arange(width) < (lengths - 1).unsqueeze(-1)).long()  # [U, width]
    # each row: its prompt's last token, then its completion: [B, T + 1]
    last = torch.tensor([p[-1] for p in prompt_ids], dtype=torch.long)
    suffix = torch.cat([last.to(completions.device).unsqueeze(-1), completions], dim=1)
    start = lengths[owner] - 1  # [B] position of each row's first suffix token
    suffix_positions = start.unsqueeze(-1) + torch.arange(t + 1)  # [B, T + 1]
    mask = torch.cat([prefix_mask[owner], torch.ones(b, t + 1, dtype=torch.long)], dim=1)
    keep_head = _accepts_logits_to_keep(model)

    prefix_table = suffix_table = None
    if table is not None:
        layers, full = table  # [B, L, layers, k]
        prefix_table = layers, full[first_row, :width]
        gather = suffix_positions[:, :, None, None].expand(-1, -1, *full.shape[2:]).to(full.device)
        suffix_table = layers, full.gather(1, gather)

    cache_arg = _cache_argument(model)
    measure = route_lengths is not None and table is not None
    with _replay(model, prefix_table if replay else None), _choices(model, measure) as prefix_choices:
        first = model(
            input_ids=prefix.to(device),
            attention_mask=prefix_mask.to(device),
            use_cache=True,
            **({"logits_to_keep": 1} if keep_head else {}),
        )
    prefix_losses = [dict(block.last_losses) for block in moe_blocks(model)]
    rows = owner.to(device)
    prompt_cache = first.get("cache")
    if prompt_cache is None:  # transformers before 5 named it past_key_values
        prompt_cache = first.get("past_key_values")
    shared = DynamicCache(
        [(layer.keys.index_select(0, rows), layer.values.index_select(0, rows)) for layer in prompt_cache.layers]
    )
    kwargs: dict[str, Any] = {cache_arg: shared, "output_hidden_states": hidden}
    if keep_head:
        kwargs["logits_to_keep"] = torch.arange(t, device=device)  # the last input token predicts nothing read here
    with _replay(model, suffix_table if replay else None), _choices(model, measure) as suffix_choices:
        outputs = model(
            input_ids=suffix.to(device),
            attention_mask=mask.to(device),
            position_ids=suffix_positions.to(device),
            use_cache=True,
            **kwargs,
        )
    _combine_losses(model, prefix_losses, int(prefix_mask.sum()), b * (t + 1))
    logits = outputs.logits[:, :t].float() / (temperature if temperature > 0 else 1.0)  # [B, T, V]
    logprobs = torch.log_softmax(logits, dim=-1)
    logp = logprobs.gather(-1, completions.to(device).unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    last_hidden = outputs.hidden_states[-1][:, :t] if hidden else None
    stats = TokenStats(logp=logp, entropy=entropy, hidden=last_hidden, outputs=outputs)
    if measure:
        # the prefix forward holds each distinct prompt but its last token (once per prompt), the
        # suffix forward each row's last prompt token and completion
        prefix_valid = torch.arange(width) < torch.minimum(lengths - 1, route_lengths[first_row]).unsqueeze(-1)
        suffix_valid = suffix_positions < route_lengths.unsqueeze(-1)
        choices = {layer: prefix_choices[layer] + suffix_choices[layer] for layer in prefix_choices}
        group_rows = torch.bincount(owner, minlength=len(distinct))  # rows each prompt forward stands for
        stats.agreement = _agreement(choices, table[0], [(prefix_table[1], prefix_valid, group_rows),
                                                         (suffix_table[1], suffix_valid, None)])
    return stats


def _combine_losses(model: torch.nn.Module, prefix_losses: list[dict[str, Tensor]], prefix: int, suffix: int) -> None:
    """Each MoE block's balance/z losses over both forwards, weighted by their tokens."""
    for block, before in zip(moe_blocks(model), prefix_losses):
        after = block.last_losses
        if before and after:
            block.last_losses = {k: (prefix * before[k] + suffix * after[k]) / (prefix + suffix) for k in after}


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
