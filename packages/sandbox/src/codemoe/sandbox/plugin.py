"""codemoe.sandbox's plugin: registers its components through the ``codemoe`` entry point."""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("codemoe")  # the sandbox does not depend on codemoe-core


@hookimpl
def codemoe_register_components(registry) -> None:
    """No components yet."""
