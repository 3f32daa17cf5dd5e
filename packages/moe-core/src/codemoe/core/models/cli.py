"""``codemoe model summary PRESET``, ``codemoe model plan PRESET --dp N --ep M`` and
``codemoe model init PRESET --out DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_model_command", "default_tokenizer_texts"]


def add_model_command(subparsers) -> None:
    """Add the ``model`` command and its subcommands to the ``codemoe`` parser."""
    parser = subparsers.add_parser("model", help="inspect and initialise MoE models from presets")
    sub = parser.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)
    summary = sub.add_parser("summary", help="parameter counts and FLOPs/token of a preset (no memory allocated)")
    summary.add_argument("preset", help="model preset name (shipped in codemoe/core/presets/models, or in the overlay registry/models)")
    summary.add_argument("--json", action="store_true", help="print JSON instead of a table")
    summary.set_defaults(handler=_cmd_summary)
    _add_plan_command(sub)
    init = sub.add_parser("init", help="write a freshly initialised checkpoint with a tokenizer")
    init.add_argument("preset", help="model preset name (shipped in codemoe/core/presets/models, or in the overlay registry/models)")
    init.add_argument("--out", required=True, help="output folder")
    init.add_argument("--texts", nargs="*", default=None, help="text files to train the tokenizer on")
    init.add_argument("--seed", type=int, default=0, help="initialisation seed")
    init.set_defaults(handler=_cmd_init)


def _add_plan_command(sub) -> None:
    plan = sub.add_parser(
        "plan",
        help="memory and communication per rank of a training step on a dp x ep mesh (no memory allocated)",
        description="Bytes per rank of one training step (docs/memory-plan.md gives every formula).",
    )
    plan.add_argument("preset", help="model preset name (shipped in codemoe/core/presets/models, or in the overlay registry/models), or a path to a model YAML")
    plan.add_argument("--dp", type=int, default=1, help="data-parallel ranks (FSDP shards over dp x ep)")
    plan.add_argument("--ep", type=int, default=1, help="expert-parallel ranks the experts are split over")
    plan.add_argument("--seq", type=int, default=2048, help="tokens per sequence L")
    plan.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch B")
    plan.add_argument("--checkpointing", action="store_true", help="activation checkpointing per block")
    plan.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: fp32 master weights")
    plan.add_argument(
        "--engine",
        choices=("embedded", "external"),
        default="embedded",
        help="embedded: the engine runs the policy on these ranks; external: sglang/openai on their own GPUs",
    )
    plan.add_argument(
        "--engine-batch", type=int, default=None, help="samples in the embedded engine's KV cache (default: B)"
    )
    plan.add_argument("--reference", action="store_true", help="a frozen reference policy (a KL term)")
    plan.add_argument("--gpu-memory", type=float, default=None, help="GB of memory per GPU: says whether it fits")
    plan.add_argument("--json", metavar="PATH", default=None, help="also write the plan as JSON ('-': print it)")
    plan.set_defaults(handler=_cmd_plan)


def _gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB"


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from codemoe.core.models.build import default_registry
    from codemoe.core.models.plan import plan_memory
    from rich.console import Console
    from rich.table import Table

    p = plan_memory(
        args.preset,
        dp=args.dp,
        ep=args.ep,
        seq=args.seq,
        micro_batch=args.micro_batch,
        checkpointing=args.checkpointing,
        precision=args.precision,
        engine=args.engine,
        engine_batch=args.engine_batch,
        reference=args.reference,
        gpu_memory_gb=args.gpu_memory,
        registry=default_registry(),
    )
    if args.json:
        text = json.dumps(p.as_dict(), indent=2)
        if args.json == "-":
            print(text)
            return 0
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    ckpt = "with" if p.checkpointing else "without"
    table = Table(
        title=(
            f"{p.preset}: {_human(p.parameters_total)} parameters on dp {p.dp} x ep {p.ep} = {p.dp * p.ep} ranks, "
            f"{p.precision}, micro-batch {p.micro_batch} x {p.seq} tokens, {ckpt} activation checkpointing"
        )
    )
    table.add_column("per rank")
    table.add_column("bytes", justify="right")
    table.add_column("what", overflow="fold")
    master = " (the fp32 master weights)" if p.precision == "bf16" else ""
    rows = [
        ("parameters", p.parameters, f"{_human(p.parameters_per_rank)} fp32 shards{master}"),
        ("gradients", p.gradients, "fp32 shards"),
        ("optimizer", p.optimizer, "AdamW: two fp32 moments"),
        ("optimizer step", p.optimizer_step, "foreach AdamW's temporary"),
        ("activations", p.activations_full, "without checkpointing" + (" (used)" if not p.checkpointing else "")),
        (
            "activations, checkpointed",
            p.activations_checkpointed,
            "with checkpointing" + (" (used)" if p.checkpointing else ""),
        ),
        (
            "gathered",
            p.gathered,
            "FSDP's unsharded root and layers" if p.dp * p.ep > 1 else "autocast's bf16 weight copies",
        ),
        ("reference", p.reference_weights, "the frozen reference policy's fp32 shards"),
        (
            "training peak",
            p.training_peak,
            "parameters + optimizer + reference + gathered + max(gradients + activations - loss gradients, "
            "activations, gradients + step)",
        ),
        (
            "engine KV cache",
            p.engine_kv_cache,
            f"{p.engine_batch} samples x {p.seq} tokens (the embedded engine runs the policy's weights)"
            if p.engine == "embedded"
            else "the external engine's own GPUs",
        ),
        ("sync buffer", p.sync_buffer, "the whole fp32 state dict every rank gathers for an external engine"),
        ("sync peak", p.sync_peak, "parameters + gradients + optimizer + reference + sync buffer"),
        ("total", p.total, "max(training peak, sync peak) + engine KV cache"),
        (
            "all-to-all forward",
            p.all_to_all_forward,
            f"dispatch + combine of {p.micro_batch * p.seq * p.top_k:,} rows x "
            f"{p.moe_layers} MoE layers, (ep-1)/ep leave the rank",
        ),
        (
            "all-to-all backward",
            p.all_to_all_backward,
            "gradients" + (" + the recomputed forward" if p.checkpointing else ""),
        ),
        ("weight sync", p.weight_sync, "received per update to gather the whole state dict (external engine)"),
    ]
    for name, value, what in rows:
        table.add_row(name, _gb(value), what)
    console = Console()
    console.print(table)
    if p.fits is not None:
        verdict = "fits" if p.fits else "does NOT fit"
        console.print(f"total {_gb(p.total)} {verdict} in {p.gpu_memory_gb:g} GB per GPU")
        if not p.fits and p.training_peak <= p.gpu_memory_gb * 1e9:
            console.print(
                f"(the training step alone, {_gb(p.training_peak)}, fits: docs/memory-plan.md has the levers)"
            )
    return 0


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
