"""The contracts packages meet through: engines, verifiers, environments and their data types.

No package imports a sibling other than core. A package implements these interfaces and registers
its implementations (kinds ``engine``, ``executor``, ``environment``, ``task_format``,
``scripted_agent``); a consumer asks the registry for one and calls only what is defined here.
``codemoe.sandbox`` depends on nothing of codemoe's, so it implements them structurally (same
names, same fields), and ``tests/test_contracts.py`` checks that it does.

Nothing here imports torch.
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
from codemoe.core.contracts.environment import (
    Agent,
    Environment,
    EpisodeState,
    RepositoryTask,
    StepOutcome,
    TaskFormat,
    ToolCallRecord,
    play,
    repository_task,
)
from codemoe.core.contracts.verify import ProgramCheck, Verdict, Verifier

__all__ = [
    "Agent",
    "ContextLengthError",
    "Engine",
    "EngineError",
    "Environment",
    "EpisodeState",
    "GenerationOutput",
    "ProgramCheck",
    "RepositoryTask",
    "RequestError",
    "Sample",
    "SamplingParams",
    "StepOutcome",
    "TaskFormat",
    "ToolCallRecord",
    "Verdict",
    "Verifier",
    "play",
    "repository_task",
]
