"""Stages that ship with core.

``environment`` records what the run ran on (Python, torch, threads, accelerator, plugins): the
first thing to compare when two runs disagree.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["EnvironmentConfig", "EnvironmentStage"]


@dataclass
class EnvironmentConfig:
    """Options of the ``environment`` stage."""

    torch_threads: int = 0  # 0: leave torch's default; otherwise torch.set_num_threads(n)


class EnvironmentStage:
    """Record the software and hardware a run uses, and set the torch thread count."""

    def __init__(self, config: EnvironmentConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        import torch

        if self.config.torch_threads > 0:
            torch.set_num_threads(self.config.torch_threads)
        from codemoe.core.plugins import plugin_infos

        result = {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "executable": sys.executable,
            "plugins": {info.name: info.version for info in plugin_infos(ctx.hooks.pm)},
            "components": len(ctx.registry.components()),
        }
        ctx.metrics.write(stage.id, None, torch_threads=result["torch_threads"], cuda_devices=result["cuda_devices"])
        return result
