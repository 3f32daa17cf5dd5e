"""The engine's forwards: a prefill of right-padded prompts and a decode step, with the experts
each token chose when the model routes.

A decode step of a Qwen3(-MoE), Llama, Mixtral or Qwen2-MoE model is computed straight from its
parameters (:mod:`codemoe.serving.lean_decode`); every other forward is the model's own, reading
and writing the engine's KV cache through its ``update``. Around each engine step the model is in inference
mode (:meth:`ModelRunner.inference`): modules in eval mode, MoE blocks recording no statistics,
the shared-prefix attention switched on, no autograd.

The engine gives the model its own additive masks (prompts right-padded, decode keys gathered from
the cache), which ``transformers`` uses as they are; so for models with sliding-window layers
(GPT-OSS, a Mixtral with ``sliding_window``) the runner narrows them to each layer type's window
itself, from the absolute position of every key column (:func:`window_masks`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from codemoe.core.contracts import EngineError
from codemoe.serving.attention import shared_prefix_attention, sliding_window_layers
from codemoe.serving.batches import DecodeBatch, PrefillBatch
from codemoe.serving.kv_cache import PrefixKVCache, StepPlan
from codemoe.serving.lean_decode import LeanDecoder
from codemoe.serving.routing import RoutingRecorder

__all__ = ["ModelRunner", "key_positions", "window_masks"]

# attention the engine's masks cannot express: refused when the model is given to the engine
_UNSERVED_ATTENTION = {
    "attention_chunk_size": "chunked attention",
    "sliding_window_pattern": "an interleaved sliding-window pattern without layer_types",
}


def key_positions(plan: StepPlan, positions: torch.Tensor, keys: int) -> torch.Tensor:
    """The absolute position of every key column ``[R, keys]`` of a forward's mask: a prefill's
    columns are positions ``0 .. keys-1``; a gathered decode step's are its group's prompt
    (``0 .. P-1``) then the row's own tokens (from the row's prompt length on)."""
    columns = torch.arange(keys, device=positions.device)
    if not plan.decoding:
        return columns[None].expand(positions.shape[0], -1)
    prompt = plan.prefix_mask.shape[-1]
    own_start = positions[:, 0] - plan.suffix_pos  # [B] the row's prompt length
    own = own_start[:, None] + columns[None, : keys - prompt]
    return torch.cat([columns[None, :prompt].expand(positions.shape[0], -1), own], dim=1)


def window_masks(
    mask: torch.Tensor, positions: torch.Tensor, plan: StepPlan, windows: dict[str, int]
) -> torch.Tensor | dict[str, torch.Tensor]:
    """``mask [R, 1, S, K]`` with keys outside each window hidden: the mask for every layer
    (``windows == {"*": W}``) or ``transformers``' mapping layer type -> mask."""
    keys = key_positions(plan, positions, mask.shape[-1])  # [R, K]
    distance = positions[:, None, :, None] - keys[:, None, None, :]  # [R, 1, S, K] query minus key position
    narrowed = {
        layer_type: mask.masked_fill(distance >= window, torch.finfo(mask.dtype).min)
        for layer_type, window in windows.items()
    }
    if "*" in narrowed:
        return narrowed["*"]
    return {"full_attention": mask, **narrowed}


def _check_servable(model: torch.nn.Module) -> None:
    config = getattr(model, "config", None)
    for key, what in _UNSERVED_ATTENTION.items():
        if key == "sliding_window_pattern" and getattr(config, "layer_types", None):
            continue  # the pattern is spelled out per layer, which window_masks follows
        if getattr(config, key, None):
            raise EngineError(
                f"the embedded engine cannot serve {type(model).__name__}: its config sets '{key}' "
                f"({what}), which the engine's attention masks do not apply; serve it with the sglang engine"
            )


def _forward_argument_names(model: torch.nn.Module) -> tuple[str, bool, bool]:
    """The model's name for the cache argument, and whether it accepts ``logits_to_keep`` and
    ``output_router_logits``."""
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    return cache_arg, "logits_to_keep" in params, "output_router_logits" in params


@contextmanager
def _eval_flags(modules: list[torch.nn.Module]) -> Iterator[None]:
    """Every module in eval mode inside the block; as they were after.

    The ``training`` flags are written straight into each module's instance dict:
    ``model.eval()``/``train()`` walk the module tree through ``named_children`` on every call,
    and ``nn.Module.__setattr__`` costs ~110 us per step for the tiny model's 59 modules against
    ~4 us this way (a trainer's shared policy flips them every decode step).
    """
    training = [m for m in modules if m.training]
    for module in training:
        module.__dict__["training"] = False
    try:
        yield
    finally:
        for module in training:
            module.__dict__["training"] = True


@contextmanager
def _statistics_off(blocks: list) -> Iterator[None]:
    """No MoE block records routing statistics inside the block: the engine's forwards are not
    training data, and a trainer sharing the policy reads statistics of its own batches only."""
    recording = [b for b in blocks if b.record_statistics]
    for block in recording:
        block.set_record_statistics(False)
    try:
        yield
    finally:
        for block in recording:
            block.set_record_statistics(True)


class ModelRunner:
    """Forwards of one model over the engine's KV cache (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, cache: PrefixKVCache, *, shared_attention: bool, lean_decode: bool):
        from codemoe.core.moe import moe_blocks

        _check_servable(model)
        self.model = model
        self.windows = sliding_window_layers(getattr(model, "config", None))
        self.cache = cache
        self.cache_arg, self.has_logits_to_keep, self.has_router_logits = _forward_argument_names(model)
        self.recorder = RoutingRecorder.for_model(model)
        self.shared_attention = shared_attention  # the model supports it (supports_shared_prefix_attention)
        self.lean = LeanDecoder.for_model(model) if self.shared_attention and lean_decode else None
        self._modules = list(model.modules())
        self._blocks = list(moe_blocks(model))

    @property
    def records_routing(self) -> bool:
        """Whether forwards report the experts each token chose (codemoe MoE models)."""
        return self.recorder is not None

    @contextmanager
    def inference(self) -> Iterator[None]:
        """The model as the engine's forwards need it, inside the block; as it was after."""
        attention = shared_prefix_attention(self.model, self.cache, self.shared_attention)
        with torch.no_grad(), _eval_flags(self._modules), _statistics_off(self._blocks), attention:
            yield

    def prefill(self, batch: PrefillBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``[R, V]`` at each prompt's last token and, when the model routes, the experts of
        every position ``[R, S, layers, k]`` (of a packed batch too)."""
        logits = self._forward(batch.ids, batch.positions, batch.mask, keep=batch.last, packed=batch.packed)
        if self.recorder is None:
            return logits, None
        last = self.recorder.last
        return logits, batch.per_row(last.reshape(*batch.ids.shape, *last.shape[1:]))

    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``[B, V]`` of one new token per row and, when the model routes, its experts ``[B, layers, k]``."""
        if self.lean is not None:
            return self.lean.step(batch.ids[:, 0], batch.positions[:, 0], self.cache, self.recorder is not None)
        logits = self._forward(batch.ids, batch.positions, batch.mask)
        return logits, self.recorder.last if self.recorder is not None else None

    def _forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        keep: torch.Tensor | None = None,
        packed: bool = False,
    ) -> torch.Tensor:
        """Logits ``[B, V]`` at position ``keep[b]`` of each row (default: the last position), or, for
        one packed row holding ``B`` prompts, at its columns ``keep``."""
        if self.windows and mask is not None:
            mask = window_masks(mask, positions, self.cache.plan, self.windows)
        kwargs = {self.cache_arg: self.cache, "position_ids": positions, "attention_mask": mask, "use_cache": True}
        if self.has_router_logits:
            # a trainer sharing a transformers MoE policy asks it for its balance loss, which the
            # engine does not read (and which transformers computes from a 2-D padding mask only)
            kwargs["output_router_logits"] = False
        wanted = keep if keep is not None else torch.full((input_ids.shape[0],), input_ids.shape[1] - 1)
        columns = torch.arange(input_ids.shape[1])
        if self.has_logits_to_keep:
            # only the positions some row needs go through the LM head
            columns = torch.unique(wanted)
            kwargs["logits_to_keep"] = columns if len(columns) > 1 else 1
        if self.recorder is None:
            logits = self.model(input_ids=input_ids, **kwargs).logits
        else:
            with self.recorder.forward():
                logits = self.model(input_ids=input_ids, **kwargs).logits
        # logits: [B, len(columns), V]; pick each row's column (all in row 0 when packed)
        rows = torch.zeros(len(wanted), dtype=torch.long) if packed else torch.arange(len(wanted))
        return logits[rows, torch.searchsorted(columns.to(wanted.device), wanted)]
