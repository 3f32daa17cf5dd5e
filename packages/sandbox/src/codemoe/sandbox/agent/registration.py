"""Registers the agent environment with the codemoe registry (called from the sandbox's plugin)."""

from __future__ import annotations

from typing import Any

__all__ = ["register_agent"]


def register_agent(registry: Any) -> None:
    """Environments (kind ``environment``): ``repo``, multi-turn tool use on repository tasks."""
    registry.register(
        "environment",
        "repo",
        "codemoe.sandbox.agent.environment:build_repo_environment",
        "codemoe.sandbox.agent.environment:RepoEnvironmentConfig",
        summary="multi-turn coding environment: strict JSON tool calls on a sandboxed repository copy",
    )
