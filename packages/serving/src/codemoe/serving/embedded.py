"""The embedded engine: batched sampling over a ``transformers`` causal LM on one machine.

- Prefix sharing: the prompt of a group of ``n`` samples (GRPO's shape) is prefilled once, stored
  once (:mod:`codemoe.serving.kv_cache`) and, in decode, read once for all the group's samples
  (:mod:`codemoe.serving.attention`).
- Continuous batching: every step first admits waiting groups (prefill) while slots are free, then
  decodes one token for every running sample; finished samples leave the batch at once.
- Reuse across turns (``prefix_cache_tokens`` > 0): finished samples' keys/values are kept, and a
  prompt that starts with one (an agent's next turn) prefills only what follows
  (:mod:`codemoe.serving.prefix_cache`).
- Common prefixes (``common_prefix_tokens``): groups admitted together whose prompts start with the
  same tokens (the next turns of one task's samples all start with the task prompt) keep those
  tokens once, as a root, and decode reads them once for all their rows.
- Determinism: each sample draws from its own random stream (:mod:`codemoe.serving.sampling`),
  so its tokens do not depend on what else is batched with it.

:class:`EmbeddedEngine` composes the rooms that do this, one module each:

- :mod:`codemoe.serving.scheduler`: admission and continuous batching (waiting groups, batch rows);
- :mod:`codemoe.serving.kv_slots`: the KV and prefix stores, slot by slot, with the root planner
  (:mod:`codemoe.serving.roots`);
- :mod:`codemoe.serving.runner`: the model's prefill and decode step (:mod:`codemoe.serving.lean_decode`);
- :mod:`codemoe.serving.sampling`: the sampler;
- :mod:`codemoe.serving.inflight`: what is tracked of each request in flight.

The engine is thread-safe: ``generate`` may be called from several threads (the HTTP server
does), and each call to :meth:`EmbeddedEngine.step` advances every request in flight.

The engine reads the model's live parameters, so an engine built on a trainer's policy holds no
copy of it: the trainer's updates are sampled at once (:meth:`EmbeddedEngine.weights_changed`
drops what was kept of the old weights). A policy sharded with FSDP2 over ``torchrun``'s ranks is
run through its own forward, which gathers one block's parameters at a time; those gathers are
collectives, so the ranks' engines step together inside :meth:`EmbeddedEngine.lockstep` (a rank
with nothing to compute joins with a one-token forward).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from codemoe.core.contracts import (
    ContextLengthError,
    EngineError,
    GenerationOutput,
    RequestError,
    Sample,
    SamplingParams,
)
from codemoe.serving.attention import supports_shared_prefix_attention
from codemoe.serving.inflight import Group, SampleState, TokenEvent, groups_for
from codemoe.serving.kv_slots import KVSlots
from codemoe.serving.runner import ModelRunner
from codemoe.serving.sampling import draw
from codemoe.serving.scheduler import Scheduler
from codemoe.serving.stopping import StopChecker, eos_token_ids

__all__ = [
    "SHARDED_GENERATION",
    "EmbeddedEngine",
    "EmbeddedEngineConfig",
    "TokenEvent",
    "build_embedded_engine",
    "check_weights_fit",
    "encode_prompt",
]

# How a model sharded over the ranks is generated from (see EmbeddedEngineConfig.sharded_generation).
SHARDED_GENERATION = ("per_block", "whole")


class FairRLock:
    """A re-entrant lock handed to its waiters in the order they asked (a ticket lock).

    ``threading.RLock`` is not fair: a thread that releases it and asks again at once (a loop of
    engine steps) nearly always gets it back before a thread already waiting, whom the OS must
    first wake. Here a release serves the next ticket, so a waiter gets the lock after at most the
    steps begun before it asked. The owner may re-enter; it is released when every entry is.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._next_ticket = 0
        self._serving = 0

    def acquire(self) -> bool:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return True
            ticket = self._next_ticket
            self._next_ticket += 1
            while self._owner is not None or self._serving != ticket:
                self._cond.wait()
            self._owner, self._depth = me, 1
            return True

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("cannot release a lock this thread does not hold")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._serving += 1
                self._cond.notify_all()

    @property
    def waiting(self) -> int:
        """Threads queued for the lock (not counting its owner)."""
        with self._cond:
            return self._next_ticket - self._serving - (self._owner is not None)

    def __enter__(self) -> FairRLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class EmbeddedEngineConfig:
    """Options of the embedded engine."""

    model_dir: str = ""  # checkpoint directory to load when no model object is passed
    max_batch_size: int = 256  # samples decoded together (KV-cache slots)
    max_context: int = 0  # longest prompt + generation; 0 uses the model's max_position_embeddings
    max_prefill_tokens: int = 8192  # padded prompt tokens per prefill forward (more prompts wait a step)
    prefix_sharing: bool = True  # prefill a prompt once for all its n samples
    shared_prefix_attention: bool = True  # decode reads each prompt once per group (AttentionInterface models)
    lean_decode: bool = True  # decode steps of Qwen3(-MoE) models computed from the weights, without the module stack
    prefix_cache_tokens: int = 0  # keep finished samples' KV (this many tokens) for prompts that extend them
    common_prefix_tokens: int = 64  # groups sharing at least this many leading tokens read them once (0: off)
    # where a model loaded from model_dir runs: auto | cpu | cuda | cuda:N (auto: the local rank's GPU
    # when CUDA is available); a model passed in stays where it is, and another device is refused
    device: str = "auto"
    # a model sharded over the ranks (FSDP2) generates with its blocks gathered one at a time per
    # forward ("per_block": about one block above the shard, the ranks step together, every forward
    # gathers) or gathered once for the whole rollout ("whole": the whole model on every rank while
    # generating, no gathers in between, the fast paths; the shards are back before training)
    sharded_generation: str = "per_block"
    # run the engine in a child process of its own (CPU): generation then runs beside a trainer that
    # trains meanwhile (asynchronous RL) without sharing its interpreter; the weights are shared
    # memory (codemoe.serving.engine_process). null: in-process, except in an rl stage that runs
    # asynchronously on CPU, which turns it on
    process: bool | None = None
    # threads take the engine in arrival order (a driving thread cannot take it back before a waiting
    # cancel, abort or weight update); false: a plain re-entrant lock, the anchor benchmarks/bench_serve.py
    # measures against
    fair_lock: bool = True

    def __post_init__(self) -> None:
        from codemoe.core.devices import check_device
        from codemoe.core.errors import ConfigError

        check_device(self.device)
        if self.sharded_generation not in SHARDED_GENERATION:
            raise ConfigError(
                f"'sharded_generation': {self.sharded_generation!r} is not one of {', '.join(SHARDED_GENERATION)}"
            )


class EmbeddedEngine:
    """Generation engine over an in-process model (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, config: EmbeddedEngineConfig | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or EmbeddedEngineConfig()
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.max_context = self.config.max_context or int(getattr(model.config, "max_position_embeddings", 0) or 0)
        if self.max_context <= 0:
            raise EngineError("the model config has no max_position_embeddings; set the engine's max_context")
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.weights_version = 0
        self.tokens_generated = 0
        # handed over in arrival order: a thread driving generation step after step would otherwise
        # take it back before a waiting cancel, abort, submit or weight update (measured: 0.3-0.5 s
        # for a cancel behind one 1,500-token sample on an idle machine, longer under load)
        self._lock: Any = FairRLock() if self.config.fair_lock else threading.RLock()
        self._in_lockstep = False  # inside lockstep() with the blocks gathered per forward
        self._gathered = False  # inside lockstep() with the whole model gathered
        self._rooms(sharded=False)

    def _rooms(self, *, sharded: bool) -> None:
        """KV slots, runner and scheduler for the model; a sharded model runs its own forward (the
        shared-prefix attention and lean decode read whole parameters and the engine's cache)."""
        cfg = self.config
        shared = cfg.shared_prefix_attention and supports_shared_prefix_attention(self.model) and not sharded
        # roots are read by the shared-prefix attention only
        self.kv = KVSlots(self.device, self.dtype, cfg.prefix_cache_tokens, cfg.common_prefix_tokens if shared else 0)
        lean = cfg.lean_decode and not sharded
        self.runner = ModelRunner(self.model, self.kv.cache, shared_attention=shared, lean_decode=lean)
        self.scheduler = Scheduler(self.kv, cfg.max_batch_size, cfg.max_prefill_tokens)
        self._sharded = sharded

    @property
    def common_prefix_tokens_saved(self) -> int:
        """Tokens kept (and read) once for several groups, not per group."""
        return self.kv.tokens_saved

    # ------------------------------------------------------------------------------------------
    # public interface
    # ------------------------------------------------------------------------------------------

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """Sample ``params.n`` continuations of every prompt (see :class:`codemoe.core.contracts.Engine`)."""
        params.validate()
        self._check_lockstep()
        prompt_ids = [self.encode(p) for p in prompts]
        for i, ids in enumerate(prompt_ids):
            self.check_request(ids, params, where=f"prompt {i}")
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        groups = [self._groups_for(ids, params, seed, i) for i, ids in enumerate(prompt_ids)]
        with self._lock:
            for parts in groups:
                self.scheduler.submit(parts)
        for parts in groups:
            for group in parts:
                self.wait(group)
        return [self._output(ids, parts) for ids, parts in zip(prompt_ids, groups)]

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        seed: int | None = None,
        prompt_index: int = 0,
        on_token: Callable[[TokenEvent], None] | None = None,
    ) -> list[Group]:
        """Queue one prompt without waiting (the server's path); finish with :meth:`collect`.

        ``seed`` and ``prompt_index`` pick the samples' random streams, as in :meth:`generate`.
        """
        params.validate()
        self.check_request(prompt_ids, params)
        seed = seed if seed is not None else (params.seed if params.seed is not None else secrets.randbits(63))
        parts = self._groups_for(prompt_ids, params, seed, prompt_index, on_token)
        with self._lock:
            self.scheduler.submit(parts)
        return parts

    def wait(self, group: Group) -> None:
        """Drive the engine until ``group`` is done (another thread may be driving it too)."""
        while not group.done.is_set():
            if self._in_lockstep:
                self._lockstep_step(in_session=True)
            elif not self.step():
                group.done.wait(0.01)
        if group.error is not None:
            raise EngineError(f"generation failed: {type(group.error).__name__}: {group.error}") from group.error

    def collect(self, prompt_ids: list[int], parts: list[Group]) -> GenerationOutput:
        """Wait for a submitted prompt and return its output."""
        for group in parts:
            self.wait(group)
        return self._output(prompt_ids, parts)

    def cancel(self, parts: list[Group]) -> None:
        """Stop a submitted prompt (a client went away): its samples end with finish_reason ``"abort"``."""
        with self._lock:
            self.scheduler.cancel(parts)

    def abort(self) -> None:
        """End every request in flight, waiting or running: its samples finish with ``"abort"`` and
        keep the tokens drawn so far (SGLang's ``/abort_request`` with ``abort_all``); the calls
        waiting on them return at once. Requests submitted afterwards run as usual."""
        with self._lock:
            live = [*self.scheduler.waiting, *(s.group for s in self.scheduler.running)]
            self.scheduler.cancel(list({id(g): g for g in live}.values()))

    def update_weights(self, state_dict: dict[str, Any] | None = None, path: str | None = None) -> None:
        """Load new weights, between two steps; requests in flight continue with them."""
        if (state_dict is None) == (path is None):
            raise RequestError("update_weights takes exactly one of state_dict or path")
        if path is not None:
            from codemoe.serving.checkpoint import load_state_dict

            state_dict = load_state_dict(path)
        with self._lock, torch.no_grad():
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            if missing or unexpected:
                raise EngineError(
                    f"weights do not fit the served model: missing {sorted(missing)[:5]}, "
                    f"unexpected {sorted(unexpected)[:5]} (load a checkpoint of the same architecture)"
                )
            self.weights_version += 1
            self.kv.clear_kept()

    def load_tensors(self, tensors: dict[str, Any]) -> None:
        """Copy some of the weights in (keyed as ``state_dict()``), between two steps; a name the
        model does not have, or a shape it does not take, is an :class:`EngineError` and nothing is
        copied."""
        state = self.model.state_dict()
        check_weights_fit(state, tensors, whole=False)
        with self._lock, torch.no_grad():
            for name, tensor in tensors.items():
                state[name].copy_(tensor)
            self.weights_version += 1
            self.kv.clear_kept()

    def flush_cache(self) -> None:
        """Drop what is kept of finished samples for prefix reuse (SGLang's ``/flush_cache``)."""
        with self._lock:
            self.kv.clear_kept()

    def pause(self) -> None:
        """Hold every engine step until :meth:`resume` (called from the same thread): the weights
        may then be written in place by another process sharing them (:mod:`codemoe.serving.engine_process`)."""
        self._lock.acquire()

    def resume(self) -> None:
        """Let the engine step again after :meth:`pause`, dropping what was kept of the old weights."""
        try:
            self.weights_changed()
        finally:
            self._lock.release()

    def weights_changed(self) -> None:
        """The model's parameters were changed in place (a trainer sharing it took a step): what was
        kept of the old weights (finished samples' keys and values) is dropped."""
        with self._lock:
            self.weights_version += 1
            self.kv.clear_kept()

    @contextmanager
    def lockstep(self) -> Iterator[None]:
        """Generation in step with every rank of the process group, inside the block.

        Needed when the model is sharded with FSDP2 (a trainer's policy under ``torchrun``): every
        forward gathers each block's parameters from all ranks, so every rank must run as many
        forwards. Inside the block each engine step is agreed on by all ranks (one all-reduce: does
        any rank prefill, decode, or still generate); a rank without that work runs a one-token
        forward instead. Ranks may call :meth:`generate` a different number of times; on leaving
        the block a rank keeps joining until every rank has left. A model that is not sharded
        needs nothing of this and the block is a plain one.

        With ``sharded_generation: whole`` the block instead gathers every block's parameters once
        on entry (all ranks together) and keeps them until it ends, so the ranks generate on their
        own, on the fast paths, holding the whole model meanwhile.
        """
        from torch.distributed.fsdp import FSDPModule

        if not isinstance(self.model, FSDPModule):
            yield
            return
        if self.config.sharded_generation == "whole":
            with self._whole_model():
                yield
            return
        with self._lock:
            if not self._sharded:  # first use since the trainer sharded the model: nothing is in flight
                self._rooms(sharded=True)
            self._in_lockstep = True
        try:
            yield
        finally:
            self._in_lockstep = False
            while self._lockstep_step(in_session=False):
                pass

    @contextmanager
    def _whole_model(self) -> Iterator[None]:
        """Every FSDP2 unit's parameters gathered (one all-gather each, every rank in the same
        order) and kept through the block's forwards; resharded after it."""
        from torch.distributed.fsdp import FSDPModule

        units = [m for m in self.model.modules() if isinstance(m, FSDPModule)]
        resharding = [m for m in units if m is not self.model]  # the root keeps its parameters after forward anyway
        with self._lock:
            for unit in resharding:
                unit.set_reshard_after_forward(False, recurse=False)
            for unit in units:
                unit.unshard()
            self._gathered = True
        try:
            yield
        finally:
            with self._lock:
                self._gathered = False
                for unit in resharding:
                    unit.set_reshard_after_forward(True, recurse=False)
                for unit in units:
                    unit.reshard()

    def _check_lockstep(self) -> None:
        from torch.distributed.fsdp import FSDPModule

        if not (self._in_lockstep or self._gathered) and isinstance(self.model, FSDPModule):
            raise EngineError(
                "the engine's model is sharded over the ranks (FSDP2): generate inside engine.lockstep() "
                "on every rank, so that the ranks gather each block's parameters together"
            )

    @property
    def threads_waiting(self) -> int:
        """Threads queued for the engine behind the one that holds it (a cancel, an abort, a weight
        update waiting out the step in progress); 0 when ``fair_lock`` is off (a plain lock keeps no count)."""
        return self._lock.waiting if isinstance(self._lock, FairRLock) else 0

    def health(self) -> dict[str, Any]:
        """Status, load and model facts."""
        with self._lock:
            return {
                "status": "ok",
                "engine": "embedded",
                "model": type(self.model).__name__,
                "device": str(self.device),
                "dtype": str(self.dtype).removeprefix("torch."),
                "max_context": self.max_context,
                "running": len(self.scheduler.running),
                "waiting": self.scheduler.waiting_samples(),
                "weights_version": self.weights_version,
                "tokens_generated": self.tokens_generated,
                "kv_cache_bytes": self.kv.cache.memory_bytes(),
                "routing": self.runner.records_routing,
                **self.kv.reuse_stats(),
            }

    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a prompt (lists of ids pass through)."""
        return encode_prompt(self.tokenizer, prompt, self.model.config.vocab_size)

    def check_request(self, prompt_ids: list[int], params: SamplingParams, where: str = "prompt") -> None:
        """Refuse requests that cannot be served whole (nothing is ever truncated)."""
        if not prompt_ids:
            raise RequestError(f"{where} is empty: give at least one token")
        total = len(prompt_ids) + params.max_new_tokens
        if total > self.max_context:
            raise ContextLengthError(
                f"{where} has {len(prompt_ids)} tokens and asks for max_new_tokens={params.max_new_tokens}: "
                f"{total} tokens exceed the model's context of {self.max_context}. "
                "Shorten the prompt or lower max_new_tokens."
            )
        if params.n > self.config.max_batch_size:
            raise RequestError(f"n={params.n} exceeds the engine's max_batch_size={self.config.max_batch_size}")

    # ------------------------------------------------------------------------------------------
    # one step: admit, prefill, decode, sample
    # ------------------------------------------------------------------------------------------

    def _groups_for(self, ids, params, seed, prompt_index, on_token=None) -> list[Group]:
        checker = StopChecker(self.tokenizer, self.eos_ids, list(params.stop), params.max_new_tokens, params.ignore_eos)
        return groups_for(
            ids, params, checker, seed, prompt_index, share_prefix=self.config.prefix_sharing, on_token=on_token
        )

    def step(self) -> bool:
        """Admit waiting prompts, then decode one token for every running sample; False when idle."""
        with self._lock:
            if self.scheduler.idle:
                return False
            try:
                with self.runner.inference():
                    admitted = self.scheduler.admit()
                    if admitted:
                        self._prefill(admitted)
                    if self.scheduler.running:
                        self._decode()
            except Exception as exc:
                self.scheduler.fail_all(exc)
                raise
            return True

    def _lockstep_step(self, *, in_session: bool) -> bool:
        """One engine step taken with every rank (see :meth:`lockstep`); False once every rank left."""
        import torch.distributed as dist

        with self._lock:
            joins = 0
            try:
                with self.runner.inference():
                    admitted = self.scheduler.admit() if in_session and not self.scheduler.idle else []
                    wanted = [bool(admitted), bool(admitted or self.scheduler.running), in_session]
                    flags = torch.tensor(wanted, dtype=torch.int32, device=self.device)
                    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
                    prefill, decode, session = flags.tolist()
                    if not session:
                        return False
                    if prefill and admitted:
                        self._prefill(admitted)
                    elif prefill:
                        joins += 1
                    if decode and self.scheduler.running:
                        self._decode()
                    elif decode:
                        joins += 1
                    for _ in range(joins):  # the same collectives as another rank's forward
                        self.model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=self.device), use_cache=False)
            except Exception as exc:
                self.scheduler.fail_all(exc)
                raise
            return True

    def _prefill(self, groups: list[Group]) -> None:
        """Compute each group's prompt once (one forward, the prompts packed into one row when the
        engine's attention serves the model, else right-padded; tokens reused from the prefix cache
        are copied in, not computed), then start its samples."""
        batch = self.kv.prefill_batch(groups, len(self.scheduler.running), packed=self.runner.shared_attention)
        logits, routing = self.runner.prefill(batch)  # [R, V], [R, S, layers, k]
        self.kv.place_roots(groups)
        for row, group in enumerate(groups):
            fresh = None if routing is None else routing[row, : len(group.prompt) - group.reused_len]
            first_routing = group.take_prompt_routing(fresh)
            seqs = self.scheduler.start(group)
            self._sample_and_accept(seqs, logits[row][None].expand(group.n, -1), first_routing)

    def _decode(self) -> None:
        """One token for every running sample: attend to its group's prompt and its own tokens."""
        seqs = list(self.scheduler.running)
        batch = self.kv.decode_batch(seqs, gather=not self.runner.shared_attention)
        logits, routing = self.runner.decode(batch)
        for s in seqs:
            s.length += 1
        self._sample_and_accept(seqs, logits, routing)

    def _sample_and_accept(self, seqs: list[SampleState], logits: torch.Tensor, routing: torch.Tensor | None) -> None:
        """Draw each sample's next token from its own random stream and hand it to the scheduler."""
        tokens, logprobs = draw(
            logits, [s.group.params for s in seqs], [s.key for s in seqs], [len(s.tokens) for s in seqs]
        )
        self.tokens_generated += len(seqs)
        self.scheduler.accept(seqs, tokens, logprobs, routing)

    def _output(self, prompt_ids: list[int], parts: list[Group]) -> GenerationOutput:
        seqs = sorted((s for g in parts for s in g.finished), key=lambda s: s.index)
        samples = [
            Sample(
                token_ids=s.tokens,
                text=s.group.checker.final_text(s.tokens),
                logprobs=s.logprobs,
                finish_reason=s.finish_reason or "length",
                routing=torch.stack(s.routing) if s.routing else None,
            )
            for s in seqs
        ]
        return GenerationOutput(prompt_ids, samples, parts[0].prompt_routing)


def check_weights_fit(state: dict[str, Any], tensors: dict[str, Any], *, whole: bool) -> None:
    """Raise an :class:`EngineError` naming what of ``tensors`` does not fit the model whose
    ``state_dict()`` is ``state``: names it lacks, shapes that differ, and (``whole``: a complete
    set of weights) names of it that ``tensors`` leaves out."""
    unknown = sorted(set(tensors) - set(state))
    missing = sorted(set(state) - set(tensors)) if whole else []
    wrong = sorted(k for k in tensors if k in state and tuple(tensors[k].shape) != tuple(state[k].shape))
    if unknown or missing or wrong:
        found = [f"{what} {names[:5]}" for what, names in (("unknown", unknown), ("missing", missing),
                                                           ("wrong shape", wrong)) if names]
        raise EngineError(
            f"weights do not fit the served model: {', '.join(found)} (load a checkpoint of the same architecture)"
        )


def encode_prompt(tokenizer: Any, prompt: str | list[int], vocab: int) -> list[int]:
    """Token ids of a prompt with ``tokenizer`` (lists of ids pass through), each checked to lie in
    ``[0, vocab)``; a :class:`RequestError` names what is wrong."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise RequestError("this engine has no tokenizer: give prompts as token ids")
        encoded = tokenizer.encode(prompt)
        ids = list(getattr(encoded, "ids", encoded))
    elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = list(prompt)
    else:
        raise RequestError(f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise RequestError(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
    return ids


def build_embedded_engine(config: EmbeddedEngineConfig, *, model: Any = None, tokenizer: Any = None) -> Any:
    """Embedded engine over ``model``/``tokenizer``, or over the checkpoint in ``config.model_dir``
    placed on ``config.device``. A model passed in (a trainer's policy, which the engine then
    shares) stays on its device; a ``device`` other than ``auto`` must be that one."""
    from codemoe.core.devices import resolve_device
    from codemoe.core.errors import ConfigError

    if model is None:
        if not config.model_dir:
            raise EngineError("the embedded engine needs a model: pass model=... or set model_dir")
        from codemoe.serving.checkpoint import load_checkpoint

        model, tokenizer = load_checkpoint(config.model_dir, device=config.device)
    elif config.device != "auto":
        device, where = resolve_device(config.device), next(model.parameters()).device
        if device != where:
            raise ConfigError(
                f"'device': {config.device!r} is {device}, but the model the engine is given is on {where}; "
                "the engine shares that model: set the device of the stage that holds it"
            )
    if config.process:
        from codemoe.serving.engine_process import ProcessEngine

        return ProcessEngine(model, tokenizer, config)
    return EmbeddedEngine(model, tokenizer, config)
