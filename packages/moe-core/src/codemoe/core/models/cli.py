"""``codemoe model summary PRESET`` and ``codemoe model init PRESET --out DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_model_command", "default_tokenizer_texts"]


def add_model_command(subparsers) -> None:
    """Add the ``model`` command and its subcommands to the ``codemoe`` parser."""
    parser = subparsers.add_parser("model", help="inspect and initialise MoE models from presets")
    sub = parser.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)
    summary = sub.add_parser("summary", help="parameter counts and FLOPs/token of a preset (no memory allocated)")
    summary.add_argument("preset", help="model preset name in registry/models")
    summary.add_argument("--json", action="store_true", help="print JSON instead of a table")
    summary.set_defaults(handler=_cmd_summary)
    init = sub.add_parser("init", help="write a freshly initialised checkpoint with a tokenizer")
    init.add_argument("preset", help="model preset name in registry/models")
    init.add_argument("--out", required=True, help="output folder")
    init.add_argument("--texts", nargs="*", default=None, help="text files to train the tokenizer on")
    init.add_argument("--seed", type=int, default=0, help="initialisation seed")
    init.set_defaults(handler=_cmd_init)


def _human(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(int(n))


def _cmd_summary(args: argparse.Namespace) -> int:
    import json

    from codemoe.core.models.accounting import count_parameters
    from codemoe.core.models.build import default_registry
    from rich.console import Console
    from rich.table import Table

    counts = count_parameters(args.preset, registry=default_registry()).as_dict()
    if args.json:
        print(json.dumps(counts, indent=2))
        return 0
    table = Table(title=f"model preset {args.preset}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("exact", justify="right")
    for name, value in counts.items():
        table.add_row(name, _human(value), f"{value:,}")
    Console().print(table)
    return 0


def default_tokenizer_texts() -> list[str]:
    """Python sources shipped with codemoe-core: a small, local corpus of code to train a tokenizer on."""
    root = Path(__file__).resolve().parents[1]
    return [p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))]


def _check_fits(spec: dict, registry) -> None:
    """Refuse to initialise a preset whose weights would not fit in half of this machine's memory."""
    import os

    import torch
    from codemoe.core.errors import CodemoeError
    from codemoe.core.models.accounting import count_parameters

    total = count_parameters(spec, registry=registry).total
    need = total * torch.empty(0, dtype=getattr(torch, spec.get("dtype", "float32"))).element_size()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > memory // 2:
        raise CodemoeError(
            f"model preset has {_human(total)} parameters ({need / 2**30:.0f} GiB of weights), more than half of "
            f"this machine's {memory / 2**30:.0f} GiB: initialise it where it fits, or inspect it with "
            "'codemoe model summary'"
        )


def _cmd_init(args: argparse.Namespace) -> int:
    import torch
    from codemoe.core.models.build import build_model, default_registry, resolve_spec
    from codemoe.core.models.checkpoint import save_pretrained
    from codemoe.core.tokenizer import train_tokenizer

    spec = resolve_spec(args.preset)
    registry = default_registry()
    _check_fits(spec, registry)
    texts = [Path(p).read_text(encoding="utf-8") for p in args.texts] if args.texts else default_tokenizer_texts()
    tokenizer = train_tokenizer(texts, vocab_size=int(spec.get("vocab_size", 1024)))
    torch.manual_seed(args.seed)
    model = build_model(spec, vocab_size=len(tokenizer), registry=registry)
    out = save_pretrained(model, tokenizer, args.out)
    print(f"wrote {out} ({sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {len(tokenizer)})")
    return 0
