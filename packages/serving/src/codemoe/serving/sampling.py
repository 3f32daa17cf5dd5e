"""Next-token sampling that does not depend on how requests are batched.

Every sample owns a random stream keyed by (seed, prompt index, sample index); the uniform number
for its ``t``-th token is a hash of (key, t). A token is drawn by inverse-CDF sampling with that
single number, so a sample is the same whether it shares a batch, a prefix cache, or runs alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from codemoe.core.contracts import SamplingParams

__all__ = ["draw", "sample_key", "sample_next", "uniform"]

_MASK64 = (1 << 64) - 1
_C1, _C2, _GOLDEN = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0x9E3779B97F4A7C15


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def _mix(x: int) -> int:
    """splitmix64's finaliser on Python ints."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _C1) & _MASK64
    x = ((x ^ (x >> 27)) * _C2) & _MASK64
    return x ^ (x >> 31)


def sample_key(seed: int, prompt_index: int, sample_index: int) -> int:
    """The stream key of one sample, as a signed int64."""
    return _signed(_mix(_mix(_mix(seed) ^ prompt_index) + _GOLDEN * (sample_index + 1)))


def _lshr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 tensors (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix_tensor(x: torch.Tensor) -> torch.Tensor:
    # int64 multiplication wraps modulo 2**64, which is what splitmix64 needs.
    x = (x ^ _lshr(x, 30)) * _signed(_C1)
    x = (x ^ _lshr(x, 27)) * _signed(_C2)
    return x ^ _lshr(x, 31)


def uniform(keys: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One float64 in [0, 1) per row: ``keys``/``steps`` are int64 ``[B]``."""
    x = _mix_tensor(keys + steps * _signed(_GOLDEN))
    return _lshr(x, 11).to(torch.float64) * 2.0**-53


def draw(
    logits: torch.Tensor, params: Sequence[SamplingParams], keys: list[int], steps: list[int]
) -> tuple[list[int], list[float]]:
    """The engine's sampler: row ``b`` of ``logits [B, V]`` draws its token with ``params[b]`` from
    stream ``keys[b]`` at step ``steps[b]``; returns the tokens and their log-probs.

    Which branches the batch needs (greedy rows, a top-k/top-p support) is decided from the
    parameters here on the host, so the tokens and log-probs are the only values read back.
    """
    device, vocab = logits.device, logits.shape[-1]
    greedy = [p.temperature <= 0 for p in params]
    truncated = any(0 < p.top_k < vocab or p.top_p < 1 for p in params)
    tokens, logprobs = _sample(
        logits,
        torch.tensor([p.temperature for p in params], device=device),
        torch.tensor([p.top_p for p in params], device=device),
        torch.tensor([p.top_k for p in params], device=device),
        torch.tensor(keys, device=device),
        torch.tensor(steps, device=device),
        all_greedy=all(greedy),
        any_greedy=any(greedy),
        truncated=truncated,
    )
    return tokens.tolist(), logprobs.tolist()


def sample_next(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    keys: torch.Tensor,
    steps: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return (tokens ``[B]``, their log-probs ``[B]``).

    logits: ``[B, V]``; temperature, top_p: float ``[B]``; top_k: int64 ``[B]`` (0 = off);
    keys, steps: int64 ``[B]``. Rows with temperature 0 take the argmax. Log-probs follow the
    convention of :mod:`codemoe.core.contracts.engine`: ``log_softmax(logits / T)``, not truncated.
    """
    greedy = temperature <= 0
    truncated = ((top_k > 0) & (top_k < logits.shape[-1])) | (top_p < 1)
    return _sample(
        logits,
        temperature,
        top_p,
        top_k,
        keys,
        steps,
        all_greedy=bool(greedy.all()),
        any_greedy=bool(greedy.any()),
        truncated=bool(truncated.any()),
    )


def _sample(logits, temperature, top_p, top_k, keys, steps, *, all_greedy: bool, any_greedy: bool, truncated: bool):
    """:func:`sample_next` with the batch's branches given: all rows greedy, some, a truncated support."""
    logits = logits.float()
    greedy = temperature <= 0
    logp = torch.log_softmax(logits / temperature.masked_fill(greedy, 1.0)[:, None].float(), dim=-1)  # [B, V]
    if all_greedy:
        tokens = logits.argmax(-1)
    else:
        tokens = _inverse_cdf(logp, top_p, top_k, uniform(keys, steps), truncated)
        if any_greedy:
            tokens = torch.where(greedy, logits.argmax(-1), tokens)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def _inverse_cdf(
    logp: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor, target: torch.Tensor, truncated: bool
) -> torch.Tensor:
    """The token whose CDF interval holds ``target`` (``[B]`` in [0, 1)), within the top-k / top-p
    support (``truncated``: some row has one)."""
    vocab = logp.shape[-1]
    probs = logp.to(torch.float64).exp()  # float64: the CDF of a large vocabulary keeps its small tail
    if truncated:
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
        rank = torch.arange(vocab, device=logp.device)[None, :]
        k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab))
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass of strictly more likely tokens
        keep = (rank < k[:, None]) & (before < top_p[:, None].to(torch.float64))
        cdf = (sorted_probs * keep).cumsum(-1)
        pick = torch.searchsorted(cdf, (target * cdf[:, -1])[:, None], right=True).clamp_(max=vocab - 1)
        return order.gather(1, pick).squeeze(1)
    cdf = probs.cumsum(-1)
    return torch.searchsorted(cdf, (target * cdf[:, -1])[:, None], right=True).clamp_(max=vocab - 1).squeeze(1)
