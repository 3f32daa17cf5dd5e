"""codemoe.serving's plugin: the generation engines (kind ``engine``) and the ``codemoe serve`` command.

:data:`COMPONENTS` is the package's one registration table, walked by the hook below. Factories and
configs are ``"module:attr"`` strings, imported only when a component is built, so listing
components imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemoe.core.hookspecs import hookimpl

if TYPE_CHECKING:
    import argparse

    from codemoe.core.registry import Registry

# (kind, name, "module:factory", "module:Config", summary)
COMPONENTS: list[tuple[str, str, str, str, str]] = [
    (
        "engine",
        "embedded",
        "codemoe.serving.embedded:build_embedded_engine",
        "codemoe.serving.embedded:EmbeddedEngineConfig",
        "in-process engine: prefix sharing, continuous batching, log-probs and routing",
    ),
    (
        "engine",
        "openai",
        "codemoe.serving.remote:build_openai_engine",
        "codemoe.serving.remote:OpenAIEngineConfig",
        "client of an OpenAI-compatible server (/v1/completions with log-probs)",
    ),
    (
        "engine",
        "sglang",
        "codemoe.serving.remote:build_sglang_engine",
        "codemoe.serving.remote:SGLangEngineConfig",
        "client of SGLang servers (native /generate, weight updates from tensors, a process group or disk)",
    ),
]


@hookimpl
def codemoe_register_components(registry: Registry) -> None:
    """Register every row of :data:`COMPONENTS`."""
    for kind, name, factory, config, summary in COMPONENTS:
        registry.register(kind, name, factory, config, summary=summary)


@hookimpl
def codemoe_add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``codemoe serve`` (an OpenAI-compatible server over a checkpoint)."""
    from codemoe.serving.cli import add_serve_command

    add_serve_command(subparsers)
