"""The ``disk-check`` stage."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any


class NotEnoughDisk(RuntimeError):
    """The run directory's disk has less free space than the pipeline asks for."""


@dataclass
class DiskCheckConfig:
    """Options of the ``disk-check`` stage."""

    min_free_gb: float = 1.0  # fail the run when less than this is free where the run dir lives


class DiskCheck:
    """Fail early when the run directory's disk is short of space."""

    def __init__(self, config: DiskCheckConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        free_gb = shutil.disk_usage(ctx.run_dir).free / 1e9
        if free_gb < self.config.min_free_gb:
            raise NotEnoughDisk(
                f"stage '{stage.id}': only {free_gb:.2f} GB free in {ctx.run_dir}, the pipeline asks for "
                f"{self.config.min_free_gb} GB (stages.{stage.id}.min_free_gb)"
            )
        ctx.metrics.write(stage.id, None, free_gb=round(free_gb, 3))
        return {"free_gb": round(free_gb, 3)}
