"""Remote engines: drive an HTTP server (``codemoe serve``, SGLang, any OpenAI-compatible one).

- ``openai``: ``/v1/completions`` with ``logprobs``, ``return_tokens_as_token_ids`` and
  ``return_token_ids`` (extensions served by codemoe and vLLM); weights through ``/update_weights_from_disk`` where the server has it.
- ``sglang``: SGLang's native ``/generate`` with ``return_logprob``, ``return_prompt_token_ids`` (the
  server's own tokenization of a text prompt) and, for routing replay, ``return_routed_experts``
  (SGLang reports every decoder layer; the engine keeps the model's MoE layers, in the layout of
  :class:`~codemoe.core.contracts.Sample`). Weights go ``weight_sync``'s way with a
  ``weight_version`` that every later sample must carry: in buckets in the requests
  (``/update_weights_from_tensor``, the default), broadcast over a process group
  (``/update_weights_from_distributed``) or as a checkpoint (``/update_weights_from_disk``);
  :mod:`codemoe.serving.weight_push`. Samples of one prompt go as ``n`` copies in
  one batch, each with its own seed, so SGLang's radix cache shares the prompt; SGLang honours the
  seeds only when launched with ``--enable-deterministic-inference`` (the engine warns once when not).

Both follow the log-prob convention of :mod:`codemoe.core.contracts.engine`; for SGLang that holds when it
runs without ``SGLANG_RETURN_ORIGINAL_LOGPROB`` (its default returns log-probs after temperature).

Several servers: ``base_url`` is one URL or a list. A call's prompts are split, whole, over the live
servers and the parts are sent concurrently; a server that fails (refused or reset connection, timeout,
HTTP 5xx, an answer that is not one) is left out for ``cooldown_s`` and its part is sent again to the
others, for up to ``retry_rounds`` rounds; a 4xx (:class:`RequestError`) is the request's fault and is
never re-sent. Weight updates go to every server with one ``weight_version``; a server that misses one
serves nothing until a later update reaches it.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from codemoe.core.contracts import EngineError, GenerationOutput, RequestError, Sample, SamplingParams
from codemoe.core.errors import ConfigError
from codemoe.serving.sampling import sample_key
from codemoe.serving.weight_push import Refused, SyncGroup, WeightSession, post_update

__all__ = [
    "OpenAIEngine",
    "OpenAIEngineConfig",
    "SGLangEngine",
    "SGLangEngineConfig",
    "build_openai_engine",
    "build_sglang_engine",
]

T = TypeVar("T")
_SEED_MASK = (1 << 63) - 1  # seeds in the signed 64-bit range servers accept


@dataclass
class OpenAIEngineConfig:
    """Options of the ``openai`` engine."""

    base_url: str | list[str] = "http://127.0.0.1:8000"  # server root(s); the engine appends /v1/...
    model: str = ""  # served model name; "" takes the first one /v1/models lists
    api_key: str = "EMPTY"  # sent as a bearer token
    timeout_s: float = 600.0  # per HTTP request
    sync_dir: str = ""  # where update_weights(state_dict=...) writes a checkpoint the servers can read
    cooldown_s: float = 30.0  # how long a server that failed is left out
    retry_rounds: int = 3  # rounds of sending failed parts to the other servers before an EngineError

    def __post_init__(self) -> None:
        _check_servers(self.base_url, self.cooldown_s, self.retry_rounds)


@dataclass
class SGLangEngineConfig:
    """Options of the ``sglang`` engine."""

    base_url: str | list[str] = "http://127.0.0.1:30000"  # SGLang's default port; a list: several servers
    timeout_s: float = 600.0  # per HTTP request
    return_routing: bool = False  # ask for routed experts (SGLang needs --enable-return-routed-experts)
    # How new weights reach the servers: "tensor" posts them in buckets to /update_weights_from_tensor
    # (in the request, no disk); "disk" writes a checkpoint to sync_dir and posts
    # /update_weights_from_disk (servers that share a file system); "distributed" broadcasts them over
    # a process group the servers join (/init_weights_update_group: NCCL for GPU tensors, gloo else).
    weight_sync: str = "tensor"
    bucket_mb: float = 32.0  # size of one bucket of weights; in a request it is base64 (4/3 as large)
    sync_dir: str = ""  # where weight_sync "disk" writes the checkpoint the servers read
    sync_address: str = "127.0.0.1"  # "distributed": the address the servers reach this process at
    cooldown_s: float = 30.0  # how long a server that failed is left out
    retry_rounds: int = 3  # rounds of sending failed parts to the other servers before an EngineError

    def __post_init__(self) -> None:
        _check_servers(self.base_url, self.cooldown_s, self.retry_rounds)
        if self.weight_sync not in _WEIGHT_SYNCS:
            raise ConfigError(f"'weight_sync': {self.weight_sync!r} is not one of {', '.join(_WEIGHT_SYNCS)}")
        if not (isinstance(self.bucket_mb, (int, float)) and 0 < self.bucket_mb < 1 << 20):
            raise ConfigError(f"'bucket_mb': {self.bucket_mb!r} is not a size in MiB above 0")


_WEIGHT_SYNCS = ("tensor", "disk", "distributed")


def _check_servers(base_url: Any, cooldown_s: float, retry_rounds: int) -> list[str]:
    """The server roots of ``base_url`` (one URL or a list), without trailing slashes."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url or [])
    if not urls or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        raise ConfigError(f"'base_url': {base_url!r} is not an http(s) URL or a non-empty list of them")
    urls = [u.rstrip("/") for u in urls]
    if len(set(urls)) < len(urls):
        raise ConfigError(f"'base_url': {base_url!r} names a server twice")
    if cooldown_s < 0:
        raise ConfigError(f"'cooldown_s': {cooldown_s} is negative")
    if retry_rounds < 1:
        raise ConfigError(f"'retry_rounds': {retry_rounds} must be at least 1 (the first sending)")
    return urls




class _RemoteEngine:
    """HTTP plumbing, the server set (who is up, spreading and re-sending parts), weight push and
    health shared by the remote engines."""

    # One fleet behind the clients of every rank of a job: the trainer lets rank 0 alone push weights.
    serves_every_rank = True

    def __init__(self, config: Any, model: Any, tokenizer: Any, headers=None):
        self.urls = _check_servers(config.base_url, config.cooldown_s, config.retry_rounds)
        self.base_url = self.urls[0]
        self.timeout_s = config.timeout_s
        self.sync_dir = config.sync_dir
        self.cooldown_s = config.cooldown_s
        self.retry_rounds = config.retry_rounds
        self.model = model
        self.tokenizer = tokenizer
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._down: dict[str, tuple[float, str]] = {}  # url -> (left out until, its error)
        self._stale: dict[str, str] = {}  # url -> why it missed the last weight update
        self._servers_lock = threading.Lock()

    # ------------------------------------------------------------------------------ one request

    def _request(self, url: str, method: str, path: str, payload: Any = None, *, text: bool = False) -> Any:
        """One request; ``payload`` is JSON-encoded, or sent as it is when it is bytes (a body encoded once)."""
        data = payload if isinstance(payload, bytes) else None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(url + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            error = RequestError if 400 <= exc.code < 500 else EngineError
            raise error(f"{method} {url}{path} -> HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, reset, timed out
            raise EngineError(f"{method} {url}{path} failed: {exc}") from None
        try:
            return json.loads(body) if body.strip() else None
        except ValueError:
            if text:  # an endpoint that answers in words (SGLang's /flush_cache)
                return body.decode(errors="replace")
            raise EngineError(f"{method} {url}{path} answered with a body that is not JSON: {body[:200]!r}") from None

    # ------------------------------------------------------------------------------ the servers

    def _live(self) -> list[str]:
        """Servers neither cooling down after a failure nor holding weights older than the last update."""
        now = time.monotonic()
        with self._servers_lock:
            return [u for u in self.urls if u not in self._stale and self._down.get(u, (0.0, ""))[0] <= now]

    def _mark_down(self, url: str, error: str) -> None:
        with self._servers_lock:
            self._down[url] = (time.monotonic() + self.cooldown_s, error)

    def _map(self, jobs: list[tuple[str, T]], send: Callable[[str, T], Any]) -> list[Any]:
        """``send(url, job)`` for every job at once (threads); each job's result or its engine error."""

        def one(job: tuple[str, T]) -> Any:
            try:
                return send(*job)
            except (EngineError, RequestError) as exc:
                return exc

        if len(jobs) <= 1:
            return [one(job) for job in jobs]
        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="codemoe-remote") as pool:
            return list(pool.map(one, jobs))

    def _spread(self, count: int, send: Callable[[str, list[int]], list[T]], what: str) -> list[T]:
        """Items ``0..count-1`` split into contiguous parts, one per live server, sent concurrently
        with ``send(url, part) -> results of the part``; a failed part goes whole to another live
        server in the next round. Results come back in item order."""
        results: list[Any] = [None] * count
        live = self._live() or [u for u in self.urls if u not in self._stale]  # all cooling down: try them
        pending = _split(list(range(count)), len(live))
        failed: dict[str, str] = {}
        for _ in range(self.retry_rounds):
            if not live:
                break
            jobs = [(live[k % len(live)], part) for k, part in enumerate(pending)]
            pending, bad_request = [], None
            for (url, part), outcome in zip(jobs, self._map(jobs, send)):
                if isinstance(outcome, RequestError):
                    bad_request = bad_request or outcome
                elif isinstance(outcome, EngineError):
                    failed[url] = str(outcome)
                    self._mark_down(url, str(outcome))
                    pending.append(part)
                else:
                    for i, result in zip(part, outcome, strict=True):
                        results[i] = result
            if bad_request is not None:
                raise bad_request
            if not pending:
                return results
            live = self._live()
            live = [u for u in live if u not in failed] or live  # one that failed this call: only when no other is
            if live:
                warnings.warn(
                    f"{what}: {', '.join(sorted({u for u in failed}))} failed ({'; '.join(failed.values())}); "
                    f"its {sum(map(len, pending))} item(s) go to {', '.join(live)}",
                    RuntimeWarning,
                    stacklevel=3,
                )
        raise EngineError(f"{what} failed on every server: {self._errors(failed)}")

    def _errors(self, failed: dict[str, str]) -> str:
        """Each server's error: this call's, or why it is left out."""
        with self._servers_lock:
            reasons = {
                u: failed.get(u) or self._stale.get(u) or self._down.get(u, (0.0, "not tried"))[1] for u in self.urls
            }
        return "; ".join(f"[{u}] {why}" for u, why in reasons.items())

    def _to_all(self, method: str, path: str, payload: Any = None, *, text: bool = False) -> list[Any]:
        """One request to every server; one that fails is marked down, and only every one failing is an error."""
        answers = self._map([(u, None) for u in self.urls],
                            lambda url, _: self._request(url, method, path, payload, text=text))
        failed = {u: str(a) for u, a in zip(self.urls, answers) if isinstance(a, (EngineError, RequestError))}
        for url, error in failed.items():
            self._mark_down(url, error)
        if len(failed) == len(self.urls):
            raise EngineError(f"{method} {path} failed on every server: {self._errors(failed)}")
        if failed:
            warnings.warn(f"{method} {path} did not reach {self._errors(failed)}", RuntimeWarning, stacklevel=3)
        return [a for a in answers if not isinstance(a, (EngineError, RequestError))]

    # ------------------------------------------------------------------------------ prompts, weights, health

    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a prompt with the tokenizer the engine was given (lists of ids pass
        through): what an agent episode's text prompt is sent as."""
        if isinstance(prompt, str) and self.tokenizer is None:
            raise RequestError("this engine was given no tokenizer: give prompts as token ids")
        return self._prompt_ids(prompt)

    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        if not isinstance(prompt, str):
            return list(prompt)
        if self.tokenizer is None:
            return []
        encoded = self.tokenizer.encode(prompt)
        return list(getattr(encoded, "ids", encoded))

    def update_weights(self, state_dict: dict[str, Any] | None = None, path: str | None = None) -> None:
        """Push weights to every server: a checkpoint directory they can read, or a state dict saved
        to ``sync_dir``. A server that refuses them is an error naming it; none taking them is an
        error; once some took them, the others (refused, unreachable) serve nothing until a later
        update reaches them."""
        if (state_dict is None) == (path is None):
            raise RequestError("update_weights takes exactly one of state_dict or path")
        if state_dict is not None:
            path = self._save(state_dict)
        payload = {"model_path": str(path), **self._update_fields()}  # one weight_version for every server
        answers = self._map([(u, None) for u in self.urls], lambda url, _: self._push(url, payload, str(path)))
        errors = {u: a for u, a in zip(self.urls, answers) if isinstance(a, (EngineError, RequestError))}
        errors.update(self._after_push([u for u in self.urls if u not in errors]))
        self._settle(errors, f"the weights at {path}")

    def _after_push(self, urls: list[str]) -> dict[str, Exception]:
        """What the servers that took an update still need (SGLang: the cache flushed); each failure."""
        return {}

    def _settle(self, errors: dict[str, Exception], what: str) -> None:
        """After a weight update every server was sent: the ones that took it carry the new version,
        the others (``errors``: refused, unreachable) serve nothing until a later update reaches them;
        a refusal, or no server taking it, is an :class:`EngineError`."""
        for url, error in errors.items():
            if not isinstance(error, Refused):
                self._mark_down(url, str(error))
        if len(errors) < len(self.urls):  # the servers that took the weights carry the new version
            self._updated()
            with self._servers_lock:  # the others hold older weights: they serve nothing until updated
                self._stale = {u: f"missed the weight update ({what}): {e}" for u, e in errors.items()}
        refused = [str(e) for e in errors.values() if isinstance(e, Refused)]
        if refused or len(errors) == len(self.urls):
            raise EngineError("; ".join(refused) or f"no server took {what}: {self._errors({})}")
        if errors:
            warnings.warn(
                f"{what} did not reach {', '.join(errors)} ({'; '.join(map(str, errors.values()))}): "
                "it serves nothing until an update reaches it",
                RuntimeWarning,
                stacklevel=3,
            )

    def _push(self, url: str, payload: dict[str, Any], path: str) -> None:
        post_update(self, url, "/update_weights_from_disk", payload, what=f"the weights at {path}")

    def _update_fields(self) -> dict[str, Any]:
        """Extra fields of a weight update request (SGLang: the new ``weight_version``)."""
        return {}

    def _updated(self) -> None:
        """Called after at least one server took new weights."""

    def _save(self, state_dict: dict[str, Any]) -> str:
        if not self.sync_dir or self.model is None:
            raise EngineError(
                "update_weights(state_dict=...) on a remote engine needs sync_dir (a folder the servers can read) "
                "and the model passed as model=... (its config is saved with the weights)"
            )
        out = Path(self.sync_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out, state_dict=state_dict)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(out)
        return str(out)

    def health(self) -> dict[str, Any]:
        """Every server's ``/health`` (``servers``: its answer and ``status`` "ok", or "unreachable" and
        the error); ``status`` is "ok" when all answer, "degraded" when some do, else "unreachable"."""
        answers = self._map([(u, None) for u in self.urls], lambda url, _: self._request(url, "GET", "/health"))
        servers = []
        for url, info in zip(self.urls, answers):
            if isinstance(info, (EngineError, RequestError)):
                entry = {"status": "unreachable", "url": url, "error": str(info)}
            else:
                entry = {**(info if isinstance(info, dict) else {}), "status": "ok", "url": url}
            if url in self._stale:
                entry["stale"] = self._stale[url]
            servers.append(entry)
        up = sum(s["status"] == "ok" for s in servers)
        status = "ok" if up == len(servers) else "degraded" if up else "unreachable"
        return {"status": status, "servers": servers}


def _split(items: list[int], parts: int) -> list[list[int]]:
    """``items`` in at most ``parts`` contiguous runs of near-equal length (the first ones longer)."""
    size, extra = divmod(len(items), max(parts, 1))
    out, start = [], 0
    for k in range(max(parts, 1)):
        end = start + size + (k < extra)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


class OpenAIEngine(_RemoteEngine):
    """Generation through OpenAI-compatible ``/v1/completions`` endpoints."""

    def __init__(self, config: OpenAIEngineConfig, model: Any = None, tokenizer: Any = None) -> None:
        super().__init__(config, model, tokenizer, headers={"Authorization": f"Bearer {config.api_key}"})
        self.model_name = config.model

    def _served_model(self, url: str) -> str:
        if not self.model_name:
            models = self._request(url, "GET", "/v1/models")["data"]
            if not models:
                raise EngineError(f"{url}/v1/models lists no model")
            self.model_name = models[0]["id"]
        return self.model_name

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """A part's prompts in one request: choice ``i * n + j`` is sample ``j`` of its prompt ``i``.

        The API has one seed per request: the part starting at prompt 0 gets the call's seed, the
        part starting at prompt ``s`` a seed drawn from (seed, s), so seeded samples depend on how the
        call was split (the live servers at its start), not on which server drew a part."""
        params.validate()
        seed = params.seed if params.seed is not None else secrets.randbits(63)

        def send(url: str, part: list[int]) -> list[GenerationOutput]:
            return self._generate_part(url, [prompts[i] for i in part], params, _part_seed(seed, part[0]))

        return self._spread(len(prompts), send, f"generate ({len(prompts)} prompts)")

    def _generate_part(self, url: str, prompts: list[Any], params: SamplingParams, seed: int) -> list[GenerationOutput]:
        payload: dict[str, Any] = {
            "model": self._served_model(url),
            "prompt": list(prompts),
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "stop": params.stop or None,
            "seed": seed,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        }
        if params.top_k:
            payload["top_k"] = params.top_k
        if params.ignore_eos:
            payload["ignore_eos"] = True
        answer = self._request(url, "POST", "/v1/completions", payload)
        try:
            choices = sorted(answer["choices"], key=lambda c: c["index"])
            if len(choices) != len(prompts) * params.n:
                raise ValueError(f"{len(choices)} choices for {len(prompts)} prompts x n={params.n}")
            outputs = []
            for i, prompt in enumerate(prompts):
                mine = choices[i * params.n : (i + 1) * params.n]
                prompt_ids = mine[0].get("prompt_token_ids") or self._prompt_ids(prompt)
                outputs.append(GenerationOutput(list(prompt_ids), [_openai_sample(c) for c in mine]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EngineError(f"POST {url}/v1/completions answered something that is not completions: {exc}") from None
        return outputs


def _part_seed(seed: int, first: int) -> int:
    """The OpenAI request seed of the part whose first prompt is ``first`` in the whole call."""
    return seed if first == 0 else sample_key(seed, first, -1) & _SEED_MASK


def _openai_sample(choice: dict[str, Any]) -> Sample:
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens") or []
    ids = choice.get("token_ids") or [int(t.removeprefix("token_id:")) for t in tokens if t.startswith("token_id:")]
    return Sample(
        token_ids=ids,
        text=choice["text"],
        logprobs=[float(x) for x in logprobs.get("token_logprobs") or []],
        finish_reason=choice.get("finish_reason") or "length",
    )


class SGLangEngine(_RemoteEngine):
    """Generation through SGLang's native ``/generate`` (also served by ``codemoe serve``)."""

    def __init__(self, config: SGLangEngineConfig, model: Any = None, tokenizer: Any = None) -> None:
        super().__init__(config, model, tokenizer)
        self.return_routing = config.return_routing
        self.weight_sync = config.weight_sync
        self.bucket_mb = config.bucket_mb
        self.sync_address = config.sync_address
        if self.return_routing and self._top_k() <= 0:
            raise EngineError(
                "return_routing needs the model passed as model=... (its num_experts_per_tok shapes routing)"
            )
        self.moe_layers = _moe_layers(model) if self.return_routing else []
        config = getattr(model, "config", None)
        if getattr(config, "model_type", "") == "qwen3_moe" and getattr(config, "mlp_only_layers", None):
            warnings.warn(  # read in SGLang 0.5.23's models/qwen3_moe.py; measured: log-probs off by 2-4e-2
                f"SGLang builds every Qwen3-MoE layer sparse and ignores mlp_only_layers {config.mlp_only_layers}: "
                "it serves this model with wrong log-probs (check with python -m codemoe.serving.sglang_check)",
                RuntimeWarning,
                stacklevel=2,
            )
        self.weight_version: str | None = None  # set by the first update; every later sample must carry it
        self._updates = 0
        self._tp_sizes: dict[str, int] = {}
        self._group: SyncGroup | None = None
        self._deterministic: bool | None = None  # the servers' --enable-deterministic-inference, once asked
        self._lock = threading.Lock()

    def _top_k(self) -> int:
        return int(getattr(getattr(self.model, "config", None), "num_experts_per_tok", 0) or 0)

    def _update_fields(self) -> dict[str, Any]:
        self._updates += 1
        self._pending_version = f"codemoe-{self._updates}-{secrets.token_hex(4)}"
        # The cache is flushed after the load (_after_push), not by it: SGLang refuses an update
        # whose flush finds requests still running (ours retire a moment after /generate returns).
        return {"weight_version": self._pending_version, "flush_cache": False}

    def _after_push(self, urls: list[str]) -> dict[str, Exception]:
        """Flush each updated server's prefix cache once its running requests are done
        (``/flush_cache?timeout=``: SGLang waits for them up to ``timeout_s``), so no sample reuses
        keys and values of the old weights; a server that cannot flush is left out until the next update."""

        def flush(url: str, _: Any) -> None:
            try:
                self._request(url, "POST", f"/flush_cache?timeout={self.timeout_s:g}", text=True)
            except RequestError as exc:
                raise EngineError(f"the server {url} took the weights but did not flush its cache: {exc}") from None

        answers = self._map([(u, None) for u in urls], flush)
        return {u: a for u, a in zip(urls, answers) if isinstance(a, (EngineError, RequestError))}

    def _updated(self) -> None:
        self.weight_version = self._pending_version

    # ------------------------------------------------------------------------------ weight sync

    def _tp_size(self, url: str) -> int:
        """The server's tensor-parallel ranks (``/get_server_info``'s ``tp_size``; 1 when it does not say)."""
        if url not in self._tp_sizes:
            info = self._request(url, "GET", "/get_server_info")
            size = info.get("tp_size", 1) if isinstance(info, dict) else 1
            self._tp_sizes[url] = int(size) if isinstance(size, int) and size >= 1 else 1
        return self._tp_sizes[url]

    def _sync_group(self) -> SyncGroup:
        """The process group with every server for ``weight_sync: distributed``, made on first use
        (again after one broke): NCCL when the model's weights are on a GPU, gloo otherwise."""
        if self._group is None or self._group.broken:
            if self._group is not None:
                self._group.close()
            device = next(iter(self.model.parameters())).device.type if self.model is not None else "cpu"
            backend = "nccl" if device == "cuda" else "gloo"
            self._group = SyncGroup(self, self.sync_address, backend, self.timeout_s)
        return self._group

    def update_weights(self, state_dict: dict[str, Any] | None = None, path: str | None = None) -> None:
        """New weights for every server: a checkpoint folder they can read (``path``), or a state
        dict sent the ``weight_sync`` way (see :meth:`update_weights_from_tensors`)."""
        if state_dict is not None and path is None and self.weight_sync != "disk":
            self.update_weights_from_tensors(state_dict.items())
            return
        super().update_weights(state_dict=state_dict, path=path)

    def update_weights_from_tensors(self, named: Iterable[tuple[str, Any]]) -> None:
        """New weights from ``(name, tensor)`` pairs keyed as the model's ``state_dict()`` (whole
        tensors, grouped by layer in its order), consumed lazily: converted a layer at a time to the
        checkpoint's names and layout (what SGLang's loader reads,
        :func:`codemoe.core.models.checkpoint_names.to_checkpoint`) and sent in buckets of
        ``bucket_mb`` inside one ``/begin_weight_update`` ... ``/end_weight_update`` session per
        server; the last bucket flushes the cache and sets the new ``weight_version``. A server
        that fails a bucket gets no more of them and serves nothing until a later update reaches it."""
        if self.model is None:
            raise EngineError("update_weights_from_tensors needs the model passed as model=... (its checkpoint names)")
        if self.weight_sync == "disk":
            super().update_weights(state_dict=dict(named))
            return
        from codemoe.core.models.checkpoint_names import to_checkpoint

        group = self._sync_group() if self.weight_sync == "distributed" else None
        session = WeightSession(self, self._update_fields()["weight_version"], group)
        session.begin()
        bucket: list[tuple[str, Any]] = []
        size, limit = 0, int(self.bucket_mb * (1 << 20))
        for name, tensor in to_checkpoint(self.model, named):
            nbytes = tensor.numel() * tensor.element_size()
            if bucket and size + nbytes > limit:
                if not session.send(bucket, last=False):
                    break  # no server left to send to
                bucket, size = [], 0
            bucket.append((name, tensor))
            size += nbytes
        else:
            session.send(bucket, last=True)
        session.end()
        session.errors.update(self._after_push(session.alive()))
        self._settle(session.errors, f"weights version {session.version}")

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """Each prompt as ``n`` copies in one batch, each copy with its own seed from the prompt's
        index in the whole call, so a sample does not depend on which server drew it."""
        params.validate()
        if params.seed is not None:
            self._warn_if_not_deterministic()

        def send(url: str, part: list[int]) -> list[GenerationOutput]:
            return self._generate_part(url, prompts, part, params)

        return self._spread(len(prompts), send, f"generate ({len(prompts)} prompts)")

    def _generate_part(self, url: str, prompts: list[Any], part: list[int], params: SamplingParams) -> list[GenerationOutput]:
        texts = all(isinstance(prompts[i], str) for i in part)
        payload: dict[str, Any] = {
            "text" if texts else "input_ids": [prompts[i] for i in part for _ in range(params.n)],
            "sampling_params": [_sglang_params(params, i, j) for i in part for j in range(params.n)],
            "return_logprob": True,
            "return_prompt_token_ids": True,
        }
        if self.return_routing:  # only then: servers that predate routed experts reject the field
            payload["return_routed_experts"] = True
        results = self._request(url, "POST", "/generate", payload)
        if isinstance(results, dict):
            results = [results]
        if not isinstance(results, list) or len(results) != len(part) * params.n:
            raise EngineError(f"POST {url}/generate answered {type(results).__name__} "
                              f"for {len(part) * params.n} requests")
        outputs = []
        for k, i in enumerate(part):
            mine = results[k * params.n : (k + 1) * params.n]
            for result in mine:
                self._check_version(url, result)
            try:
                prompt_ids = list(mine[0].get("prompt_token_ids") or self._prompt_ids(prompts[i]))
                samples, prompt_routing = [], None
                for result in mine:
                    sample, rows = _sglang_sample(result, self._top_k(), self.moe_layers, len(prompt_ids))
                    samples.append(sample)
                    if prompt_routing is None and rows is not None:
                        prompt_routing = rows
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise EngineError(f"POST {url}/generate answered a result that is not a sample: {exc!r}") from None
            outputs.append(GenerationOutput(prompt_ids, samples, prompt_routing))
        return outputs

    def _check_version(self, url: str, result: Any) -> None:
        """A sample drawn from other weights than the last update is an error, never training data."""
        if not isinstance(result, dict) or not isinstance(result.get("meta_info"), dict):
            raise EngineError(f"POST {url}/generate answered a result without meta_info: {str(result)[:200]}")
        if self.weight_version is None:
            return
        seen = result["meta_info"].get("weight_version")
        if seen != self.weight_version:
            raise EngineError(
                f"{url} sampled with weight_version {seen!r}, not the {self.weight_version!r} pushed last "
                "(another client updated the server, or it restarted on old weights)"
            )

    def _warn_if_not_deterministic(self) -> None:
        with self._lock:
            if self._deterministic is not None:
                return
            info = None
            for url in self._live() or self.urls:
                try:
                    info = self._request(url, "GET", "/get_server_info")
                    break
                except (EngineError, RequestError):
                    continue
            self._deterministic = bool(isinstance(info, dict) and info.get("enable_deterministic_inference", True))
        if not self._deterministic:
            warnings.warn(
                f"{self.base_url} runs without --enable-deterministic-inference: SGLang ignores sampling seeds then, "
                "so seeded samples are not reproducible",
                RuntimeWarning,
                stacklevel=3,
            )

    def abort(self) -> None:
        """Abort every request the servers are running (their samples end with finish_reason "abort")."""
        self._to_all("POST", "/abort_request", {"abort_all": True})

    def flush_cache(self) -> None:
        """Drop the servers' prefix (radix) caches."""
        # SGLang answers 200 "Cache flushed. ..." in plain text, or 400 while requests run: with
        # ?timeout= it waits for them (ours retire a moment after /generate returns)
        self._to_all("POST", f"/flush_cache?timeout={self.timeout_s:g}", text=True)


def _moe_layers(model: Any) -> list[int]:
    """Indices of the decoder layers that route tokens (hold a codemoe MoE block), in order."""
    from codemoe.core.moe import moe_blocks

    found = [block.layer for block in moe_blocks(model)] if hasattr(model, "modules") else []
    if not found:
        raise EngineError("return_routing needs a model with codemoe MoE blocks (routing replay replays them)")
    return found


def _sglang_params(params: SamplingParams, prompt: int, sample: int) -> dict[str, Any]:
    """SGLang's ``sampling_params`` for sample ``sample`` of prompt ``prompt``."""
    out: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k or -1,
        "stop": list(params.stop),
        "ignore_eos": params.ignore_eos,
    }
    if params.seed is not None:  # one seed per sample, in SGLang's signed 64-bit range
        out["sampling_seed"] = sample_key(params.seed, prompt, sample) & ((1 << 63) - 1)
    return out


_FINISH = {"length": "length", "abort": "abort", "stop": "stop"}


def _sglang_sample(result: dict[str, Any], top_k: int, moe_layers: list[int], prompt_tokens: int) -> tuple[Sample, Any]:
    """One result -> (the sample, the prompt's routing rows or None)."""
    meta = result["meta_info"]
    logprobs = meta.get("output_token_logprobs") or []
    token_ids = result.get("output_ids") or [int(entry[1]) for entry in logprobs]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else None
    if kind not in _FINISH:
        raise EngineError(f"unknown finish_reason from the server: {finish!r}")
    routing, prompt_routing = None, None
    if meta.get("routed_experts"):
        rows = _decode_routing(meta["routed_experts"], int(meta.get("prompt_tokens", prompt_tokens)),
                               len(token_ids), top_k, moe_layers)
        prompt_routing, routing = rows[:prompt_tokens], rows[prompt_tokens - 1 :]
    sample = Sample(
        token_ids=list(token_ids),
        text=result.get("text", ""),
        logprobs=[float(entry[0]) for entry in logprobs],
        finish_reason=_FINISH[kind],
        routing=routing,
    )
    return sample, prompt_routing


def _decode_routing(encoded: str, prompt_tokens: int, completion_tokens: int, top_k: int, moe_layers: list[int]) -> Any:
    """SGLang's base64 int32 ``[prompt + completion - 1, layers, k]`` (every decoder layer, or only the
    MoE layers) -> ``[positions, moe layers, k]``."""
    import numpy as np
    import torch

    flat = torch.from_numpy(np.frombuffer(base64.b64decode(encoded), dtype=np.int32).copy())
    positions = prompt_tokens + completion_tokens - 1
    if positions <= 0 or flat.numel() % (positions * top_k):
        raise EngineError(f"routed_experts holds {flat.numel()} ids, not a multiple of {positions} positions x k={top_k}")
    rows = flat.reshape(positions, -1, top_k).long()  # [positions, layers, k]
    layers = rows.shape[1]
    if layers == len(moe_layers):
        return rows
    if layers > max(moe_layers):  # every decoder layer: keep the routed ones
        return rows[:, moe_layers]
    raise EngineError(f"routed_experts reports {layers} layers; the model routes in {len(moe_layers)} ({moe_layers})")


def build_openai_engine(config: OpenAIEngineConfig, *, model: Any = None, tokenizer: Any = None) -> OpenAIEngine:
    """Engine over an OpenAI-compatible server (``codemoe serve``, vLLM, SGLang's /v1)."""
    return OpenAIEngine(config, model, tokenizer)


def build_sglang_engine(config: SGLangEngineConfig, *, model: Any = None, tokenizer: Any = None) -> SGLangEngine:
    """Engine over an SGLang server's native API (or ``codemoe serve``)."""
    return SGLangEngine(config, model, tokenizer)
