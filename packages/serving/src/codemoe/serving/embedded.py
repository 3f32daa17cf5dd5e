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

The engine is thread-safe: ``generate`` may be called from several threads (the HTTP server
does), and each call to :meth:`EmbeddedEngine.step` advances every request in flight.
"""

from __future__ import annotations

import inspect
import itertools
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from codemoe.serving.api import ContextLengthError, EngineError, GenerationOutput, RequestError, Sample, SamplingParams
from codemoe.serving.attention import shared_prefix_attention, supports_shared_prefix_attention
from codemoe.serving.batches import decode_batch, prefill_batch
from codemoe.serving.kv_cache import PrefixKVCache
from codemoe.serving.lean_decode import LeanDecoder
from codemoe.serving.prefix_cache import CachedSequence, PrefixCache, common_prefix
from codemoe.serving.routing import RoutingRecorder
from codemoe.serving.sampling import sample_key, sample_next
from codemoe.serving.stopping import StopChecker, eos_token_ids

__all__ = ["EmbeddedEngine", "EmbeddedEngineConfig", "TokenEvent", "build_embedded_engine"]


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


@dataclass
class TokenEvent:
    """One generated token, as streamed to ``on_token`` callbacks."""

    sample_index: int
    token_id: int
    logprob: float
    finish_reason: str | None


@dataclass(eq=False)
class _Sequence:
    """One sample in flight; it occupies suffix slot ``engine._active.index(self)``."""

    group: _Group
    index: int  # sample index within its prompt
    member: int  # position within its group (a row of the group's query block)
    key: int  # random stream key
    length: int  # positions of this sample (prompt included) already in the KV cache
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    routing: list[torch.Tensor] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass(eq=False)
class _Root:
    """Leading prompt tokens that running groups have in common, kept once in a root slot."""

    slot: int
    tokens: list[int]
    groups: int  # running groups that read it

    @property
    def length(self) -> int:
        return len(self.tokens)


@dataclass(eq=False)
class _Group:
    """One prompt with the samples it still owes."""

    prompt: list[int]
    params: SamplingParams
    checker: StopChecker
    sample_indices: list[int]
    keys: list[int]
    on_token: Callable[[TokenEvent], None] | None
    finished: list[_Sequence] = field(default_factory=list)
    prompt_routing: torch.Tensor | None = None
    slot: int = -1  # prefix slot while running
    root: _Root | None = None  # its prompt's first root.length tokens live there, the rest in its slot
    reused: CachedSequence | None = None  # kept sequence this prompt starts with
    reused_len: int = 0  # how many of its tokens the prefill skips
    error: BaseException | None = None  # set when a step failed while this group was in flight
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def n(self) -> int:
        return len(self.sample_indices)


@contextmanager
def _inference_mode(modules: list[torch.nn.Module]) -> Iterator[None]:
    """Every module in eval mode, and no MoE block recording routing statistics, inside the block;
    as they were after.

    The engine's forwards are not training data: a trainer sharing the policy reads statistics of
    its own batches only. Flags are flipped directly: ``model.eval()``/``train()`` walk the module
    tree through ``named_children`` on every call, which cost a trainer's shared policy ~1.5 ms
    per decode step (and ``nn.Module.__setattr__`` alone ~0.4 ms).
    """
    training = [m for m in modules if m.training]
    recording = [m for m in modules if m.__dict__.get("record_statistics")]
    for module in training:  # plain attributes: written straight into the instance dict
        module.__dict__["training"] = False
    for module in recording:
        module.__dict__["record_statistics"] = False
    try:
        yield
    finally:
        for module in training:
            module.__dict__["training"] = True
        for module in recording:
            module.__dict__["record_statistics"] = True


def root_runs(common: list[int], minimum: int) -> list[tuple[int, int, int]]:
    """Split sorted prompts ``0 .. len(common)`` into runs of neighbours that share a root, saving
    the most tokens.

    ``common[i]`` is how many leading tokens prompts ``i`` and ``i + 1`` share. A run ``i .. j``
    (``j > i``) shares ``min(common[i:j])`` tokens, at least ``minimum``, and keeps them once instead
    of ``j - i + 1`` times. Returns the runs ``(first, last, shared)`` of a best split (dynamic
    programming over where runs end); prompts in no run get no root. Agents' next turns are why the
    best split matters: every history starts with the same system prompt and each task's histories
    with their task prompt too, so one run of all of them would keep only the system prompt once.
    """
    n = len(common) + 1
    saved = [0] * (n + 1)  # saved[j]: the most tokens saved among prompts 0 .. j-1
    last_run: list[tuple[int, int] | None] = [None] * (n + 1)  # (first prompt, shared) of the run ending at j-1
    for j in range(1, n + 1):
        saved[j] = saved[j - 1]  # prompt j-1 in no run
        shared = None
        for i in range(j - 2, -1, -1):  # the run i .. j-1
            shared = common[i] if shared is None else min(shared, common[i])
            if shared < minimum:
                break
            if saved[i] + (j - 1 - i) * shared > saved[j]:
                saved[j], last_run[j] = saved[i] + (j - 1 - i) * shared, (i, shared)
    runs = []
    j = n
    while j > 0:
        if last_run[j] is None:
            j -= 1
            continue
        first, shared = last_run[j]
        runs.append((first, j - 1, shared))
        j = first
    return runs[::-1]


def _starts_with(prompt: list[int], head: list[int]) -> bool:
    """``prompt`` starts with ``head`` and has at least one token more."""
    return len(prompt) > len(head) and prompt[: len(head)] == head


def _root_length(group: _Group) -> int:
    return group.root.length if group.root is not None else 0


def _forward_argument_names(model: torch.nn.Module) -> tuple[str, bool]:
    """The model's name for the cache argument, and whether it accepts ``logits_to_keep``."""
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    return cache_arg, "logits_to_keep" in params


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
        self.common_prefix_tokens_saved = 0  # tokens kept (and read) once for several groups, not per group
        self._cache_arg, self._has_logits_to_keep = _forward_argument_names(model)
        self._recorder = RoutingRecorder.for_model(model)
        self._shared_attention = self.config.shared_prefix_attention and supports_shared_prefix_attention(model)
        self._modules = list(model.modules())  # for switching to inference mode around each step
        self._lean = LeanDecoder.for_model(model) if self._shared_attention and self.config.lean_decode else None
        self._cache = PrefixKVCache(self.device)
        self._kept = PrefixCache(self.config.prefix_cache_tokens) if self.config.prefix_cache_tokens > 0 else None
        self._active: list[_Sequence] = []  # running samples, in suffix slot order
        self._groups: list[_Group] = []  # running groups, in prefix slot order
        self._roots: list[_Root] = []  # in root slot order
        self._waiting: deque[_Group] = deque()
        self._lock = threading.RLock()

    # ------------------------------------------------------------------------------------------
    # public interface
    # ------------------------------------------------------------------------------------------

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """Sample ``params.n`` continuations of every prompt (see :class:`codemoe.serving.api.Engine`)."""
        params.validate()
        prompt_ids = [self.encode(p) for p in prompts]
        for i, ids in enumerate(prompt_ids):
            self.check_request(ids, params, where=f"prompt {i}")
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        groups = [self._groups_for(ids, params, seed, i) for i, ids in enumerate(prompt_ids)]
        with self._lock:
            for parts in groups:
                self._waiting.extend(parts)
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
    ) -> list[_Group]:
        """Queue one prompt without waiting (the server's path); finish with :meth:`collect`.

        ``seed`` and ``prompt_index`` pick the samples' random streams, as in :meth:`generate`.
        """
        params.validate()
        self.check_request(prompt_ids, params)
        seed = seed if seed is not None else (params.seed if params.seed is not None else secrets.randbits(63))
        parts = self._groups_for(prompt_ids, params, seed, prompt_index, on_token)
        with self._lock:
            self._waiting.extend(parts)
        return parts

    def wait(self, group: _Group) -> None:
        """Drive the engine until ``group`` is done (another thread may be driving it too)."""
        while not group.done.is_set():
            if not self.step():
                group.done.wait(0.01)
        if group.error is not None:
            raise EngineError(f"generation failed: {type(group.error).__name__}: {group.error}") from group.error

    def collect(self, prompt_ids: list[int], parts: list[_Group]) -> GenerationOutput:
        """Wait for a submitted prompt and return its output."""
        for group in parts:
            self.wait(group)
        return self._output(prompt_ids, parts)

    def cancel(self, parts: list[_Group]) -> None:
        """Stop a submitted prompt (a client went away): its samples end with finish_reason ``"abort"``."""
        with self._lock:
            for group in parts:
                if any(g is group for g in self._waiting):
                    self._waiting = deque(g for g in self._waiting if g is not group)
                    for member, (index, key) in enumerate(zip(group.sample_indices, group.keys)):
                        group.finished.append(_Sequence(group, index, member, key, 0, finish_reason="abort"))
                    group.done.set()
                running = [s for s in self._active if s.group is group]
                for seq in running:
                    seq.finish_reason = "abort"
                if running:
                    self._retire(running)

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
            if self._kept is not None:
                self._kept.clear()  # kept keys/values belong to the old weights

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
                "running": len(self._active),
                "waiting": sum(g.n for g in self._waiting),
                "weights_version": self.weights_version,
                "tokens_generated": self.tokens_generated,
                "kv_cache_bytes": self._cache.memory_bytes(),
                "routing": self._recorder is not None,
                "prefix_cache_tokens": self._kept.tokens if self._kept is not None else 0,
                "prefix_cache_reused_tokens": self._kept.reused_tokens if self._kept is not None else 0,
                "common_prefixes": len(self._roots),
                "common_prefix_tokens_saved": self.common_prefix_tokens_saved,
            }

    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a prompt (lists of ids pass through)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("this engine has no tokenizer: give prompts as token ids")
            encoded = self.tokenizer.encode(prompt)
            ids = list(getattr(encoded, "ids", encoded))
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
        else:
            raise RequestError(f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        vocab = self.model.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise RequestError(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
        return ids

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
    # scheduling
    # ------------------------------------------------------------------------------------------

    def _groups_for(self, ids, params, seed, prompt_index, on_token=None) -> list[_Group]:
        checker = StopChecker(self.tokenizer, self.eos_ids, list(params.stop), params.max_new_tokens, params.ignore_eos)
        keys = [sample_key(seed, prompt_index, j) for j in range(params.n)]
        if self.config.prefix_sharing:
            return [_Group(ids, params, checker, list(range(params.n)), keys, on_token)]
        return [_Group(ids, params, checker, [j], [keys[j]], on_token) for j in range(params.n)]

    def step(self) -> bool:
        """Admit waiting prompts, then decode one token for every running sample; False when idle."""
        with self._lock:
            if not self._waiting and not self._active:
                return False
            attention = shared_prefix_attention(self.model, self._cache, self._shared_attention)
            try:
                with torch.no_grad(), _inference_mode(self._modules), attention:
                    admitted = self._admit()
                    if admitted:
                        self._prefill(admitted)
                    if self._active:
                        self._decode()
            except Exception as exc:
                self._fail_all(exc)
                raise
            return True

    def _fail_all(self, exc: BaseException) -> None:
        """A failed step leaves the batch unusable: end every request in flight with the error."""
        for group in {id(g): g for g in [*self._groups, *self._waiting, *(s.group for s in self._active)]}.values():
            group.error = exc
            group.done.set()
        self._active.clear()
        self._groups.clear()
        self._roots.clear()
        self._waiting.clear()

    def _forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, V]`` at position ``keep[b]`` of each row (default: the last position)."""
        kwargs = {self._cache_arg: self._cache, "position_ids": positions, "attention_mask": mask, "use_cache": True}
        wanted = keep if keep is not None else torch.full((input_ids.shape[0],), input_ids.shape[1] - 1)
        columns = torch.arange(input_ids.shape[1])
        if self._has_logits_to_keep:
            # only the positions some row needs go through the LM head
            columns = torch.unique(wanted)
            kwargs["logits_to_keep"] = columns if len(columns) > 1 else 1
        if self._recorder is None:
            logits = self.model(input_ids=input_ids, **kwargs).logits
        else:
            with self._recorder.forward():
                logits = self.model(input_ids=input_ids, **kwargs).logits
        # logits: [B, len(columns), V]; pick each row's column
        return logits[torch.arange(len(wanted)), torch.searchsorted(columns.to(wanted.device), wanted)]

    def _admit(self) -> list[_Group]:
        """Waiting groups, in order, that fit the free slots and one prefill's token budget."""
        admitted: list[_Group] = []
        slots = len(self._active)
        longest = 0
        while self._waiting:
            group = self._waiting[0]
            found = self._kept.find(group.prompt) if self._kept is not None else (None, 0)
            fresh = len(group.prompt) - found[1]
            padded = max(longest, fresh) * (len(admitted) + 1)  # the prefill computes only what is not reused
            if slots + group.n > self.config.max_batch_size or (admitted and padded > self.config.max_prefill_tokens):
                break
            admitted.append(self._waiting.popleft())
            if self._kept is not None:
                group.reused, group.reused_len = found
                self._kept.use(*found)
            slots += group.n
            longest = max(longest, fresh)
        return admitted

    def _prefill(self, groups: list[_Group]) -> None:
        """Compute each group's prompt once (one right-padded forward) into its prefix slot.

        Tokens reused from the prefix cache are copied in first; only the rest is computed.
        """
        for group in groups:
            group.slot = len(self._groups)
            self._groups.append(group)
        fresh = [g.prompt[g.reused_len :] for g in groups]
        offsets = [g.reused_len for g in groups]
        room = max(max(len(g.prompt) for g in self._groups), max(offsets) + max(len(f) for f in fresh))
        samples = len(self._active) + sum(g.n for g in groups)
        self._cache.reserve(len(self._groups), room, samples, max(g.params.max_new_tokens for g in self._groups))
        for group in groups:
            if group.reused is not None:
                self._cache.write_prefix(group.slot, group.reused.keys, group.reused.values, group.reused_len)
        batch = prefill_batch(fresh, offsets, [g.slot for g in groups], self.device, self.dtype)
        self._cache.plan = batch.plan
        logits = self._forward(batch.ids, batch.positions, batch.mask, keep=batch.last)  # [R, V]
        routing = None
        if self._recorder is not None:  # [R, S, layers, k]
            routing = self._recorder.last.reshape(*batch.ids.shape, *self._recorder.last.shape[1:])
        if self._shared_attention and self.config.common_prefix_tokens > 0:
            self._split_roots(groups)
        for row, (group, tokens) in enumerate(zip(groups, fresh)):
            self._start(group, logits[row], None if routing is None else routing[row, : len(tokens)])

    def _split_roots(self, groups: list[_Group]) -> None:
        """Give prefilled groups whose prompts start with a running root's tokens that root; among
        the others, give those that start with the same ``common_prefix_tokens`` or more a new one.

        Prompts are sorted, so groups with a common start are neighbours; :func:`root_runs` splits
        them into the runs that save the most tokens. Every group keeps at least one token of its own.
        """
        alone = []
        for group in groups:
            root = next((r for r in self._roots if _starts_with(group.prompt, r.tokens)), None)
            if root is None:
                alone.append(group)
            else:
                self._join(group, root)
        order = sorted(alone, key=lambda g: g.prompt)
        common = [
            min(common_prefix(a.prompt, b.prompt), len(a.prompt) - 1, len(b.prompt) - 1)
            for a, b in itertools.pairwise(order)
        ]
        runs = [(order[i : j + 1], shared) for i, j, shared in root_runs(common, self.config.common_prefix_tokens)]
        runs.sort(key=lambda run: min(g.slot for g in run[0]))  # root slots in row order: reads are views
        for members, length in runs:
            root = _Root(len(self._roots), members[0].prompt[:length], 0)
            self._roots.append(root)
            self._cache.reserve(0, 0, 0, 0, len(self._roots), length)
            self._cache.write_root(root.slot, members[0].slot, length)
            for group in members:
                self._join(group, root)

    def _join(self, group: _Group, root: _Root) -> None:
        """``group``'s prompt starts with ``root``'s tokens: read them there, keep the rest in its slot."""
        self._cache.drop_leading(group.slot, root.length, len(group.prompt))
        if root.groups > 0:
            self.common_prefix_tokens_saved += root.length
        root.groups += 1
        group.root = root

    def _start(self, group: _Group, logits: torch.Tensor, routing: torch.Tensor | None) -> None:
        """Put a prefilled group's samples in the batch and draw their first tokens from ``logits [V]``."""
        first_routing = None
        if routing is not None:
            reused = [] if group.reused is None else [group.reused.routing[: group.reused_len]]
            group.prompt_routing = torch.cat([*reused, routing])  # [P, layers, k]
            first_routing = group.prompt_routing[-1:].expand(group.n, -1, -1)
        group.reused = None  # copied into the slot; the prefix cache may evict it now
        seqs = [
            _Sequence(group, index, member, key, len(group.prompt))
            for member, (index, key) in enumerate(zip(group.sample_indices, group.keys))
        ]
        self._active.extend(seqs)
        self._sample_and_accept(seqs, logits[None].expand(group.n, -1), first_routing)

    def _decode(self) -> None:
        """One token for every running sample: attend to its group's prompt and its own tokens."""
        seqs = list(self._active)
        batch = decode_batch(
            [s.tokens[-1] for s in seqs],
            [s.length for s in seqs],
            [len(s.group.prompt) for s in seqs],
            [s.group.slot for s in seqs],
            [s.member for s in seqs],
            [len(g.prompt) - _root_length(g) for g in self._groups],  # what each prefix slot holds
            gather=not self._shared_attention,
            device=self.device,
            dtype=self.dtype,
            group_root=[g.root.slot if g.root is not None else -1 for g in self._groups],
            root_len=[r.length for r in self._roots],
        )
        self._cache.plan = batch.plan
        if self._lean is not None:
            logits, routing = self._lean.step(
                batch.ids[:, 0], batch.positions[:, 0], self._cache, self._recorder is not None
            )
        else:
            logits = self._forward(batch.ids, batch.positions, batch.mask)
            routing = self._recorder.last if self._recorder is not None else None  # [B, layers, k]
        for s in seqs:
            s.length += 1
        self._sample_and_accept(seqs, logits, routing)

    def _draw(self, seqs: list[_Sequence], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """Next token and its log-prob for each sample, from its own random stream."""
        params = [s.group.params for s in seqs]
        tokens, logprobs = sample_next(
            logits,
            temperature=torch.tensor([p.temperature for p in params], device=self.device),
            top_p=torch.tensor([p.top_p for p in params], device=self.device),
            top_k=torch.tensor([p.top_k for p in params], device=self.device),
            keys=torch.tensor([s.key for s in seqs], device=self.device),
            steps=torch.tensor([len(s.tokens) for s in seqs], device=self.device),
        )
        return tokens.tolist(), logprobs.tolist()

    def _sample_and_accept(self, seqs: list[_Sequence], logits: torch.Tensor, routing: torch.Tensor | None) -> None:
        """Draw each sample's next token, record it, and retire the samples that finished."""
        tokens, logprobs = self._draw(seqs, logits)
        rows = routing.unbind(0) if routing is not None else [None] * len(seqs)
        finished = []
        for seq, token, logprob, row in zip(seqs, tokens, logprobs, rows):
            seq.tokens.append(token)
            seq.logprobs.append(logprob)
            if row is not None:
                seq.routing.append(row)
            seq.finish_reason = seq.group.checker.check(seq.tokens)
            if seq.group.on_token is not None:
                seq.group.on_token(TokenEvent(seq.index, token, logprob, seq.finish_reason))
            if seq.finish_reason is not None:
                finished.append(seq)
        self.tokens_generated += len(seqs)
        if finished:
            self._retire(finished)

    def _retire(self, finished: list[_Sequence]) -> None:
        """Remove finished samples (and groups), keeping the running ones in slots ``0 .. B-1`` (``0 .. G-1``)."""
        index = {id(s): i for i, s in enumerate(self._active)}
        if self._kept is not None:
            for seq in finished:
                self._keep(seq, index[id(seq)])
        for row in sorted((index[id(s)] for s in finished), reverse=True):
            last = len(self._active) - 1
            if row != last:
                moved = self._active[last]
                self._cache.move_row(last, row, moved.length - len(moved.group.prompt))
                self._active[row] = moved
            self._active.pop()
        for seq in finished:
            group = seq.group
            group.finished.append(seq)
            if len(group.finished) == group.n:
                self._release(group)
                group.done.set()

    def _keep(self, seq: _Sequence, row: int) -> None:
        """Put a finished sample's prompt and completion (all but its last token, never fed) in the prefix cache."""
        prompt, generated = len(seq.group.prompt), len(seq.tokens) - 1
        root = seq.group.root
        keys, values = self._cache.sequence(
            seq.group.slot, prompt, row, generated, *((root.slot, root.length) if root is not None else ())
        )
        routing = None
        if seq.group.prompt_routing is not None:
            # position p's experts: the prompt's, then those that produced tokens 1 .. G-1
            routing = torch.cat([seq.group.prompt_routing, *(r[None] for r in seq.routing[1:])])
        self._kept.add(CachedSequence(seq.group.prompt + seq.tokens[:-1], keys, values, routing))

    def _release(self, group: _Group) -> None:
        """Free a finished group's prefix slot by moving the last running group into it."""
        moved = self._groups.pop()
        if moved is not group:
            self._cache.move_group(moved.slot, group.slot, len(moved.prompt) - _root_length(moved))
            moved.slot = group.slot
            self._groups[group.slot] = moved
        root = group.root
        if root is not None:
            root.groups -= 1
            if root.groups == 0:  # free its slot: the last root moves in
                last = self._roots.pop()
                if last is not root:
                    self._cache.move_root(last.slot, root.slot, last.length)
                    last.slot = root.slot
                    self._roots[root.slot] = last

    def _output(self, prompt_ids: list[int], parts: list[_Group]) -> GenerationOutput:
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


def build_embedded_engine(config: EmbeddedEngineConfig, *, model: Any = None, tokenizer: Any = None) -> EmbeddedEngine:
    """Embedded engine over ``model``/``tokenizer``, or over the checkpoint in ``config.model_dir``."""
    if model is None:
        if not config.model_dir:
            raise EngineError("the embedded engine needs a model: pass model=... or set model_dir")
        from codemoe.serving.checkpoint import load_checkpoint

        model, tokenizer = load_checkpoint(config.model_dir)
    return EmbeddedEngine(model, tokenizer, config)
