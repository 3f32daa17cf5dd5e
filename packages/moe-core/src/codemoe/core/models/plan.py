"""A memory and communication plan per rank for training a preset on a ``dp x ep`` mesh.

:func:`plan_memory` builds the model on the meta device (no memory, instant for 1T) and counts,
per rank, what one training step holds and sends. The sharding is the trainer's
(``codemoe.rl.distributed.shard_model``): every MoE layer's routed experts are split over the
``ep`` ranks of an expert-parallel group and each slice is FSDP-sharded over ``dp``; every other
parameter is FSDP-sharded over all ``dp · ep`` ranks. Either way a rank stores ``1 / (dp · ep)``
of every parameter; the mesh decides what is gathered and what is exchanged.

Bytes per rank (``n`` = parameters per rank, ``W = dp · ep``):

- parameters ``4 n``: the fp32 shards (under ``bf16`` these are the fp32 master weights: FSDP2
  keeps the shard in fp32 and casts it to bf16 when it gathers a block);
- gradients ``4 n``: reduced in fp32 under both precisions;
- optimizer ``8 n``: AdamW's two fp32 moments;
- optimizer step ``4 n``: the foreach AdamW's temporary (the square root of the second moments);
- activations: what autograd keeps for backward over one micro-batch of ``B`` sequences of ``L``
  tokens (:func:`activation_bytes`), with and without activation checkpointing;
- gathered: under FSDP (``W > 1``) the unsharded root (embeddings, head: FSDP2 keeps the root
  gathered from forward to backward), two layers (the one computing and the one prefetched) in
  the compute dtype and one layer's unsharded fp32 gradient before its reduce-scatter; in one
  process under ``bf16``, autocast's bf16 copy of every weight (kept for backward);
- reference ``4 n`` (``reference=True``, algorithms with a KL term): the frozen reference policy,
  sharded like the policy, without gradients or moments;
- engine: the ``embedded`` engine runs the policy module itself (``codemoe.rl``'s stage builds it
  on the policy; under FSDP its forwards gather one block at a time, as training's do), so its
  share is its KV cache: ``engine_batch`` samples of ``L`` tokens, keys and values of every layer
  in the parameters' dtype (fp32). An ``external`` engine (``sglang``, ``openai``) holds its
  weights and cache on its own GPUs.

A step's peak is ``parameters + optimizer + gathered + max(gradients + activations − loss
gradients, activations, gradients + optimizer step)``: the trainers free the last step's gradients
after the forward, just before backward (``zero_grad(set_to_none=True)``), so the forward runs
beside them; backward starts with the loss's two ``[T, V]`` gradients and frees activations faster
than it fills gradients; the optimizer step needs the gradients and its temporary. The reference
adds to both peaks. After the update the embedded engine only drops its kept keys and
values (it reads the new weights in place); an external engine is streamed the weights
(``codemoe.rl.weight_sync``): each parameter gathered whole when it is reached, a decoder layer
converted to its checkpoint's layout at a time (the layer whole, and its experts split into new
tensors: ``2 · 4 · largest layer`` under FSDP, half that in one process, where the layer is the
weights themselves) and sent in buckets (``SYNC_BUCKET`` bytes, the ``sglang`` engine's default
``bucket_mb``) while the states are still held, so the sync's peak is ``parameters + gradients +
optimizer + reference + sync buffer``. ``total`` is the larger of the two peaks plus the engine's share, and
``fits`` compares it with the GPU's memory.

Communication per rank and micro-batch: the all-to-all sends each of the ``B · L · k`` (token,
expert) rows of hidden size ``H`` to the rank holding its expert, a share ``(ep − 1) / ep`` of them
to another rank under uniform routing, and the outputs come back the same way (dispatch and
combine: ``2 ·`` rows), in every MoE layer; backward sends the gradients back the reverse way (the
same bytes again), and activation checkpointing repeats the forward's exchanges in backward. The
weight sync to an external engine gathers the whole state dict on every rank after an update:
each rank receives the ``(W − 1) / W`` of the fp32 weights it does not hold (the embedded engine
needs no sync).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codemoe.core.errors import ConfigError

__all__ = ["ActivationShape", "MemoryPlan", "activation_bytes", "load_model_spec", "plan_memory"]

PRECISIONS = ("fp32", "bf16")
ENGINES = ("embedded", "external")
_FP32 = 4
SYNC_BUCKET = 32 << 20  # bytes of one bucket of weights sent to an external engine (its bucket_mb)
_INDEX = 8  # int64 token ids, expert ids, row indices


@dataclass(frozen=True)
class ActivationShape:
    """What the activations of one decoder layer depend on (read from the built model)."""

    hidden: int  # H
    heads: int  # query heads
    kv_heads: int  # key/value heads
    head_dim: int
    top_k: int  # k experts per token (0: a dense layer)
    experts: int  # routed experts E
    expert_width: int  # I, one expert's MLP width
    mlp_width: int  # a dense MLP's width (dense layers) or the shared expert's (MoE layers; 0: none)
    exchanged: bool = False  # the experts read rows an all-to-all brought (ep > 1)


def _norm(width: int, c: int) -> int:
    # RMSNorm: the fp32 copy of its input (pow), the 1/rms per row, the normalised fp32 input cast
    # to the compute dtype (saved by the weight's multiply)
    return width * _FP32 + _FP32 + width * c


def _attention(s: ActivationShape, c: int) -> int:
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    qk_norms = _norm(s.head_dim, c) * s.heads + _norm(s.head_dim, c) * s.kv_heads
    # the projections' input, then SDPA's q, k, v, output and fp32 log-sum-exp per head
    return s.hidden * c + qk_norms + (2 * q + 2 * kv) * c + s.heads * _FP32


def _dense_mlp(width: int, c: int) -> int:
    # SwiGLU: gate and up outputs, silu(gate), their product (the input is saved by whoever reads it first)
    return 4 * width * c


def _moe(s: ActivationShape, c: int) -> int:
    k, e = s.top_k, s.experts
    # the router computes fp32 logits from an fp32 view of the norm's output (a copy under bf16,
    # whose bf16 original the experts and the shared expert read), probs, top-k ids and weights
    router = s.hidden * _FP32 + e * _FP32 + k * (_INDEX + _FP32) + _FP32
    inputs = s.hidden * c if c != _FP32 else 0
    # grouped experts (experts.py, _GroupedSwiGLU): [S, 2I] projections and three [S, I] activations
    # for S = k rows a token, plus each row's source index (twice) and weight; under expert
    # parallelism they read the rows the all-to-all received, k [H] rows a token, not the norm's output
    experts = 5 * k * s.expert_width * c + k * (2 * _INDEX + _FP32) + (k * s.hidden * c if s.exchanged else 0)
    balance = (e + 2) * _FP32  # the balance and z losses' per-token terms
    shared = _dense_mlp(s.mlp_width, c) + s.hidden * c + _FP32 if s.mlp_width else 0  # + its sigmoid gate
    return router + inputs + experts + balance + shared


def layer_bytes_per_token(s: ActivationShape, c: int) -> int:
    """Bytes one decoder layer keeps for backward per token, in compute dtype size ``c``."""
    mlp = _moe(s, c) if s.top_k else s.hidden * c + _dense_mlp(s.mlp_width, c)
    return _norm(s.hidden, c) + _attention(s, c) + _norm(s.hidden, c) + mlp


def head_bytes_per_token(hidden: int, vocab: int, c: int) -> int:
    """The final norm, the head's input and logits (held by the model's output), the fp32
    log-softmax, and the two fp32 ``[V]`` gradients backward starts with, while every layer's
    activations are still held."""
    return _norm(hidden, c) + hidden * c + vocab * c + vocab * _FP32 + 2 * vocab * _FP32 + 2 * _INDEX


def activation_bytes(layers: list[ActivationShape], vocab: int, tokens: int, c: int, checkpointing: bool) -> int:
    """Peak activation bytes of a micro-batch of ``tokens`` tokens.

    Without checkpointing every layer's saved tensors and the head's. With it each layer keeps
    only its input ``[T, H]`` and backward recomputes one layer at a time: the inputs, the largest
    layer's activations and the head's.
    """
    head = head_bytes_per_token(layers[0].hidden, vocab, c) if layers else 0
    per_layer = [layer_bytes_per_token(s, c) for s in layers]
    inputs = sum(s.hidden * c for s in layers)
    kept = inputs + max(per_layer, default=0) if checkpointing else sum(per_layer)
    return tokens * (kept + head)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per rank of one training step on a ``dp x ep`` mesh (see the module docstring)."""

    preset: str
    dp: int
    ep: int
    seq: int  # L, tokens per sequence
    micro_batch: int  # B, sequences per micro-batch
    checkpointing: bool
    precision: str
    engine: str  # 'embedded' (runs the policy on these ranks) or 'external' (its own GPUs)
    engine_batch: int  # samples whose KV cache the embedded engine holds
    reference: bool  # a frozen reference policy for a KL term
    gpu_memory_gb: float | None
    parameters_total: int  # every parameter of the model
    parameters_per_rank: int  # n, the shard one rank holds
    moe_layers: int
    top_k: int
    hidden: int
    parameters: int  # fp32 shards (the master weights under bf16)
    gradients: int
    optimizer: int  # AdamW moments
    optimizer_step: int  # foreach AdamW's temporary
    activations_full: int  # without activation checkpointing
    activations_checkpointed: int
    loss_gradients: int  # the two fp32 [T, V] gradients backward starts with (part of the activations)
    gathered: int  # FSDP's unsharded root and layers, or autocast's bf16 weight copies
    reference_weights: int  # the reference policy's fp32 shards
    engine_kv_cache: int  # the embedded engine's share (its weights are the policy's)
    all_to_all_forward: int  # bytes sent per micro-batch forward (dispatch + combine, every MoE layer)
    all_to_all_backward: int  # gradients sent back in backward (+ the recomputed forward's under checkpointing)
    weight_sync: int  # bytes received to rebuild the whole state dict after an update
    sync_buffer: int  # what streaming the weights to an external engine holds: one layer whole and converted, a bucket

    @property
    def activations(self) -> int:
        return self.activations_checkpointed if self.checkpointing else self.activations_full

    @property
    def training_peak(self) -> int:
        """Peak of one training step: states, gathered weights, and activations beside the last step's
        gradients (forward), without them (backward's start) or the gradients and the step's temporary."""
        forward = self.gradients + self.activations - self.loss_gradients
        later = max(forward, self.activations, self.gradients + self.optimizer_step)
        return self.parameters + self.optimizer + self.reference_weights + self.gathered + later

    @property
    def sync_peak(self) -> int:
        """Peak of the weight sync: the states (gradients are freed at the next step) and the stream's buffer."""
        return self.parameters + self.gradients + self.optimizer + self.reference_weights + self.sync_buffer

    @property
    def total(self) -> int:
        return max(self.training_peak, self.sync_peak) + self.engine_kv_cache

    @property
    def all_to_all(self) -> int:
        return self.all_to_all_forward + self.all_to_all_backward

    @property
    def fits(self) -> bool | None:
        """Whether ``total`` fits the GPU's memory (None when no ``gpu_memory_gb`` was given)."""
        return None if self.gpu_memory_gb is None else self.total <= self.gpu_memory_gb * 1e9

    def as_dict(self) -> dict[str, Any]:
        derived = ("activations", "training_peak", "sync_peak", "total", "all_to_all", "fits")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


def load_model_spec(preset: str) -> dict[str, Any]:
    """A model spec from a model preset name (shipped or in the overlay) or a path to a model YAML file
    (which may start from a preset with ``_base_: <preset>``)."""
    from codemoe.core.models.presets import load_preset
    from omegaconf import OmegaConf

    path = Path(preset)
    if path.suffix not in (".yaml", ".yml"):
        return load_preset(preset)
    if not path.is_file():
        raise ConfigError(f"model YAML {path} does not exist (give a model preset name, e.g. tiny, or a file)")
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a model YAML is a mapping with 'name: <model component>'")
    base = data.pop("_base_", None)
    if base is not None:
        data = OmegaConf.to_container(OmegaConf.merge(load_preset(str(base)), data), resolve=True)
    return data


def _positive(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"'{key}' must be a positive integer, got {value!r}")
    return value


def _check(dp: Any, ep: Any, seq: Any, micro_batch: Any, precision: str, engine: str, engine_batch: Any, gpu: Any):
    for key, value in (("dp", dp), ("ep", ep), ("seq", seq), ("micro_batch", micro_batch)):
        _positive(value, key)
    if isinstance(engine_batch, bool) or not isinstance(engine_batch, int) or engine_batch < 0:
        raise ConfigError(f"'engine_batch' must be a non-negative integer, got {engine_batch!r}")
    if engine not in ENGINES:
        raise ConfigError(f"'engine': {engine!r} is not one of {', '.join(ENGINES)}")
    if precision not in PRECISIONS:
        raise ConfigError(f"'precision': {precision!r} is not one of {', '.join(PRECISIONS)}")
    if gpu is not None and not (isinstance(gpu, (int, float)) and gpu > 0):
        raise ConfigError(f"'gpu_memory' must be a positive number of GB, got {gpu!r}")


def _layer_shape(layer: Any, config: Any, ep: int) -> ActivationShape:
    import torch
    from codemoe.core.moe import MoEBlock

    mlp = layer.mlp
    common = {
        "hidden": config.hidden_size,
        "heads": config.num_attention_heads,
        "kv_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
    }
    if isinstance(mlp, MoEBlock):
        shared = mlp.shared_expert.up_proj.out_features if mlp.shared_expert is not None else 0
        return ActivationShape(
            **common,
            top_k=mlp.gate.top_k,
            experts=mlp.gate.num_experts,
            expert_width=mlp.experts.intermediate_dim,
            mlp_width=shared,
            exchanged=ep > 1,
        )
    if not isinstance(getattr(mlp, "up_proj", None), torch.nn.Linear):
        raise ConfigError(
            f"the memory plan counts layers whose MLP is a codemoe MoE block or a SwiGLU MLP (gate/up/down "
            f"projections); this model's {type(mlp).__name__} is neither"
        )
    return ActivationShape(**common, top_k=0, experts=0, expert_width=0, mlp_width=mlp.up_proj.out_features)


def _numel(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())


def plan_memory(
    preset: str | Mapping[str, Any],
    *,
    dp: int = 1,
    ep: int = 1,
    seq: int = 2048,
    micro_batch: int = 1,
    checkpointing: bool = False,
    precision: str = "fp32",
    engine: str = "embedded",
    engine_batch: int | None = None,
    reference: bool = False,
    gpu_memory_gb: float | None = None,
    registry: Any = None,
) -> MemoryPlan:
    """The per-rank plan of ``preset`` (a preset name, a model YAML path or a spec) on a ``dp x ep``
    mesh; the embedded engine's ``engine_batch`` defaults to ``micro_batch`` samples."""
    import torch
    from codemoe.core.models.build import build_model
    from codemoe.core.moe import moe_blocks

    engine_batch = micro_batch if engine_batch is None else engine_batch
    _check(dp, ep, seq, micro_batch, precision, engine, engine_batch, gpu_memory_gb)
    spec = load_model_spec(preset) if isinstance(preset, str) else dict(preset)
    with torch.device("meta"):
        model = build_model(spec, registry=registry)
    config = model.config
    blocks = list(moe_blocks(model))
    if ep > 1 and not blocks:
        raise ConfigError(f"'ep': {ep} expert-parallel ranks, but the model has no MoE layer to split")
    for block in blocks:
        if block.gate.num_experts % ep:
            raise ConfigError(
                f"'ep': {ep} does not divide the {block.gate.num_experts} experts of MoE layer {block.layer}"
            )
    if seq > config.max_position_embeddings:
        raise ConfigError(
            f"'seq': {seq} tokens exceed the model's max_position_embeddings ({config.max_position_embeddings})"
        )

    world, c = dp * ep, 2 if precision == "bf16" else _FP32
    total = _numel(model)
    per_rank = -(-total // world)
    layers = list(model.model.layers)
    shapes = [_layer_shape(layer, config, ep) for layer in layers]
    tokens = micro_batch * seq

    # what FSDP gathers: a layer's dense part whole, its experts' ep slice
    layer_units = [
        _numel(layer) - (_numel(layer.mlp.experts) * (ep - 1) // ep if hasattr(layer.mlp, "experts") else 0)
        for layer in layers
    ]
    root = total - sum(_numel(layer) for layer in layers)
    if world > 1:
        gathered = c * (root + 2 * max(layer_units)) + _FP32 * max(layer_units)
    else:
        gathered = total * c if precision == "bf16" else 0

    # keys and values of every layer, in the dtype of the policy's parameters it runs on (fp32)
    kv_per_token = 2 * len(layers) * config.num_key_value_heads * config.head_dim * _FP32
    external = engine == "external"
    top_k = blocks[0].gate.top_k if blocks else 0
    # rows of hidden size H that leave the rank, dispatch and combine, every MoE layer
    rows = 2 * tokens * top_k * len(blocks) * (ep - 1) // ep
    forward = rows * config.hidden_size * c
    return MemoryPlan(
        preset=preset if isinstance(preset, str) else str(spec.get("name", "spec")),
        dp=dp,
        ep=ep,
        seq=seq,
        micro_batch=micro_batch,
        checkpointing=checkpointing,
        precision=precision,
        engine=engine,
        engine_batch=engine_batch,
        reference=reference,
        gpu_memory_gb=gpu_memory_gb,
        parameters_total=total,
        parameters_per_rank=per_rank,
        moe_layers=len(blocks),
        top_k=top_k,
        hidden=config.hidden_size,
        parameters=_FP32 * per_rank,
        gradients=_FP32 * per_rank,
        optimizer=2 * _FP32 * per_rank,
        optimizer_step=_FP32 * per_rank,
        activations_full=activation_bytes(shapes, config.vocab_size, tokens, c, checkpointing=False),
        activations_checkpointed=activation_bytes(shapes, config.vocab_size, tokens, c, checkpointing=True),
        loss_gradients=2 * tokens * config.vocab_size * _FP32,
        gathered=gathered,
        reference_weights=_FP32 * per_rank if reference else 0,
        engine_kv_cache=0 if external else engine_batch * seq * kv_per_token,
        all_to_all_forward=forward,
        all_to_all_backward=forward * (2 if checkpointing else 1),
        weight_sync=_FP32 * total * (world - 1) // world if external else 0,
        sync_buffer=(_FP32 * max(_numel(layer) for layer in layers) * (2 if world > 1 else 1) + SYNC_BUCKET
                     if external else 0),
    )
