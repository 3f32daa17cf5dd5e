"""The plugin module named by the ``codemoe`` entry point."""

from __future__ import annotations

import json
from typing import Any

import pluggy

hookimpl = pluggy.HookimplMarker("codemoe")


@hookimpl
def codemoe_register_components(registry: Any) -> None:
    registry.register(
        "stage",
        "disk-check",
        "codemoe_example.stages:DiskCheck",
        "codemoe_example.stages:DiskCheckConfig",
        summary="fail early when the run directory's disk is short of space",
    )


@hookimpl
def codemoe_after_stage(ctx: Any, stage: Any, result: dict[str, Any]) -> None:
    if not getattr(ctx, "is_main", True):  # one timeline per run, also under torchrun
        return
    path = ctx.run_dir / "timeline.md"
    if not path.exists():
        path.write_text("| stage | component | result |\n|---|---|---|\n")
    with path.open("a") as fh:
        fh.write(f"| {stage.id} | {stage.name} | {json.dumps(result, default=str)[:200]} |\n")
