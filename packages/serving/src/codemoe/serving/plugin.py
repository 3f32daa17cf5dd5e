"""codemoe.serving's plugin: registers its components through the ``codemoe`` entry point."""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl


@hookimpl
def codemoe_register_components(registry) -> None:
    """No components yet."""
