"""Next-token sampling that does not depend on how requests are batched.

Every sample owns a random stream keyed by (seed, prompt index, sample index); the uniform number
for its ``t``-th token is a hash of (key, t). A token is drawn by inverse-CDF sampling with that
single number, so a sample is the same whether it shares a batch, a prefix cache, or runs alone.
"""

from __future__ import annotations

import torch

__all__ = ["sample_key", "sample_next", "uniform"]

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
    convention of :mod:`codemoe.serving.api`: ``log_softmax(logits / T)``, not truncated.
    """
    logits = logits.float()
    greedy = temperature <= 0
    logp = torch.log_softmax(logits / temperature.masked_fill(greedy, 1.0)[:, None].float(), dim=-1)  # [B, V]
    if bool(greedy.all()):
        tokens = logits.argmax(-1)
    else:
        tokens = _inverse_cdf(logp, top_p, top_k, uniform(keys, steps))
        if bool(greedy.any()):
            tokens = torch.where(greedy, logits.argmax(-1), tokens)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def _inverse_cdf(logp: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The token whose CDF interval holds ``target`` (``[B]`` in [0, 1)), within the top-k / top-p support."""
    vocab = logp.shape[-1]
    probs = logp.to(torch.float64).exp()  # float64: the CDF of a large vocabulary keeps its small tail
    if bool(((top_k > 0) & (top_k < vocab)).any()) or bool((top_p < 1).any()):
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
