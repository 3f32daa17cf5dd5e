"""``codemoe eval``: compare runs, rebuild a report, import human-review verdicts, run ablations."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["add_eval_command"]


def _cmd_compare(args: argparse.Namespace) -> int:
    from codemoe.evals.compare import compare_runs, format_improvement

    label_a, label_b, imp = compare_runs(
        Path(args.run_a),
        Path(args.run_b) if args.run_b else None,
        stage_a=args.stage_a,
        stage_b=args.stage_b,
        k=args.k,
        confidence=args.confidence,
        resamples=args.resamples,
    )
    if args.json:
        print(json.dumps({"a": label_a, "b": label_b, "k": args.k, **imp.as_dict()}, indent=2))
    else:
        print(format_improvement(label_a, label_b, imp, args.k))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from codemoe.evals.report import build_report

    path = build_report(Path(args.run_dir), baseline=args.baseline, candidate=args.candidate, k=args.k)
    print(path.read_text())
    print(f"written: {path}")
    return 0


def _cmd_review_import(args: argparse.Namespace) -> int:
    from codemoe.evals.grading import GradedSample
    from codemoe.evals.review import REVIEW_JSON, agreement, load_verdicts

    folder = Path(args.review_dir)
    review = folder / REVIEW_JSON if folder.is_dir() else folder
    items = [GradedSample.from_dict(d) for d in json.loads(review.read_text())["items"]]
    result = agreement(items, load_verdicts(Path(args.verdicts)))
    out = review.parent / "review_agreement.json"
    out.write_text(json.dumps(result, indent=2))
    print(
        f"reviewed {result['reviewed']} of {result['sampled']} sampled, {result['blind']} blind; "
        f"agreement {result['agreement']:.1%}, Cohen's kappa {result['kappa']:.3f} (blind verdicts only)"
    )
    if result["after_reveal"]:
        print(f"  left out: {result['after_reveal']} verdicts given after the grader's verdict was shown")
    for key in result["disagreements"]:
        print(f"  disagreement: {key}")
    for key in result["disagreements_after_reveal"]:
        print(f"  disagreement (given after the reveal, not counted): {key}")
    print(f"written: {out}")
    return 0


def _cmd_ablation(args: argparse.Namespace) -> int:
    from codemoe.core import Hooks, build_registry
    from codemoe.evals.ablation import format_ablation, load_ablation, run_ablation

    spec = load_ablation(args.spec)
    result = run_ablation(
        spec, build_registry(args.pm), Hooks(args.pm), registry_dir=args.registry, show_progress=not args.no_progress
    )
    print(format_ablation(result))
    return 0


def _cmd_lm_eval(args: argparse.Namespace) -> int:
    from codemoe.evals.lmeval import run_lm_eval

    metadata = json.loads(args.metadata) if args.metadata else None
    results = run_lm_eval(
        args.checkpoint, args.tasks, limit=args.limit, batch_size=args.batch_size, device=args.device, metadata=metadata
    )
    print(json.dumps(results, indent=2))
    return 0


def add_eval_command(subparsers: Any) -> None:
    """Register ``codemoe eval`` and its subcommands."""
    parser = subparsers.add_parser("eval", help="compare evaluations, reports, human review, ablations")
    sub = parser.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser("compare", help="pass@k of run B vs run A with absolute and relative improvement and CIs")
    p.add_argument("run_a", help="baseline: a run directory, an eval stage folder or an eval.json")
    p.add_argument("run_b", nargs="?", help="candidate (default: the last eval stage of RUN_A vs its first)")
    p.add_argument("--stage-a", help="eval stage id in RUN_A (default: its last, or first with one run)")
    p.add_argument("--stage-b", help="eval stage id in RUN_B (default: its last)")
    p.add_argument("--k", type=int, default=1, help="pass@k to compare (default 1)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence level (default 0.95)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_cmd_compare)

    p = sub.add_parser("report", help="(re)write report.md and plots of a run directory")
    p.add_argument("run_dir")
    p.add_argument("--baseline", help="eval stage to compare from (default: first)")
    p.add_argument("--candidate", help="eval stage to compare to (default: last)")
    p.add_argument("--k", type=int, default=1)
    p.set_defaults(handler=_cmd_report)

    p = sub.add_parser("review-import", help="import human verdicts and report grader-human agreement")
    p.add_argument("review_dir", help="the eval stage folder holding review.json (or the file)")
    p.add_argument("verdicts", help="verdicts.json saved from review.html")
    p.set_defaults(handler=_cmd_review_import)

    p = sub.add_parser("lm-eval", help="evaluate a checkpoint with lm-eval on codemoe's tasks (sandbox-graded)")
    p.add_argument("checkpoint", help="checkpoint directory (model and tokenizer)")
    p.add_argument("--tasks", nargs="+", default=["codemoe_synthetic"], help="codemoe_synthetic, codemoe_humaneval")
    p.add_argument("--limit", type=int, help="evaluate only the first N documents of each task")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default="auto", help="auto (the GPU when CUDA is available), cpu, cuda or cuda:N")
    p.add_argument("--metadata", help="JSON passed to the task data loaders, e.g. '{\"seed\": 1}'")
    p.set_defaults(handler=_cmd_lm_eval)

    p = sub.add_parser("ablation", help="run pipeline variants (MoE vs dense, with vs without RL) and compare")
    p.add_argument("spec", help="ablation YAML path, or a ready one: rl-vs-sft, moe-vs-dense")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=_cmd_ablation)
