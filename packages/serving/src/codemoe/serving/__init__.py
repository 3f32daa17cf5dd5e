"""codemoe-serving: generation engines (kind ``engine``) and the ``codemoe serve`` HTTP API.

Importing the package does not import torch; the engines load on first use.
"""

from __future__ import annotations

from typing import Any

from codemoe.core.contracts import (
    ContextLengthError,
    Engine,
    EngineError,
    GenerationOutput,
    RequestError,
    Sample,
    SamplingParams,
)

__all__ = [
    "ContextLengthError",
    "EmbeddedEngine",
    "EmbeddedEngineConfig",
    "Engine",
    "EngineError",
    "GenerationOutput",
    "OpenAIEngine",
    "RequestError",
    "SGLangEngine",
    "Sample",
    "SamplingParams",
]

_LAZY = {
    "EmbeddedEngine": "codemoe.serving.embedded",
    "EmbeddedEngineConfig": "codemoe.serving.embedded",
    "OpenAIEngine": "codemoe.serving.remote",
    "SGLangEngine": "codemoe.serving.remote",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'codemoe.serving' has no attribute '{name}'")
