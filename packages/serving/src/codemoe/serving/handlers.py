"""What each HTTP endpoint does, independent of the HTTP transport.

A handler takes the parsed JSON body and returns ``(status, json)`` or, for streaming requests,
``(status, iterator of server-sent-event payloads)``. Bad requests raise :class:`HttpError`.
"""

from __future__ import annotations

import base64
import json
import queue
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pydantic
import torch
from codemoe.core.contracts import (
    ContextLengthError,
    EngineError,
    GenerationOutput,
    RequestError,
    Sample,
    SamplingParams,
)
from codemoe.serving.embedded import EmbeddedEngine, TokenEvent
from codemoe.serving.protocol import (
    AbortRequest,
    BeginWeightUpdateRequest,
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    InitWeightsUpdateGroupRequest,
    UpdateWeightsFromDistributedRequest,
    UpdateWeightsFromTensorRequest,
    UpdateWeightsRequest,
)
from codemoe.serving.stopping import StopChecker

__all__ = ["HttpError", "ServingApp"]

Result = tuple[int, Any]


class HttpError(Exception):
    """An error answered as ``{"error": {...}}`` with an HTTP status (OpenAI's error shape)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def _parse(schema: type[pydantic.BaseModel], body: Any) -> Any:
    if not isinstance(body, dict):
        raise HttpError(400, "the request body must be a JSON object")
    try:
        return schema.model_validate(body)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise HttpError(400, f"invalid '{where}': {first['msg']}", param=where) from None


@dataclass
class _Prepared:
    """A request turned into token ids and sampling parameters."""

    prompts: list[list[int]]
    params: SamplingParams
    seed: int


@dataclass
class _Live:
    """A ``/generate`` request in flight: its prompts submitted so far, and whether it was aborted."""

    jobs: list[tuple[list[int], Any]] = field(default_factory=list)
    aborted: bool = False


class ServingApp:
    """The endpoints of ``codemoe serve`` over one :class:`EmbeddedEngine`."""

    def __init__(self, engine: EmbeddedEngine, model_name: str, model_path: str = "") -> None:
        self.engine = engine
        self.model_name = model_name
        self.model_path = model_path
        self.weight_version = "default"  # SGLang's: set by a weight update that names one
        # (decoder layers, those with a codemoe MoE block): SGLang reports routed experts for every layer
        self._layers = _decoder_layers(engine.model)
        self._live: dict[str, _Live] = {}  # /generate requests in flight, by id (for /abort_request)
        self._live_lock = threading.Lock()
        self._tensors: _TensorSession | None = None  # the open /begin_weight_update session
        self._expected: dict[str, set[str]] | None = None  # checkpoint names by layer, once asked
        self._groups: dict[str, Any] = {}  # weight-update process groups joined, by name
        self.routes: dict[tuple[str, str], Callable[[Any], Result]] = {
            ("GET", "/health"): self.health,
            ("GET", "/health_generate"): self.health_generate,
            ("GET", "/v1/models"): self.models,
            ("GET", "/get_model_info"): self.model_info,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("POST", "/generate"): self.generate,
            ("POST", "/update_weights_from_disk"): self.update_weights_from_disk,
            ("POST", "/begin_weight_update"): self.begin_weight_update,
            ("POST", "/update_weights_from_tensor"): self.update_weights_from_tensor,
            ("POST", "/end_weight_update"): self.end_weight_update,
            ("POST", "/init_weights_update_group"): self.init_weights_update_group,
            ("POST", "/update_weights_from_distributed"): self.update_weights_from_distributed,
            ("GET", "/get_server_info"): self.server_info,
            ("POST", "/abort_request"): self.abort_request,
            ("POST", "/flush_cache"): self.flush_cache,
            ("GET", "/flush_cache"): self.flush_cache,
        }

    def handle(self, method: str, path: str, body: Any) -> Result:
        """Dispatch one request; unknown paths are 404, wrong methods 405."""
        handler = self.routes.get((method, path))
        if handler is None:
            allowed = [m for m, p in self.routes if p == path]
            if allowed:
                raise HttpError(405, f"{path} accepts {', '.join(allowed)}, not {method}")
            paths = sorted({p for _, p in self.routes})
            raise HttpError(404, f"no endpoint {path}; endpoints: {', '.join(paths)}")
        try:
            return handler(body)
        except ContextLengthError as exc:
            raise HttpError(400, str(exc), code="context_length_exceeded") from None
        except RequestError as exc:
            raise HttpError(400, str(exc)) from None

    # ---------------------------------------------------------------------------------- status

    def health(self, _body: Any) -> Result:
        return 200, self.engine.health()

    def health_generate(self, _body: Any) -> Result:
        self.engine.generate([[0]], SamplingParams(max_new_tokens=1, temperature=0))
        return 200, {"status": "ok"}

    def models(self, _body: Any) -> Result:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "codemoe",
            "max_model_len": self.engine.max_context,
        }
        return 200, {"object": "list", "data": [card]}

    def model_info(self, _body: Any) -> Result:
        return 200, {
            "model_path": self.model_path or self.model_name,
            "tokenizer_path": self.model_path or self.model_name,
            "is_generation": True,
            "weight_version": self.weight_version,
        }

    def server_info(self, _body: Any) -> Result:
        """What a client checks before relying on the server: the embedded engine honours every
        sampling seed (SGLang only with ``--enable-deterministic-inference``)."""
        return 200, {
            "model_path": self.model_path or self.model_name,
            "enable_deterministic_inference": True,
            "tp_size": 1,
            "weight_version": self.weight_version,
            "max_total_num_tokens": self.engine.max_context,
        }

    def update_weights_from_disk(self, body: Any) -> Result:
        req = _parse(UpdateWeightsRequest, body)
        try:
            self.engine.update_weights(path=req.model_path)
        except EngineError as exc:
            return 400, {"success": False, "message": str(exc), "num_paused_requests": 0}
        self.model_path = req.model_path
        message = f"weights loaded from {req.model_path}"
        if req.weight_version is not None:
            self.weight_version = req.weight_version
            message += f" Weight version updated to {req.weight_version}."
        return 200, {"success": True, "message": message, "num_paused_requests": 0}

    def begin_weight_update(self, body: Any) -> Result:
        """Open a session for tensor updates (SGLang needs one around them since 0.5.23)."""
        _parse(BeginWeightUpdateRequest, body)
        if self._expected is None:  # the model's checkpoint names by layer: the same for every update
            self._expected = checkpoint_layers(self.engine.model)
        self._tensors = _TensorSession(self.engine.model, self._expected)
        return 200, {"success": True, "message": "weight update session opened"}

    def update_weights_from_tensor(self, body: Any) -> Result:
        """One bucket of checkpoint-format tensors: each decoder layer is loaded once all of its
        tensors have come (its experts convert together), the rest at once."""
        from codemoe.serving.weight_push import load_bucket

        req = _parse(UpdateWeightsFromTensorRequest, body)
        if self._tensors is None:
            return 400, {"success": False, "message": "update_weights_from_tensor must run between "
                         "begin_weight_update() and end_weight_update()"}
        if req.load_format is not None:
            return 400, {"success": False, "message": f"load_format {req.load_format!r}: codemoe serve loads "
                         "(name, tensor) lists only (load_format null)"}
        try:
            tensors = load_bucket(req.serialized_named_tensors[0])
        except ValueError as exc:
            return 400, {"success": False, "message": f"the weights were not loaded: {exc}"}
        return self._load_bucket(tensors, req.flush_cache, req.weight_version)

    def _load_bucket(self, tensors: list[tuple[str, Any]], flush: bool, version: str | None) -> Result:
        assert self._tensors is not None
        try:
            ready = self._tensors.add(tensors)
            if ready:
                self.engine.load_tensors(ready)
        except (ValueError, EngineError) as exc:
            return 400, {"success": False, "message": f"the weights were not loaded: {exc}"}
        if flush:
            self.engine.flush_cache()
        if version is not None:
            self.weight_version = version
        return 200, {"success": True, "message": "Success"}

    def end_weight_update(self, _body: Any) -> Result:
        """Close the session; a layer some of whose tensors never came is an error naming them."""
        session, self._tensors = self._tensors, None
        if session is None:
            return 400, {"success": False, "message": "no weight update session is open (begin_weight_update)"}
        missing = session.missing()
        if missing:
            return 400, {"success": False, "message": f"layers left half loaded, missing {missing[:5]}"}
        return 200, {"success": True, "message": "weight update session closed"}

    def init_weights_update_group(self, body: Any) -> Result:
        """Join the trainer's weight-update process group (answers once it has formed)."""
        from codemoe.serving.weight_push import join_group

        req = _parse(InitWeightsUpdateGroupRequest, body)
        device = next(iter(self.engine.model.parameters())).device
        if req.backend == "nccl" and device.type != "cuda":
            return 400, {"success": False, "message": f"backend nccl needs the model on a GPU; it is on {device}"}
        if device.type == "cuda":
            torch.cuda.set_device(device)
        try:
            self._groups[req.group_name] = join_group(req.master_address, req.master_port, req.rank_offset,
                                                      req.world_size, req.group_name, req.backend, 600.0)
        except (RuntimeError, ValueError) as exc:
            return 400, {"success": False, "message": f"Failed to initialize custom process group: {exc}."}
        return 200, {"success": True, "message": "Succeeded to initialize custom process group."}

    def update_weights_from_distributed(self, body: Any) -> Result:
        """One bucket broadcast over a joined group; loaded like a tensor bucket."""
        from codemoe.serving.weight_push import receive_bucket

        req = _parse(UpdateWeightsFromDistributedRequest, body)
        group = self._groups.get(req.group_name)
        if group is None:
            return 400, {"success": False, "message": f"Group {req.group_name} not in {sorted(self._groups)}. "
                         "Please call `init_weights_update_group` first."}
        if self._tensors is None:
            return 400, {"success": False, "message": "update_weights_from_distributed must run between "
                         "begin_weight_update() and end_weight_update()"}
        device = next(iter(self.engine.model.parameters())).device
        try:
            if req.load_format not in (None, "flattened_bucket"):
                raise ValueError(f"load_format {req.load_format!r} (codemoe serve: null or flattened_bucket)")
            received = receive_bucket(group, req.names, req.dtypes, req.shapes, device,
                                      flattened=req.load_format == "flattened_bucket")
        except (RuntimeError, ValueError) as exc:
            return 400, {"success": False, "message": f"Failed to receive weights: {exc}"}
        return self._load_bucket(received, req.flush_cache, req.weight_version)

    def abort_request(self, body: Any) -> Result:
        """End requests in flight (all, or the one ``rid`` names): their samples finish with ``abort``."""
        req = _parse(AbortRequest, body)
        with self._live_lock:
            chosen = list(self._live.values()) if req.abort_all else [self._live[req.rid]] if req.rid in self._live else []
            for live in chosen:  # prompts of these requests not yet submitted are cancelled as they are
                live.aborted = True
            submitted = [parts for live in chosen for _, parts in live.jobs]
        for parts in submitted:
            self.engine.cancel(parts)
        return 200, None

    def flush_cache(self, _body: Any) -> Result:
        """Drop what the engine keeps of finished samples for prefix reuse."""
        self.engine.flush_cache()
        return 200, {"success": True, "message": "Cache flushed."}

    # ---------------------------------------------------------------------------------- helpers

    def _check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise HttpError(
                404, f"model '{name}' does not exist; this server serves '{self.model_name}'", param="model"
            )

    def _prepare(self, prompts: list[Any], params: SamplingParams, seed: int | None) -> _Prepared:
        params.validate()
        ids = [self.engine.encode(p) for p in prompts]
        if not ids:
            raise HttpError(400, "no prompt given", param="prompt")
        for i, prompt in enumerate(ids):
            self.engine.check_request(prompt, params, where=f"prompt {i}")
        return _Prepared(ids, params, seed if seed is not None else secrets.randbits(63))

    def _run(self, prepared: _Prepared) -> list[GenerationOutput]:
        parts = [
            self.engine.submit(ids, prepared.params, seed=prepared.seed, prompt_index=i)
            for i, ids in enumerate(prepared.prompts)
        ]
        return [self.engine.collect(ids, p) for ids, p in zip(prepared.prompts, parts)]

    def _stream(self, prepared: _Prepared) -> Iterator[tuple[int, TokenEvent]]:
        """(prompt index, token event) as the engine produces them, until every sample ends."""
        events: queue.Queue[tuple[int, TokenEvent]] = queue.Queue()
        parts = [
            group
            for i, ids in enumerate(prepared.prompts)
            for group in self.engine.submit(
                ids, prepared.params, seed=prepared.seed, prompt_index=i, on_token=lambda e, i=i: events.put((i, e))
            )
        ]
        remaining = len(prepared.prompts) * prepared.params.n
        try:
            while remaining:
                try:
                    item = events.get(timeout=0.01)
                except queue.Empty:
                    self.engine.step()
                    continue
                remaining -= item[1].finish_reason is not None
                yield item
        finally:
            if remaining:  # the client went away mid-stream: stop generating for it
                self.engine.cancel(parts)

    def _token_text(self, token: int) -> str:
        return self.engine.tokenizer.decode([token]) if self.engine.tokenizer is not None else ""

    def _usage(self, outputs: list[GenerationOutput]) -> dict[str, int]:
        prompt = sum(len(o.prompt_token_ids) for o in outputs)
        completion = sum(len(s.token_ids) for o in outputs for s in o.samples)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    # ---------------------------------------------------------------------------------- OpenAI

    def completions(self, body: Any) -> Result:
        req = _parse(CompletionRequest, body)
        self._check_model(req.model)
        prompt = req.prompt
        prompts = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else list(prompt)
        params = SamplingParams(
            req.n, req.temperature, req.top_p, req.top_k, req.max_tokens, req.stop, req.seed, req.ignore_eos
        )
        prepared = self._prepare(prompts, params, req.seed)
        head = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
        }
        if req.stream:
            return 200, self._stream_completions(prepared, head, req)
        outputs = self._run(prepared)
        choices = []
        for i, out in enumerate(outputs):
            for j, sample in enumerate(out.samples):
                choice = {
                    "index": i * params.n + j,
                    "text": sample.text,
                    "finish_reason": sample.finish_reason,
                    "logprobs": self._completion_logprobs(sample, req) if req.logprobs is not None else None,
                }
                if req.return_token_ids:
                    choice.update(prompt_token_ids=out.prompt_token_ids, token_ids=sample.token_ids)
                choices.append(choice)
        return 200, {**head, "choices": choices, "usage": self._usage(outputs)}

    def _completion_logprobs(self, sample: Sample, req: CompletionRequest) -> dict[str, Any]:
        tokens = [f"token_id:{t}" if req.return_tokens_as_token_ids else self._token_text(t) for t in sample.token_ids]
        offsets, at = [], 0
        for token in tokens:
            offsets.append(at)
            at += len(token)
        top = [{tok: lp} for tok, lp in zip(tokens, sample.logprobs)] if req.logprobs else None
        return {"tokens": tokens, "token_logprobs": sample.logprobs, "top_logprobs": top, "text_offset": offsets}

    def _stream_completions(self, prepared: _Prepared, head: dict[str, Any], req: CompletionRequest) -> Iterator[str]:
        texts = _StreamTexts(self.engine, prepared.params)
        for i, event in self._stream(prepared):
            index = i * prepared.params.n + event.sample_index
            delta = texts.advance(index, event)
            logprobs = None
            if req.logprobs is not None:
                token = (
                    f"token_id:{event.token_id}" if req.return_tokens_as_token_ids else self._token_text(event.token_id)
                )
                top = [{token: event.logprob}] if req.logprobs else None
                logprobs = {
                    "tokens": [token],
                    "token_logprobs": [event.logprob],
                    "top_logprobs": top,
                    "text_offset": [0],
                }
            choice = {"index": index, "text": delta, "finish_reason": event.finish_reason, "logprobs": logprobs}
            yield json.dumps({**head, "choices": [choice]})

    def chat_completions(self, body: Any) -> Result:
        req = _parse(ChatCompletionRequest, body)
        self._check_model(req.model)
        prompt = self._chat_prompt(req)
        max_new = req.new_tokens(self.engine.max_context - len(prompt))
        params = SamplingParams(
            req.n, req.temperature, req.top_p, req.top_k, max_new, req.stop, req.seed, req.ignore_eos
        )
        prepared = self._prepare([prompt], params, req.seed)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": self.model_name}
        if req.stream:
            return 200, self._stream_chat(prepared, head, req)
        outputs = self._run(prepared)
        choices = [
            {
                "index": j,
                "message": {"role": "assistant", "content": sample.text},
                "finish_reason": sample.finish_reason,
                "logprobs": {"content": self._chat_logprobs(sample.token_ids, sample.logprobs)}
                if req.logprobs
                else None,
            }
            for j, sample in enumerate(outputs[0].samples)
        ]
        return 200, {**head, "object": "chat.completion", "choices": choices, "usage": self._usage(outputs)}

    def _chat_prompt(self, req: ChatCompletionRequest) -> list[int]:
        tokenizer = self.engine.tokenizer
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise HttpError(400, "the served model's tokenizer has no chat template; use /v1/completions")
        messages = [m.model_dump() for m in req.messages]
        encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return list(ids)

    def _chat_logprobs(self, tokens: list[int], logprobs: list[float]) -> list[dict[str, Any]]:
        out = []
        for token, logprob in zip(tokens, logprobs):
            text = self._token_text(token)
            out.append({"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []})
        return out

    def _stream_chat(self, prepared: _Prepared, head: dict[str, Any], req: ChatCompletionRequest) -> Iterator[str]:
        head = {**head, "object": "chat.completion.chunk"}
        for j in range(prepared.params.n):
            choice = {
                "index": j,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
                "logprobs": None,
            }
            yield json.dumps({**head, "choices": [choice]})
        texts = _StreamTexts(self.engine, prepared.params)
        for _, event in self._stream(prepared):
            delta = texts.advance(event.sample_index, event)
            logprobs = {"content": self._chat_logprobs([event.token_id], [event.logprob])} if req.logprobs else None
            choice = {
                "index": event.sample_index,
                "delta": {"content": delta},
                "finish_reason": event.finish_reason,
                "logprobs": logprobs,
            }
            yield json.dumps({**head, "choices": [choice]})

    # ---------------------------------------------------------------------------------- SGLang

    def generate(self, body: Any) -> Result:
        req = _parse(GenerateRequest, body)
        try:
            prompts, batch = req.prompts()
            samplings, per_prompt = req.per_prompt_sampling(len(prompts))
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        live = _Live()
        rid = req.rid if isinstance(req.rid, str) and req.rid else uuid.uuid4().hex
        with self._live_lock:
            self._live[rid] = live
        try:
            return self._generate(req, rid, live, prompts, samplings, per_prompt, batch)
        finally:
            with self._live_lock:
                self._live.pop(rid, None)

    def _generate(self, req: GenerateRequest, rid: str, live: _Live, prompts: list, samplings: list,
                  per_prompt: bool, batch: bool) -> Result:
        for i, (prompt, sp) in enumerate(zip(prompts, samplings)):
            params = SamplingParams(
                sp.n,
                sp.temperature,
                sp.top_p,
                max(sp.top_k, 0),
                sp.max_new_tokens,
                sp.stop,
                sp.sampling_seed,
                sp.ignore_eos,
            )
            prepared = self._prepare([prompt], params, sp.sampling_seed)
            # a shared sampling dict numbers the prompts; per-prompt dicts carry their own seeds
            index = 0 if per_prompt else i
            parts = self.engine.submit(prepared.prompts[0], params, seed=prepared.seed, prompt_index=index)
            with self._live_lock:  # an abort either sees these parts or is seen here
                live.jobs.append((prepared.prompts[0], parts))
                aborted = live.aborted
            if aborted:
                self.engine.cancel(parts)
        outputs = [self.engine.collect(ids, parts) for ids, parts in live.jobs]
        results = [self._generate_result(out, sample, req, f"{rid}-{n}" if len(live.jobs) > 1 or batch else rid)
                   for n, out in enumerate(outputs) for sample in out.samples]
        return 200, results if batch or len(results) > 1 else results[0]

    def _generate_result(self, out: GenerationOutput, sample: Sample, req: GenerateRequest, rid: str) -> dict[str, Any]:
        if sample.finish_reason == "length":
            finish: dict[str, Any] = {"type": "length", "length": len(sample.token_ids)}
        elif sample.finish_reason == "abort":
            finish = {"type": "abort", "message": "Abort before prefill" if not sample.token_ids else "Abort in waiting queue"}
        else:
            last = sample.token_ids[-1]
            finish = {"type": "stop", "matched": last if last in self.engine.eos_ids else None}
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(out.prompt_token_ids),
            "completion_tokens": len(sample.token_ids),
            "weight_version": self.weight_version,
        }
        if req.return_logprob:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(sample.logprobs, sample.token_ids)]
        if req.return_routed_experts:
            meta["routed_experts"] = _routed_experts(out, sample, self._layers, req.routed_experts_start_len)
        result: dict[str, Any] = {"text": sample.text, "output_ids": sample.token_ids, "meta_info": meta}
        if req.return_prompt_token_ids:
            result["prompt_token_ids"] = list(out.prompt_token_ids)
        return result


def _decoder_layers(model: Any) -> tuple[int, list[int]]:
    from codemoe.core.moe import moe_blocks

    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    routed = [block.layer for block in moe_blocks(model)]
    return (count if count is not None else max(routed, default=-1) + 1), routed


def _routed_experts(out: GenerationOutput, sample: Sample, layers: tuple[int, list[int]], start: int) -> str | None:
    """SGLang's encoding: base64 of int32 ``[prompt + completion - 1 - start, decoder layers, k]``,
    position order from ``start``; a dense layer's rows are zeros, as SGLang's capture buffer leaves them."""
    if sample.routing is None or out.prompt_routing is None:
        return None
    import torch

    moe = torch.cat([out.prompt_routing[:-1], sample.routing])  # [positions, moe layers, k]
    count, routed = layers
    rows = moe.new_zeros(moe.shape[0], count, moe.shape[2])
    rows[:, routed] = moe
    rows = rows[min(start, len(out.prompt_token_ids)) :].to(torch.int32).contiguous()
    return base64.b64encode(rows.numpy().tobytes()).decode()


class _StreamTexts:
    """Turns token events into text deltas: decoded text held back until it cannot end in a stop string."""

    def __init__(self, engine: EmbeddedEngine, params: SamplingParams) -> None:
        self.tokenizer = engine.tokenizer
        self.checker = StopChecker(engine.tokenizer, engine.eos_ids, list(params.stop), params.max_new_tokens, False)
        self.hold = max((len(s) for s in params.stop), default=1) - 1
        self.tokens: dict[int, list[int]] = {}
        self.sent: dict[int, int] = {}

    def advance(self, index: int, event: TokenEvent) -> str:
        tokens = self.tokens.setdefault(index, [])
        tokens.append(event.token_id)
        if self.tokenizer is None:
            return ""
        if event.finish_reason is not None:
            target = self.checker.final_text(tokens)
        else:
            target = self.tokenizer.decode(tokens, skip_special_tokens=True).rstrip("\ufffd")
            target = target[: len(target) - self.hold] if self.hold else target
        sent = self.sent.get(index, 0)
        self.sent[index] = max(sent, len(target))
        return target[sent:]


def checkpoint_layers(model: Any) -> dict[str, set[str]]:
    """The model's checkpoint names by decoder layer (converted on the meta device: no copies)."""
    from codemoe.core.models.checkpoint_names import layer_of, to_checkpoint

    meta = ((name, torch.empty_like(value, device="meta")) for name, value in model.state_dict().items())
    layers: dict[str, set[str]] = {}
    for name, _ in to_checkpoint(model, meta):
        layers.setdefault(layer_of(name), set()).add(name)
    return layers


class _TensorSession:
    """Checkpoint-format tensors of one weight-update session, kept by decoder layer until the
    layer is whole (:func:`codemoe.core.models.checkpoint_names.from_checkpoint` converts a layer
    at a time)."""

    def __init__(self, model: Any, expected: dict[str, set[str]]) -> None:
        self.model, self.expected = model, expected
        self.pending: dict[str, dict[str, Any]] = {}

    def add(self, tensors: list[tuple[str, Any]]) -> dict[str, Any]:
        """Keep ``tensors``; the model-format tensors of every layer they completed."""
        from codemoe.core.models.checkpoint_names import from_checkpoint, layer_of

        touched = set()
        for name, tensor in tensors:
            layer = layer_of(name)
            if name not in self.expected.get(layer, ()):
                raise ValueError(f"{name!r} is not a weight of this model's checkpoint")
            self.pending.setdefault(layer, {})[name] = tensor
            touched.add(layer)
        ready: dict[str, Any] = {}
        for layer in touched:
            if set(self.pending[layer]) == self.expected[layer]:
                ready.update(from_checkpoint(self.model, self.pending.pop(layer)))
        return ready

    def missing(self) -> list[str]:
        return sorted(n for layer, got in self.pending.items() for n in self.expected[layer] - set(got))
