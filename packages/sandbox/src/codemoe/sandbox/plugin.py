"""codemoe.sandbox's plugin: registers its components and commands through the ``codemoe`` entry point.

Each area of the package has one small ``register_*`` function; the hook calls them in turn.
Factories and configs are ``"module:attr"`` strings, so listing components imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

import pluggy

hookimpl = pluggy.HookimplMarker("codemoe")  # the sandbox does not depend on codemoe-core


def register_executors(registry: Any) -> None:
    """Executors (kind ``executor``): ``local`` (the default) and ``remote``."""
    registry.register(
        "executor",
        "local",
        "codemoe.sandbox.local:build_local_executor",
        "codemoe.sandbox.local:LocalExecutorConfig",
        summary="isolated warm-worker pool on this machine (namespaces, rlimits, fork server)",
    )
    registry.register(
        "executor",
        "remote",
        "codemoe.sandbox.remote:build_remote_executor",
        "codemoe.sandbox.remote:RemoteExecutorConfig",
        summary="client of a `codemoe sandbox serve` service over HTTP",
    )


@hookimpl
def codemoe_register_components(registry: Any) -> None:
    """Register executors, reward components and agent environments."""
    register_executors(registry)
    from codemoe.sandbox.rewards.registration import register_rewards
    register_rewards(registry)
    from codemoe.sandbox.agent.registration import register_agent
    register_agent(registry)


@hookimpl
def codemoe_add_commands(subparsers: Any) -> None:
    """Add ``codemoe sandbox`` (run, doctor, serve, ...)."""
    from codemoe.sandbox.cli import add_sandbox_command

    add_sandbox_command(subparsers)
    from codemoe.sandbox.agent.cli import add_tasks_command
    add_tasks_command(subparsers)
