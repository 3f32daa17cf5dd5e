"""The engine contract as the serving package names it: defined in :mod:`codemoe.core.contracts.engine`.

The trainer and the evals import it from core; the engines here implement it.
"""

from codemoe.core.contracts.engine import (
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
    "Engine",
    "EngineError",
    "GenerationOutput",
    "RequestError",
    "Sample",
    "SamplingParams",
]
