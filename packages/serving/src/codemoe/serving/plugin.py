"""codemoe.serving's plugin: the generation engines and the ``codemoe serve`` command."""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl


@hookimpl
def codemoe_register_components(registry) -> None:
    registry.register(
        "engine",
        "embedded",
        "codemoe.serving.embedded:build_embedded_engine",
        "codemoe.serving.embedded:EmbeddedEngineConfig",
        summary="in-process engine: prefix sharing, continuous batching, log-probs and routing",
    )
    registry.register(
        "engine",
        "openai",
        "codemoe.serving.remote:build_openai_engine",
        "codemoe.serving.remote:OpenAIEngineConfig",
        summary="client of an OpenAI-compatible server (/v1/completions with log-probs)",
    )
    registry.register(
        "engine",
        "sglang",
        "codemoe.serving.remote:build_sglang_engine",
        "codemoe.serving.remote:SGLangEngineConfig",
        summary="client of an SGLang server (native /generate, update_weights_from_disk)",
    )


@hookimpl
def codemoe_add_commands(subparsers) -> None:
    from codemoe.serving.cli import add_serve_command

    add_serve_command(subparsers)
