"""``codemoe serve MODEL_DIR``: an OpenAI- and SGLang-compatible HTTP server over the embedded engine."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

__all__ = ["add_serve_command"]


def add_serve_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve a checkpoint over an OpenAI-compatible HTTP API")
    p.add_argument("model_dir", help="checkpoint directory (config.json, safetensors, tokenizer)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--served-model-name", help="model name in the API (default: the directory name)")
    p.add_argument("--max-batch-size", type=int, default=256, help="samples decoded together")
    p.add_argument("--max-context", type=int, default=0, help="longest prompt + completion (default: the model's)")
    p.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=0,
        help="keep finished samples' KV (this many tokens) so a prompt that extends one prefills only the rest",
    )
    p.add_argument(
        "--common-prefix-tokens",
        type=int,
        default=64,
        help="prompts sharing at least this many leading tokens keep and read them once (default 64; 0: off)",
    )
    p.add_argument("--device", default="auto", help="auto (the GPU when CUDA is available), cpu, cuda or cuda:N")
    p.add_argument("--http", choices=("stdlib", "fastapi"), default="stdlib",
                   help="HTTP transport: the standard library's threaded server (default, the faster one beside an "
                   "in-process engine) or FastAPI + uvicorn (needs codemoe-serving[fastapi])")
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from codemoe.serving.embedded import EmbeddedEngineConfig, build_embedded_engine
    from codemoe.serving.handlers import ServingApp
    from codemoe.serving.server import ApiServer

    if args.http == "fastapi":
        from codemoe.serving.server_fastapi import FastApiServer as ApiServer

    path = Path(args.model_dir)
    config = EmbeddedEngineConfig(
        model_dir=str(path),
        max_batch_size=args.max_batch_size,
        max_context=args.max_context,
        prefix_cache_tokens=args.prefix_cache_tokens,
        common_prefix_tokens=args.common_prefix_tokens,
        device=args.device,
    )
    engine = build_embedded_engine(config)
    app = ServingApp(engine, args.served_model_name or path.resolve().name, str(path))
    server = ApiServer(app, args.host, args.port)
    print(f"codemoe serve: {app.model_name} on {server.url} (OpenAI API at {server.url}/v1)", flush=True)
    # SIGINT and SIGTERM stop the server cleanly, also when the launcher left SIGINT ignored
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
