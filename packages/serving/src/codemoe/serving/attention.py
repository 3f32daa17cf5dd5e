"""Shared-prefix decode attention: each prompt's keys are read once for all its samples.

Registered with ``transformers`` as the attention implementation ``codemoe_shared_prefix`` and
switched on only around the engine's own forward passes. In a decode step the queries of a
group's samples are stacked into one matrix and attend to the group's prompt in one product,
each row also attends to its own generated tokens, and the two softmax parts are merged exactly
through their log-sum-exps (the split-softmax identity used by cascade / shared-prefix attention).
Groups whose prompts differ in length are read in runs of neighbouring prefix slots, each run up to
its own longest prompt and as many members deep as its largest group (:func:`key_runs`), not all
up to the longest prompt and the largest group.

A prefill packs every prompt's new tokens into one row (no padding for the projections and experts
to compute) and its attention is computed prompt by prompt the same way: the new tokens against the
tokens reused from an earlier turn, already in the prompt's slot (every key visible, one product),
and causally against themselves, merged through their log-sum-exps; no prompt reads another's
padding or length (an agent's next turn: the history is in the cache, only the reply is new).
Every other call (training) is ``transformers``' SDPA attention unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from codemoe.serving.kv_cache import PrefixKVCache

__all__ = [
    "ATTENTION_NAME",
    "attend_with_lse",
    "decode_attention",
    "key_runs",
    "prefill_attention",
    "shared_prefix_attention",
    "sliding_window_layers",
    "supports_shared_prefix_attention",
    "unshared_reason",
]

ATTENTION_NAME = "codemoe_shared_prefix"
_ACTIVE: ContextVar[PrefixKVCache | None] = ContextVar("codemoe_active_cache", default=None)


def attend_with_lse(
    query, key, value, mask, scale: float, causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its log-sum-exp: query ``[N, H, Q, D]``, key/value ``[N, H, K, D]``,
    additive mask ``[N, 1, 1, K]`` or None (every key visible), ``causal``: query ``i`` sees keys
    ``0 .. i`` (``Q == K``) -> (out ``[N, H, Q, D]``, lse ``[N, H, Q]`` fp32)."""
    if query.device.type == "cpu" and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, causal, attn_mask=None if mask is None else mask.to(query.dtype), scale=scale
        )
        return out, lse.float()
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask.float()
    if causal:
        hidden = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse[..., None]), value.float()).to(query.dtype)
    return out, lse


def _shared_prefix_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cache = _ACTIVE.get()
    plan = None if cache is None else cache.plan
    if plan is None or kwargs.get("softcap") is not None or not (plan.decoding or plan.prefill_rows):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if not plan.decoding:
        return prefill_attention(query, key, value, cache, module.layer_idx, scaling), None
    return decode_attention(query, cache, module.layer_idx, scaling), None


def prefill_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cache: PrefixKVCache, layer: int, scaling: float | None
) -> torch.Tensor:
    """A packed prefill, prompt by prompt: ``query [1, Hq, T, D]`` and ``key``/``value [1, Hkv, T,
    D]`` hold the prompts' new tokens one after the other (``cache.plan.prefill_rows[r] = (slot,
    reused, new)``: ``new`` tokens after the ``reused`` ones prefix ``slot`` already holds). Each
    prompt's queries attend to its reused tokens (all visible: the query heads sharing a key head
    stacked into one block) and causally to its own new keys, and the two parts are merged through
    their log-sum-exps. Returns ``[1, T, Hq, D]``."""
    heads, total, dim = query.shape[1:]
    kv_heads, value_dim = key.shape[1], value.shape[-1]
    per_kv = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    pk, pv = cache.prefix[layer]
    out = query.new_empty(1, total, heads, value_dim)
    start = 0
    for slot, reused, new in cache.plan.prefill_rows:
        span = slice(start, start + new)
        start += new
        q = query[0, :, span].reshape(kv_heads, per_kv, new, dim)  # the heads sharing a key head as a batch
        own = (t[0, :, span, None].transpose(1, 2).expand(-1, per_kv, -1, -1) for t in (key, value))
        o, lse = attend_with_lse(q, *own, None, scale, causal=True)  # [Hkv, g, n, Dv], [Hkv, g, n]
        if reused:
            o_pre, lse_pre = attend_with_lse(
                q.reshape(1, kv_heads, per_kv * new, dim), pk[slot : slot + 1, :, :reused],
                pv[slot : slot + 1, :, :reused], None, scale,
            )
            o = _merge([(o, lse), (o_pre.view(kv_heads, per_kv, new, value_dim), lse_pre.view(kv_heads, per_kv, new))])
        out[0, span] = o.reshape(heads, new, value_dim).transpose(0, 1)
    return out


def decode_attention(query: torch.Tensor, cache: PrefixKVCache, layer: int, scaling: float | None) -> torch.Tensor:
    """One decode step's attention for ``query [B, Hq, 1, D]`` over its group's prompt and its own
    tokens in ``cache`` (the plan in progress); returns ``[B, 1, Hq, D]``."""
    plan = cache.plan
    batch, heads, _, dim = query.shape  # query: [B, Hq, 1, D]
    groups = plan.prefix_mask.shape[0]
    scale = scaling if scaling is not None else dim**-0.5
    pk, pv, sk, sv = cache.layer_views(layer, groups, batch)
    kv_heads = pk.shape[1]
    per_kv = heads // kv_heads
    q = query.reshape(batch, kv_heads, per_kv, dim)  # the query heads sharing one key/value head
    # own tokens: each row's queries against its suffix
    out_own, lse_own = attend_with_lse(q, sk, sv, plan.suffix_mask, scale)  # [B, Hkv, g, D], [B, Hkv, g]
    # the prompt: all rows of a group as one query block
    out_pre, lse_pre = _block_attention(
        q, pk, pv, plan.prefix_mask, scale, plan.row_group, plan.row_member, plan.members, plan.in_group_order,
        runs=plan.prefix_runs,
    )
    parts = [(out_pre, lse_pre), (out_own, lse_own)]
    if plan.root_mask is not None:
        parts.append(_root_part(q, cache, layer, scale))
    return _merge(parts).reshape(batch, 1, heads, dim)


def _merge(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Softmax attention over all the keys from its parts over disjoint key sets ``(out, lse)``:
    the partial softmaxes weighted by their mass."""
    lse = parts[0][1]
    for _, part_lse in parts[1:]:
        lse = torch.logaddexp(lse, part_lse)
    return sum(part * torch.exp(part_lse - lse)[..., None].to(part.dtype) for part, part_lse in parts)


def key_runs(lengths: list[int], members: list[int], call_keys: int) -> list[tuple[int, int, int, int]]:
    """Split blocks ``0 .. n-1`` (kept in their order: reads stay views) into runs ``(first, end,
    keys, rows)``: each run's blocks read up to the longest ``lengths`` of the run, with query blocks
    of its largest ``members`` count (``rows``), at the least cost. A run costs its blocks x keys x
    rows (padding included) plus ``call_keys`` (what one more attention call costs, in keys of a
    one-member block). Dynamic programming over where runs end; the scan back from each end stops
    once the run alone costs more than the best split found."""
    n = len(lengths)
    best = [0.0] + [math.inf] * n  # best[j]: the least cost of blocks 0 .. j-1
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = most = 0
        for i in range(j - 1, -1, -1):  # the run i .. j-1
            longest, most = max(longest, lengths[i]), max(most, members[i])
            alone = (j - i) * longest * most + call_keys
            if alone >= best[j]:
                break
            if best[i] + alone < best[j]:
                best[j], start[j] = best[i] + alone, i
    runs, j = [], n
    while j > 0:
        i = start[j]
        runs.append((i, j, max(lengths[i:j]), max(members[i:j])))
        j = i
    return runs[::-1]


def _block_attention(
    q, keys, values, mask, scale: float, block, member, members: int, in_order: bool, rows=None, runs=None
):
    """Rows' attention to keys they share: row ``r`` of ``q [B, Hkv, g, D]`` (or of ``q[rows]``) is
    member ``member[r]`` of block ``block[r]``, and each block's rows are one query block against its
    keys ``[N, Hkv, K, D]`` (masked by ``mask [N, 1, 1, K]``), so a block's keys are read once.
    ``in_order``: the rows already are the blocks in turn, each with all its members (views, not a
    scatter). ``runs`` ``[(first, end, keys, rows)]``: the blocks in runs, each run's keys read only
    up to its ``keys`` and its query blocks only ``rows`` members deep (one attention call a run;
    None: one call, up to ``K``, ``members`` deep). Returns (out ``[B', Hkv, g, D]``, lse ``[B', Hkv,
    g]``) in row order."""
    count, (kv_heads, per_kv, dim) = keys.shape[0], q.shape[1:]
    if in_order:
        stacked = q.reshape(count, members, kv_heads, per_kv, dim)
    else:
        stacked = q.new_zeros(count, members, kv_heads, per_kv, dim)
        stacked[block, member] = q if rows is None else q[rows]
    if runs:
        out = q.new_empty(count, kv_heads, members, per_kv, values.shape[-1])  # members past a block's: never read
        lse = torch.empty(count, kv_heads, members, per_kv, device=q.device)
        for b0, b1, k, m in runs:
            if m == 0:  # blocks no running row reads
                continue
            part = stacked[b0:b1, :m].permute(0, 2, 1, 3, 4).reshape(b1 - b0, kv_heads, m * per_kv, dim)
            o, lse_run = attend_with_lse(part, keys[b0:b1, :, :k], values[b0:b1, :, :k], mask[b0:b1, ..., :k], scale)
            out[b0:b1, :, :m] = o.view(b1 - b0, kv_heads, m, per_kv, -1)
            lse[b0:b1, :, :m] = lse_run.view(b1 - b0, kv_heads, m, per_kv)
    else:
        stacked = stacked.permute(0, 2, 1, 3, 4).reshape(count, kv_heads, members * per_kv, dim)
        out, lse = attend_with_lse(stacked, keys, values, mask, scale)
        out = out.reshape(count, kv_heads, members, per_kv, -1)
        lse = lse.reshape(count, kv_heads, members, per_kv)
    if in_order:
        return out.permute(0, 2, 1, 3, 4).reshape(-1, kv_heads, per_kv, out.shape[-1]), lse.permute(
            0, 2, 1, 3
        ).reshape(-1, kv_heads, per_kv)
    return out[block, :, member], lse[block, :, member]


def _root_part(q: torch.Tensor, cache: PrefixKVCache, layer: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' attention to their roots, each root's rows one query block like a group's prompt:
    (out ``[B, Hkv, g, D]``, lse ``[B, Hkv, g]``; 0 and -inf for rows without a root)."""
    plan = cache.plan
    rk, rv = cache.root_views(layer)
    out, lse = _block_attention(
        q,
        rk,
        rv,
        plan.root_mask,
        scale,
        plan.row_root,
        plan.root_member,
        plan.root_members,
        plan.roots_in_order,
        plan.root_rows,
        runs=plan.root_runs,
    )
    if plan.root_rows is None:
        return out, lse
    full_out = q.new_zeros(q.shape)
    full_lse = torch.full(q.shape[:-1], float("-inf"), dtype=lse.dtype, device=q.device)
    full_out[plan.root_rows], full_lse[plan.root_rows] = out, lse
    return full_out, full_lse


def supports_shared_prefix_attention(model: torch.nn.Module) -> bool:
    """True when the model dispatches attention through ``transformers``' AttentionInterface and its
    attention is plain softmax attention over the per-head keys and values it caches.

    Other models are served by gathering each row's keys into one sequence for the model's own
    attention (:attr:`codemoe.serving.kv_cache.StepPlan.gather`); see :func:`unshared_reason`.
    """
    check = getattr(model, "_can_set_attn_implementation", None)
    dispatches = bool(check and check()) and hasattr(getattr(model, "config", None), "_attn_implementation")
    return dispatches and unshared_reason(model) is None


def unshared_reason(model: torch.nn.Module) -> str | None:
    """Why the shared-prefix attention cannot compute ``model``'s attention (None when it can):

    - attention sinks (GPT-OSS): a per-head logit in every softmax's denominator;
    - sliding-window layers (GPT-OSS, Mixtral or Qwen with a window): keys beyond the window are
      masked per query position, which the model's own attention does with the engine's masks;
    - latent keys and values (DeepSeek's MLA): the cache holds a compressed latent that the model
      expands into per-head keys and values after reading it.
    """
    config = getattr(model, "config", None)
    if any(isinstance(getattr(m, "sinks", None), torch.Tensor) for m in model.modules()):
        return "attention sinks"
    if sliding_window_layers(config):
        return "sliding-window attention"
    if getattr(config, "kv_lora_rank", None):
        return "latent (MLA) keys and values"
    return None


def sliding_window_layers(config: object) -> dict[str, int] | None:
    """The window of each layer type that has one, as ``transformers`` masks it: ``{"sliding_attention":
    W}`` for models with per-layer ``layer_types``, ``{"*": W}`` for a window on every layer (Mixtral's
    ``sliding_window``); None without windows. A query at position ``q`` sees keys ``k`` with
    ``q - W < k <= q``."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is None:
        return {"*": int(window)}
    return {"sliding_attention": int(window)} if "sliding_attention" in layer_types else None


@contextmanager
def shared_prefix_attention(model: torch.nn.Module, cache: PrefixKVCache, enabled: bool) -> Iterator[None]:
    """Within the block, the model's attention reads ``cache`` through the shared-prefix path."""
    if not enabled:
        yield
        return
    from transformers import AttentionInterface

    if ATTENTION_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION_NAME, _shared_prefix_forward)
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    token = _ACTIVE.set(cache)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        config._attn_implementation = previous
