"""Request schemas of the HTTP API (OpenAI-compatible and SGLang-compatible), validated with pydantic.

Unknown fields are ignored (clients send vendor extensions); known fields are checked strictly,
and a bad one becomes a 400 naming the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["AbortRequest", "ChatCompletionRequest", "ChatMessage", "CompletionRequest", "GenerateRequest",
           "UpdateWeightsRequest"]


def _stop_list_of(value: str | list[str] | None) -> list[str]:
    """``stop`` as a list of non-empty strings."""
    stops = [value] if isinstance(value, str) else list(value or [])
    if any(not s for s in stops):
        raise ValueError("stop strings must be non-empty")
    return stops


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=False)


class _Sampling(_Request):
    """Fields shared by both OpenAI endpoints."""

    model: str | None = None
    n: int = Field(1, ge=1, le=256)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # extension (vLLM and SGLang accept it too)
    stop: str | list[str] | None = Field(None, validate_default=True)
    seed: int | None = None
    stream: bool = False
    ignore_eos: bool = False  # extension

    _stop_list = field_validator("stop")(_stop_list_of)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=1)  # only the sampled token's log-prob is served
    echo: Literal[False] = False
    return_tokens_as_token_ids: bool = False  # extension: tokens as "token_id:<id>" in logprobs
    return_token_ids: bool = False  # extension: prompt_token_ids and token_ids on each choice


class ChatMessage(_Request):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=0)  # alternatives are not served

    def new_tokens(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default


class _GenerateSampling(_Request):
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)  # SGLang's "off" is -1
    stop: str | list[str] | None = Field(None, validate_default=True)
    n: int = Field(1, ge=1, le=256)
    sampling_seed: int | None = None
    ignore_eos: bool = False

    _stop_list = field_validator("stop")(_stop_list_of)


class GenerateRequest(_Request):
    """``POST /generate`` in SGLang's native format."""

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: _GenerateSampling | list[_GenerateSampling] = Field(default_factory=_GenerateSampling)
    return_logprob: bool = False
    return_routed_experts: bool = False
    routed_experts_start_len: int = Field(0, ge=0)  # routing rows from this position on (SGLang's field)
    return_prompt_token_ids: bool = False
    rid: str | list[str] | None = None  # the request's id (what /abort_request names)
    stream: Literal[False] = False

    def prompts(self) -> tuple[list[Any], bool]:
        """The prompts and whether the request was a batch (a list in, a list out)."""
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("give exactly one of 'text' or 'input_ids'")
        if self.text is not None:
            return ([self.text], False) if isinstance(self.text, str) else (list(self.text), True)
        ids = self.input_ids or []
        if ids and isinstance(ids[0], list):
            return list(ids), True
        return [ids], False

    def per_prompt_sampling(self, count: int) -> tuple[list[_GenerateSampling], bool]:
        """One sampling dict per prompt, and whether they were given one per prompt."""
        if isinstance(self.sampling_params, list):
            if len(self.sampling_params) != count:
                raise ValueError(f"{len(self.sampling_params)} sampling_params for {count} prompts")
            return list(self.sampling_params), True
        return [self.sampling_params] * count, False


class UpdateWeightsRequest(_Request):
    """``POST /update_weights_from_disk``."""

    model_path: str = Field(min_length=1)
    weight_version: str | None = None  # becomes the server's weight_version (every later sample carries it)
    flush_cache: bool = True  # SGLang's default: the prefix cache does not outlive the old weights


class AbortRequest(_Request):
    """``POST /abort_request``: SGLang's fields (``rid`` of one request, or ``abort_all``)."""

    rid: str = ""
    abort_all: bool = False


class BeginWeightUpdateRequest(_Request):
    """``POST /begin_weight_update``: opens the session the tensor updates run in (SGLang's fields)."""

    selector: Literal["target", "draft", "all"] = "all"


class UpdateWeightsFromTensorRequest(_Request):
    """``POST /update_weights_from_tensor``: one bucket of weights in the request (SGLang's fields:
    one ``serialized_named_tensors`` entry per tensor-parallel rank; codemoe serve has one)."""

    serialized_named_tensors: list[str] = Field(min_length=1)
    load_format: str | None = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    selector: Literal["target", "draft", "all"] = "all"
    torch_empty_cache: bool = False


class InitWeightsUpdateGroupRequest(_Request):
    """``POST /init_weights_update_group``: join rank 0's process group (SGLang's fields)."""

    master_address: str = Field(min_length=1)
    master_port: int = Field(ge=1, le=65535)
    rank_offset: int = Field(ge=1)
    world_size: int = Field(ge=2)
    group_name: str = Field(default="weight_update_group", min_length=1)
    backend: Literal["gloo", "nccl"] = "nccl"


class UpdateWeightsFromDistributedRequest(_Request):
    """``POST /update_weights_from_distributed``: receive one bucket broadcast over the group."""

    names: list[str]
    dtypes: list[str]
    shapes: list[list[int]]
    group_name: str = "weight_update_group"
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    load_format: str | None = None
    selector: Literal["target", "draft", "all"] = "all"
    torch_empty_cache: bool = False
