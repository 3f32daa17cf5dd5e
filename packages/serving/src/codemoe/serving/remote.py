"""Remote engines: drive an HTTP server (``codemoe serve``, SGLang, any OpenAI-compatible one).

- ``openai``: ``/v1/completions`` with ``logprobs``, ``return_tokens_as_token_ids`` and
  ``return_token_ids`` (extensions served by codemoe and vLLM); weights through ``/update_weights_from_disk`` where the server has it.
- ``sglang``: SGLang's native ``/generate`` with ``return_logprob``, ``return_prompt_token_ids`` (the
  server's own tokenization of a text prompt) and, for routing replay, ``return_routed_experts``
  (SGLang reports every decoder layer; the engine keeps the model's MoE layers, in the layout of
  :class:`~codemoe.core.contracts.Sample`). Weights go through ``/update_weights_from_disk`` with a
  ``weight_version`` that every later sample must carry. Samples of one prompt go as ``n`` copies in
  one batch, each with its own seed, so SGLang's radix cache shares the prompt; SGLang honours the
  seeds only when launched with ``--enable-deterministic-inference`` (the engine warns once when not).

Both follow the log-prob convention of :mod:`codemoe.core.contracts.engine`; for SGLang that holds when it
runs without ``SGLANG_RETURN_ORIGINAL_LOGPROB`` (its default returns log-probs after temperature).
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemoe.core.contracts import EngineError, GenerationOutput, RequestError, Sample, SamplingParams
from codemoe.serving.sampling import sample_key

__all__ = [
    "OpenAIEngine",
    "OpenAIEngineConfig",
    "SGLangEngine",
    "SGLangEngineConfig",
    "build_openai_engine",
    "build_sglang_engine",
]


@dataclass
class OpenAIEngineConfig:
    """Options of the ``openai`` engine."""

    base_url: str = "http://127.0.0.1:8000"  # server root; the engine appends /v1/...
    model: str = ""  # served model name; "" takes the first one /v1/models lists
    api_key: str = "EMPTY"  # sent as a bearer token
    timeout_s: float = 600.0  # per HTTP request
    sync_dir: str = ""  # where update_weights(state_dict=...) writes a checkpoint the server can read


@dataclass
class SGLangEngineConfig:
    """Options of the ``sglang`` engine."""

    base_url: str = "http://127.0.0.1:30000"  # SGLang's default port
    timeout_s: float = 600.0  # per HTTP request
    return_routing: bool = False  # ask for routed experts (SGLang needs --enable-return-routed-experts)
    sync_dir: str = ""  # where update_weights(state_dict=...) writes a checkpoint the server can read


class _RemoteEngine:
    """HTTP plumbing, weight push and health shared by the remote engines."""

    # One server behind the clients of every rank of a job: the trainer lets rank 0 alone push weights.
    serves_every_rank = True

    def __init__(self, base_url: str, timeout_s: float, sync_dir: str, model: Any, tokenizer: Any, headers=None):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.sync_dir = sync_dir
        self.model = model
        self.tokenizer = tokenizer
        self.headers = {"Content-Type": "application/json", **(headers or {})}

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            error = RequestError if 400 <= exc.code < 500 else EngineError
            raise error(f"{method} {self.base_url}{path} -> HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise EngineError(f"{method} {self.base_url}{path} failed: {exc}") from None
        try:
            return json.loads(body) if body.strip() else None
        except ValueError:
            raise EngineError(f"{method} {self.base_url}{path} answered with a body that is not JSON: {body[:200]!r}") from None

    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        if not isinstance(prompt, str):
            return list(prompt)
        if self.tokenizer is None:
            return []
        encoded = self.tokenizer.encode(prompt)
        return list(getattr(encoded, "ids", encoded))

    def update_weights(self, state_dict: dict[str, Any] | None = None, path: str | None = None) -> None:
        """Push weights: a checkpoint directory the server can read, or a state dict saved to ``sync_dir``."""
        if (state_dict is None) == (path is None):
            raise RequestError("update_weights takes exactly one of state_dict or path")
        if state_dict is not None:
            path = self._save(state_dict)
        payload = {"model_path": str(path), **self._update_fields()}
        try:
            result = self._request("POST", "/update_weights_from_disk", payload)
        except RequestError as exc:  # SGLang answers a failed load with HTTP 400 {"success": false, ...}
            raise EngineError(f"the server refused the weights at {path}: {exc}") from None
        if not isinstance(result, dict) or not result.get("success", False):
            raise EngineError(f"the server refused the weights at {path}: {result}")
        self._updated()

    def _update_fields(self) -> dict[str, Any]:
        """Extra fields of a weight update request (SGLang: the new ``weight_version``)."""
        return {}

    def _updated(self) -> None:
        """Called after the server took new weights."""

    def _save(self, state_dict: dict[str, Any]) -> str:
        if not self.sync_dir or self.model is None:
            raise EngineError(
                "update_weights(state_dict=...) on a remote engine needs sync_dir (a folder the server can read) "
                "and the model passed as model=... (its config is saved with the weights)"
            )
        out = Path(self.sync_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out, state_dict=state_dict)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(out)
        return str(out)

    def health(self) -> dict[str, Any]:
        """``{"status": "ok", ...}`` when ``/health`` answers, else ``{"status": "unreachable", ...}``."""
        try:
            info = self._request("GET", "/health")
        except (EngineError, RequestError) as exc:
            return {"status": "unreachable", "url": self.base_url, "error": str(exc)}
        return {**(info if isinstance(info, dict) else {}), "status": "ok", "url": self.base_url}


class OpenAIEngine(_RemoteEngine):
    """Generation through an OpenAI-compatible ``/v1/completions`` endpoint."""

    def __init__(self, config: OpenAIEngineConfig, model: Any = None, tokenizer: Any = None) -> None:
        super().__init__(
            config.base_url,
            config.timeout_s,
            config.sync_dir,
            model,
            tokenizer,
            headers={"Authorization": f"Bearer {config.api_key}"},
        )
        self.model_name = config.model

    def _served_model(self) -> str:
        if not self.model_name:
            models = self._request("GET", "/v1/models")["data"]
            if not models:
                raise EngineError(f"{self.base_url}/v1/models lists no model")
            self.model_name = models[0]["id"]
        return self.model_name

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """All prompts in one request: choice ``i * n + j`` is sample ``j`` of prompt ``i``."""
        params.validate()
        payload: dict[str, Any] = {
            "model": self._served_model(),
            "prompt": list(prompts),
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "stop": params.stop or None,
            "seed": params.seed if params.seed is not None else secrets.randbits(63),
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        }
        if params.top_k:
            payload["top_k"] = params.top_k
        if params.ignore_eos:
            payload["ignore_eos"] = True
        choices = sorted(self._request("POST", "/v1/completions", payload)["choices"], key=lambda c: c["index"])
        outputs = []
        for i, prompt in enumerate(prompts):
            mine = choices[i * params.n : (i + 1) * params.n]
            prompt_ids = mine[0].get("prompt_token_ids") or self._prompt_ids(prompt)
            outputs.append(GenerationOutput(list(prompt_ids), [_openai_sample(c) for c in mine]))
        return outputs


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
        super().__init__(config.base_url, config.timeout_s, config.sync_dir, model, tokenizer)
        self.return_routing = config.return_routing
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
        self._deterministic: bool | None = None  # the server's --enable-deterministic-inference, once asked
        self._lock = threading.Lock()

    def _top_k(self) -> int:
        return int(getattr(getattr(self.model, "config", None), "num_experts_per_tok", 0) or 0)

    def _update_fields(self) -> dict[str, Any]:
        self._updates += 1
        self._pending_version = f"codemoe-{self._updates}-{secrets.token_hex(4)}"
        return {"weight_version": self._pending_version}

    def _updated(self) -> None:
        self.weight_version = self._pending_version

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """Each prompt as ``n`` copies in one batch, each copy with its own seed."""
        params.validate()
        if params.seed is not None:
            self._warn_if_not_deterministic()
        texts = all(isinstance(p, str) for p in prompts)
        payload: dict[str, Any] = {
            "text" if texts else "input_ids": [p for p in prompts for _ in range(params.n)],
            "sampling_params": [_sglang_params(params, i, j) for i in range(len(prompts)) for j in range(params.n)],
            "return_logprob": True,
            "return_prompt_token_ids": True,
        }
        if self.return_routing:  # only then: servers that predate routed experts reject the field
            payload["return_routed_experts"] = True
        results = self._request("POST", "/generate", payload)
        if isinstance(results, dict):
            results = [results]
        if not isinstance(results, list) or len(results) != len(prompts) * params.n:
            raise EngineError(f"POST {self.base_url}/generate answered {type(results).__name__} "
                              f"for {len(prompts) * params.n} requests")
        outputs = []
        for i, prompt in enumerate(prompts):
            mine = results[i * params.n : (i + 1) * params.n]
            for result in mine:
                self._check_version(result)
            prompt_ids = list(mine[0].get("prompt_token_ids") or self._prompt_ids(prompt))
            samples, prompt_routing = [], None
            for result in mine:
                sample, rows = _sglang_sample(result, self._top_k(), self.moe_layers, len(prompt_ids))
                samples.append(sample)
                if prompt_routing is None and rows is not None:
                    prompt_routing = rows
            outputs.append(GenerationOutput(prompt_ids, samples, prompt_routing))
        return outputs

    def _check_version(self, result: Any) -> None:
        """A sample drawn from other weights than the last update is an error, never training data."""
        if not isinstance(result, dict) or not isinstance(result.get("meta_info"), dict):
            raise EngineError(f"POST {self.base_url}/generate answered a result without meta_info: {str(result)[:200]}")
        if self.weight_version is None:
            return
        seen = result["meta_info"].get("weight_version")
        if seen != self.weight_version:
            raise EngineError(
                f"{self.base_url} sampled with weight_version {seen!r}, not the {self.weight_version!r} pushed last "
                "(another client updated the server, or it restarted on old weights)"
            )

    def _warn_if_not_deterministic(self) -> None:
        with self._lock:
            if self._deterministic is not None:
                return
            try:
                info = self._request("GET", "/get_server_info")
            except (EngineError, RequestError):
                info = None
            self._deterministic = bool(isinstance(info, dict) and info.get("enable_deterministic_inference", True))
        if not self._deterministic:
            warnings.warn(
                f"{self.base_url} runs without --enable-deterministic-inference: SGLang ignores sampling seeds then, "
                "so seeded samples are not reproducible",
                RuntimeWarning,
                stacklevel=3,
            )

    def abort(self) -> None:
        """Abort every request the server is running (their samples end with finish_reason "abort")."""
        self._request("POST", "/abort_request", {"abort_all": True})

    def flush_cache(self) -> None:
        """Drop the server's prefix (radix) cache."""
        self._request("POST", "/flush_cache")


def _moe_layers(model: Any) -> list[int]:
    """Indices of the decoder layers that route tokens (hold a codemoe MoE block), in order."""
    from codemoe.core.moe import MoEBlock

    layers = None
    for name, module in getattr(model, "named_modules", lambda: [])():
        if name.rsplit(".", 1)[-1] == "layers" and hasattr(module, "__len__"):
            layers = module
            break
    if layers is None:
        raise EngineError("return_routing needs a model with a 'layers' list (the decoder layers SGLang reports)")
    found = [i for i, layer in enumerate(layers) if any(isinstance(m, MoEBlock) for m in layer.modules())]
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
