"""The plugin module named by the ``codemoe`` entry point.

It registers components the way codemoe's own packages do: one table, :data:`COMPONENTS`, of
``(kind, name, "module:factory", "module:Config", summary)`` rows, walked by
``codemoe_register_components``. The types come from codemoe-core only for type checkers; at run
time the plugin needs nothing but pluggy.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from codemoe.core import Registry, RunContext, StageInfo

hookimpl = pluggy.HookimplMarker("codemoe")

# (kind, name, "module:factory", "module:Config", summary)
COMPONENTS: list[tuple[str, str, str, str, str]] = [
    (
        "stage",
        "disk-check",
        "codemoe_example.stages:DiskCheck",
        "codemoe_example.stages:DiskCheckConfig",
        "fail early when the run directory's disk is short of space",
    ),
    (
        "reward",
        "concise",
        "codemoe_example.rewards:Concise",
        "codemoe_example.rewards:ConciseConfig",
        "reward part: full value for a change of at most max_lines added lines",
    ),
]


@hookimpl
def codemoe_register_components(registry: Registry) -> None:
    """Register every row of :data:`COMPONENTS`."""
    for kind, name, factory, config, summary in COMPONENTS:
        registry.register(kind, name, factory, config, summary=summary)


@hookimpl
def codemoe_after_stage(ctx: RunContext, stage: StageInfo, result: dict[str, Any]) -> None:
    """Append the finished stage to ``timeline.md`` in the run directory."""
    if not ctx.is_main:  # one timeline per run, also under torchrun
        return
    path = ctx.run_dir / "timeline.md"
    if not path.exists():
        path.write_text("| stage | component | result |\n|---|---|---|\n")
    with path.open("a") as fh:
        fh.write(f"| {stage.id} | {stage.name} | {json.dumps(result, default=str)[:200]} |\n")
