"""codemoe-core's own plugin: registered through the ``codemoe`` entry point like any other."""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl


@hookimpl
def codemoe_register_components(registry) -> None:
    registry.register(
        "stage",
        "environment",
        "codemoe.core.stages:EnvironmentStage",
        "codemoe.core.stages:EnvironmentConfig",
        summary="record the software and hardware of the run",
    )
