"""A decode step computed straight from the weights of a Qwen3(-MoE), Llama, Mixtral or Qwen2-MoE model.

A decode step of a small model is mostly per-call overhead: ``transformers``' forward builds
masks and output records, dispatches attention through its interface and goes through a dozen
module calls per layer, and a codemoe MoE block also computes its balance and z losses and
routing statistics, which only training reads. For one new token per row none of that is
needed, so this module runs the same arithmetic on the same parameters in a flat loop:
embedding, per layer RMSNorm -> q/k/v projections (with their biases) -> per-head q/k norms (Qwen3's;
Llama, Mixtral and Qwen2-MoE have none) -> rotary embedding ->
the engine's shared-prefix attention -> output projection -> RMSNorm -> the MoE block's
inference forward (``MoEBlock.infer``: router and experts, no losses or statistics), then the
final norm and the head. It reads the model's parameters each step (nothing is copied or
fused), so weights updated in place by a trainer or by ``update_weights`` are used at once.

Only models whose structure it knows take this path (:meth:`LeanDecoder.for_model` returns None
otherwise and the engine calls the model itself); ``tests/test_lean_decode.py`` checks the logits
and routing against the model's own forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from codemoe.serving.attention import decode_attention
from codemoe.serving.kv_cache import PrefixKVCache

__all__ = ["LeanDecoder"]

_MODEL_TYPES = ("qwen3_moe", "qwen3", "llama", "mixtral", "qwen2_moe")
_ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _rms_norm(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """``transformers``' RMSNorm: normalise in fp32, cast back, scale by the weight."""
    normed = F.rms_norm(x.float(), (x.shape[-1],), eps=norm.variance_epsilon)
    return norm.weight * normed.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x [B, heads, D]`` with ``cos``/``sin`` ``[B, 1, D]`` (rotate-half convention)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _is_rms_norm(module: Any) -> bool:
    return isinstance(getattr(module, "weight", None), torch.Tensor) and hasattr(module, "variance_epsilon")


def _head_norms(attn: Any) -> bool | None:
    """True for per-head q/k RMSNorms (Qwen3), False for none, None for norms of another kind
    (OLMoE normalises the whole projection) that this module does not compute."""
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    if q_norm is None and k_norm is None:
        return False
    per_head = all(_is_rms_norm(n) and n.weight.shape == (attn.head_dim,) for n in (q_norm, k_norm))
    return True if per_head else None


class LeanDecoder:
    """Decode steps of one model (see the module docstring)."""

    def __init__(self, model: torch.nn.Module) -> None:
        from codemoe.core.moe import MoEBlock

        self.model = model
        self.base = model.model
        self.layers = list(self.base.layers)
        self.moe = [isinstance(layer.mlp, MoEBlock) for layer in self.layers]
        self.hashing = [
            m and getattr(layer.mlp.gate, "needs_token_ids", False) for m, layer in zip(self.moe, self.layers)
        ]
        self.head_norms = [bool(_head_norms(layer.self_attn)) for layer in self.layers]

    @staticmethod
    def for_model(model: torch.nn.Module) -> LeanDecoder | None:
        """A decoder for ``model`` when its structure is the one this module computes, else None."""
        from codemoe.core.moe import MoEBlock

        config = getattr(model, "config", None)
        base = getattr(model, "model", None)
        if getattr(config, "model_type", None) not in _MODEL_TYPES or base is None:
            return None
        if getattr(config, "sliding_window", None) or getattr(config, "hidden_act", "silu") != "silu":
            return None
        if not isinstance(getattr(model, "lm_head", None), torch.nn.Linear):
            return None
        if not all(hasattr(base, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
            return None
        for layer in base.layers:
            attn = getattr(layer, "self_attn", None)
            if attn is None or not all(hasattr(attn, name) for name in _ATTENTION_PARTS):
                return None
            if getattr(attn, "sliding_window", None) is not None or _head_norms(attn) is None:
                return None
            if not (_is_rms_norm(layer.input_layernorm) and _is_rms_norm(layer.post_attention_layernorm)):
                return None
            mlp = layer.mlp
            if isinstance(mlp, MoEBlock):
                if mlp.options.capacity_factor > 0:  # drops depend on the whole batch's loads
                    return None
            elif not all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj")):
                return None
        return LeanDecoder(model) if _is_rms_norm(base.norm) else None

    def step(
        self, ids: torch.Tensor, positions: torch.Tensor, cache: PrefixKVCache, record: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``[B, V]`` for tokens ``ids [B]`` at ``positions [B]``, and, when ``record``, the
        experts each row chose ``[B, moe_layers, k]`` int32 (None otherwise)."""
        h = self.base.embed_tokens(ids)  # [B, H]
        cos, sin = self.base.rotary_emb(h, positions[:, None])  # [B, 1, D]
        chosen: list[torch.Tensor] = []
        for layer, is_moe, hashing, norms in zip(self.layers, self.moe, self.hashing, self.head_norms):
            h = h + self._attention(layer.self_attn, _rms_norm(h, layer.input_layernorm), cos, sin, cache, norms)
            x = _rms_norm(h, layer.post_attention_layernorm)
            if is_moe:
                out, indices = layer.mlp.infer(x, ids if hashing else None)
                if record:
                    chosen.append(indices)
            else:
                out = layer.mlp(x)
            h = h + out
        logits = self.model.lm_head(_rms_norm(h, self.base.norm))
        routing = torch.stack(chosen, dim=1).to(torch.int32) if record and chosen else None
        return logits, routing

    @staticmethod
    def _attention(attn, x: torch.Tensor, cos, sin, cache: PrefixKVCache, head_norms: bool) -> torch.Tensor:
        batch, dim = x.shape[0], attn.head_dim
        q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias).view(batch, -1, dim)
        k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias).view(batch, -1, dim)
        v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias).view(batch, -1, dim)
        if head_norms:
            q, k = _rms_norm(q, attn.q_norm), _rms_norm(k, attn.k_norm)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        cache.update(k[:, :, None], v[:, :, None], attn.layer_idx)
        out = decode_attention(q[:, :, None], cache, attn.layer_idx, attn.scaling)  # [B, 1, Hq, D]
        return F.linear(out.reshape(batch, -1), attn.o_proj.weight, attn.o_proj.bias)
