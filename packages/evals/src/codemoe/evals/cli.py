"""``codemoe eval``: evaluate a checkpoint on any suite, compare runs, rebuild a report, import
human-review verdicts, run ablations."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from codemoe.core.errors import CodemoeError, ConfigError, did_you_mean

__all__ = ["add_eval_command", "eval_pipeline", "like_stage", "suite_spec"]


def _checkpoint_folder(path: str) -> Path:
    """The checkpoint folder, or an error saying what the path is instead."""
    folder = Path(path)
    if not folder.is_dir():
        raise CodemoeError(f"checkpoint folder {folder} does not exist")
    if (folder / "config.json").is_file():
        return folder.resolve()
    inner = folder / "checkpoint"
    hint = (
        f"; did you mean {inner} (the checkpoint that stage wrote)?"
        if (inner / "config.json").is_file()
        else ": give the 'checkpoint' folder an sft or rl stage wrote (runs/<run>/<stage>/checkpoint)"
    )
    raise CodemoeError(f"{folder} is not a model checkpoint folder (no config.json in it){hint}")


def _option(item: str, what: str) -> tuple[str, Any]:
    """``key=value`` split, the value read as YAML (``1`` an int, ``[a, b]`` a list)."""
    import yaml

    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{what} '{item}' is not of the form key=value (e.g. seed=1)")
    try:
        return key.strip(), yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} '{item}': the value is not valid YAML ({str(exc).splitlines()[0]})") from None


def suite_spec(registry: Any, name: str, options: list[str], registry_dir: Path | None = None) -> dict[str, Any]:
    """The suite spec ``codemoe eval run --suite NAME key=value ...`` evaluates on: the suite preset
    ``NAME`` (as a pipeline's ``suite: NAME`` reads it) or the registered suite ``NAME``, with the
    options set; every key is checked against the suite's options."""
    from codemoe.core.config import load_preset, preset_folders, preset_names, search_path

    folders = preset_folders(search_path(registry_dir, registry.preset_dirs), "suite")
    presets = preset_names(folders)
    if name in presets:
        spec = load_preset(folders, name, f"--suite {name}")
    elif ("suite", name) in registry:
        spec = {"name": name}
    else:
        known = sorted({*presets, *registry.names("suite")})
        raise ConfigError(f"unknown suite '{name}'{did_you_mean(name, known)}. Suites: {', '.join(known)}.")
    accepted = [o.name for o in registry.get("suite", spec["name"]).options()]
    for item in options:
        key, value = _option(item, "suite option")
        if key not in accepted:
            raise ConfigError(
                f"suite option '{key}' (in '{item}'): suite '{name}' has no such option{did_you_mean(key, accepted)}. "
                f"Its options: {', '.join(accepted) or 'none'}."
            )
        spec[key] = value
    registry.make_config("suite", spec, where=f"--suite {name}")  # a wrong type names the key
    return spec


def _is_repository_suite(registry: Any, spec: dict[str, Any], split: str) -> bool:
    """Whether the suite's tasks are repositories (evaluated as an agent) or functions (completions)."""
    from codemoe.core.contracts import repository_task

    try:
        tasks = registry.build("suite", spec, where=f"--suite {spec['name']}").tasks(split)
    except ValueError as exc:  # a suite's own check of its options or split
        raise ConfigError(f"--suite {spec['name']}: {exc}") from None
    if not tasks:
        raise ConfigError(f"suite '{spec['name']}' has no {split} tasks with these options")
    return repository_task(tasks[0]) is not None


# what --like does not take from the stage it copies: its checkpoint, its tasks and its baseline
_NOT_COPIED = ("name", "checkpoint", "checkpoint_from", "baseline", "step", "suite", "split", "max_tasks")


def like_stage(spec: str) -> dict[str, Any]:
    """The options of eval stage ``STAGE`` of a run (``RUN_DIR:STAGE``; ``RUN_DIR`` alone: its last
    eval stage) from the run's saved ``config.yaml``, less its checkpoint, tasks and baseline: so a
    checkpoint is scored in the prompt, environment and sampling settings the run evaluated it with."""
    import yaml

    run_dir, stage_id = spec.rsplit(":", 1) if ":" in spec else (spec, "")
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--like {spec}: {run_dir} is not a run directory (no config.yaml in it)")
    stages = yaml.safe_load(path.read_text()).get("stages") or {}
    evals = [sid for sid, s in stages.items() if isinstance(s, dict) and s.get("name", sid) == "eval"]
    if not evals:
        raise ConfigError(f"--like {spec}: run {run_dir} has no eval stage")
    stage_id = stage_id or evals[-1]
    if stage_id not in evals:
        raise ConfigError(
            f"--like {spec}: run {run_dir} has no eval stage '{stage_id}'{did_you_mean(stage_id, evals)}; "
            f"its eval stages: {', '.join(evals)}"
        )
    return {key: value for key, value in stages[stage_id].items() if key not in _NOT_COPIED}


def eval_pipeline(args: argparse.Namespace, checkpoint: Path, suite: dict[str, Any], agent: bool) -> Any:
    """The one-stage pipeline ``codemoe eval run`` runs: the ``eval`` stage (episodes in the ``repo``
    environment for a repository suite) and a ``report`` stage. Options come from ``--like`` (a
    run's eval stage), then the flags given, then ``--set``; the rest are the stage's defaults."""
    from dataclasses import asdict

    from codemoe.core.config import RunConfig
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    stage: dict[str, Any] = like_stage(args.like) if args.like else {}
    stage.update(name="eval", checkpoint=str(checkpoint), suite=suite, split=args.split, max_tasks=args.max_tasks)
    flags = {"samples": args.samples, "max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens}
    stage.update({key: value for key, value in flags.items() if value is not None})
    if agent:  # a tool call is cut by no stop sequence: it ends at the end of its action
        stage["environment"] = stage.get("environment") or {"name": "repo"}
        stage.setdefault("stop", [])
    elif stage.get("environment") is not None:
        raise ConfigError(f"--like {args.like} is an agent evaluation; suite '{suite['name']}' has no repository tasks")
    cfg = OmegaConf.create(
        {
            "run": asdict(RunConfig(name=f"eval-{suite['name']}", dir=args.runs_dir, seed=args.seed)),
            "stages": {"eval": stage, "report": {"name": "report", "print_report": False}},
        }
    )
    for item in args.set:
        key, value = _option(item, "--set")
        try:
            OmegaConf.update(cfg, f"stages.eval.{key}", value, merge=True, force_add=True)
        except OmegaConfBaseException as exc:  # a key below a plain value (e.g. below environment: null)
            raise ConfigError(f"--set '{item}': {str(exc).splitlines()[0]}") from None
    return cfg


def _print_evaluation(result: dict[str, Any], summary: dict[str, Any]) -> None:
    from codemoe.evals.agent_metrics import METRICS, format_estimate

    agent = summary.get("agent")
    print(
        f"{result['suite']} ({result['split']}): {summary['tasks']} tasks, {summary['samples_per_task']} "
        f"{'episodes' if agent else 'samples'} per task, {summary['confidence']:.0%} CIs"
    )
    for k in summary["ks"]:
        est = summary["overall"][f"pass@{k}"]
        print(f"  pass@{k}: {100 * est['value']:.1f}% [{100 * est['low']:.1f}, {100 * est['high']:.1f}]")
    if agent:
        for name, metric in METRICS.items():
            print(f"  {metric.label}: {format_estimate(name, agent['metrics'][name])}")
        print("  stop reasons: " + ", ".join(f"{r} {n}" for r, n in agent["stop_reasons"].items()))


def _cmd_run(args: argparse.Namespace) -> int:
    from codemoe.core import Hooks, build_registry, run_pipeline
    from codemoe.evals.summary import load_summary

    checkpoint = _checkpoint_folder(args.checkpoint)
    registry = build_registry(args.pm)
    registry_dir = Path(args.registry) if args.registry else None
    name, *options = args.suite
    suite = suite_spec(registry, name, options, registry_dir)
    agent = _is_repository_suite(registry, suite, args.split)
    cfg = eval_pipeline(args, checkpoint, suite, agent)
    ctx = run_pipeline(cfg, registry, Hooks(args.pm), show_progress=not args.no_progress)
    result = ctx.results["eval"]
    summary = load_summary(Path(result["summary"]))
    _print_evaluation(result, summary)
    print(f"run directory: {ctx.run_dir} (report.md, eval/eval.json, eval/samples.jsonl)")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "run_dir": str(ctx.run_dir),
            "mode": "agent" if agent else "completions",
            "suite": suite,
            "split": args.split,
            **summary,
        }
        out.write_text(json.dumps(document, indent=2))
        print(f"written: {out}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from codemoe.evals.agent_metrics import compare_agent, format_comparison
    from codemoe.evals.compare import compare_summaries, format_improvement, resolve_pair

    (label_a, a), (label_b, b) = resolve_pair(
        Path(args.run_a), Path(args.run_b) if args.run_b else None, stage_a=args.stage_a, stage_b=args.stage_b
    )
    imp = compare_summaries(a, b, k=args.k, confidence=args.confidence, resamples=args.resamples)
    agent = None
    if "agent" in a and "agent" in b:  # two agent evaluations: every agent metric before and after
        agent = compare_agent(a["agent"], b["agent"], confidence=args.confidence, resamples=args.resamples)
    if args.json:
        extra = {"agent": agent} if agent else {}
        print(json.dumps({"a": label_a, "b": label_b, "k": args.k, **imp.as_dict(), **extra}, indent=2))
    else:
        print(format_improvement(label_a, label_b, imp, args.k))
        if agent:
            print(format_comparison(agent))
    return 0


def _cmd_compare_seeds(args: argparse.Namespace) -> int:
    from codemoe.evals.compare import compare_seeds, format_seeds

    try:
        a, b, imp = compare_seeds(args.baseline, args.candidate, stage_a=args.stage_a, stage_b=args.stage_b, k=args.k,
                                  confidence=args.confidence, resamples=args.resamples)
    except (FileNotFoundError, ValueError) as exc:  # a path that is no evaluation; runs of other task sets
        raise ConfigError(f"eval compare-seeds: {exc}") from None
    if args.json:
        runs = {"a": [{"run": label, "pass": value} for label, value in a],
                "b": [{"run": label, "pass": value} for label, value in b]}
        print(json.dumps({"k": args.k, "runs": runs, **imp.as_dict()}, indent=2))
    else:
        print(format_seeds(a, b, imp, args.k))
    return 0


def _comparison_options(p: argparse.ArgumentParser) -> None:
    """What ``compare`` and ``compare-seeds`` both take."""
    p.add_argument("--k", type=int, default=1, help="pass@k to compare (default 1)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence level (default 0.95)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--json", action="store_true", help="print JSON")


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
    from codemoe.evals.ablation import (
        ablation_markdown,
        format_ablations,
        format_plan,
        load_ablations,
        plan_ablations,
        run_ablations,
    )

    name, specs = load_ablations(args.spec)
    registry = build_registry(args.pm)
    out = Path(args.out) if args.out else None
    if args.plan:
        print(
            format_plan(
                plan_ablations(specs, registry, registry_dir=args.registry, overrides=args.overrides, out_dir=out)
            )
        )
        return 0
    suite = run_ablations(
        specs,
        registry,
        Hooks(args.pm),
        name=name if len(specs) > 1 else None,
        registry_dir=args.registry,
        overrides=args.overrides,
        show_progress=not args.no_progress,
        out_dir=out,
        announce=print,
        resume=args.resume,
    )
    results = suite["ablations"]
    print(ablation_markdown(results) if args.markdown else format_ablations(results))
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
    parser = subparsers.add_parser(
        "eval", help="evaluate a checkpoint, compare evaluations, reports, human review, ablations"
    )
    sub = parser.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser(
        "run",
        help="evaluate a checkpoint on any suite and split (agent episodes on a repository suite), outside a pipeline",
        description="Runs the eval stage on CHECKPOINT in a run directory of its own: episodes in the repo "
        "environment for a repository suite (synthetic-repos, agentic-core), completions for a function-level one "
        "(synthetic, humaneval). Example: codemoe eval run runs/agentic-repos-X/rl/checkpoint --suite "
        "synthetic-repos seed=1 heldout_tasks=50 --json heldout-seed1.json",
    )
    p.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="a checkpoint folder (the 'checkpoint' folder an sft or rl stage wrote)",
    )
    p.add_argument(
        "--suite",
        required=True,
        nargs="+",
        metavar=("NAME", "key=value"),
        help="a suite preset or registered suite (codemoe components suite), then its options: seed=1 heldout_tasks=50",
    )
    p.add_argument(
        "--split", default="heldout", choices=["train", "heldout"], help="split to evaluate (default heldout)"
    )
    p.add_argument(
        "--samples", type=int, help="samples (episodes) per task; pass@1 is their mean (default: the stage's, 8)"
    )
    p.add_argument("--max-turns", type=int, help="actions per episode of a repository suite (default: the stage's, 8)")
    p.add_argument(
        "--like",
        metavar="RUN_DIR[:STAGE]",
        help="take every option but checkpoint, suite and baseline from that run's eval stage (default: its last), "
        "e.g. the environment's prompt settings the checkpoint was trained and evaluated with",
    )
    p.add_argument("--max-tasks", type=int, default=0, help="evaluate the first N tasks of the split (default 0: all)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per completion or action (default: the eval stage's)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other eval stage option (codemoe components stage eval), e.g. --set temperature=0.6",
    )
    p.add_argument("--seed", type=int, default=0, help="run seed: sampling and bootstrap (default 0)")
    p.add_argument("--runs-dir", default="runs", help="parent folder of the run directory (default runs)")
    p.add_argument("--json", metavar="PATH", help="write the summary (pass@k, per family, agent metrics, CIs) here")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("compare", help="pass@k of run B vs run A with absolute and relative improvement and CIs")
    p.add_argument("run_a", help="baseline: a run directory, an eval stage folder or an eval.json")
    p.add_argument("run_b", nargs="?", help="candidate (default: the last eval stage of RUN_A vs its first)")
    p.add_argument("--stage-a", help="eval stage id in RUN_A (default: its last, or first with one run)")
    p.add_argument("--stage-b", help="eval stage id in RUN_B (default: its last)")
    _comparison_options(p)
    p.set_defaults(handler=_cmd_compare)

    p = sub.add_parser(
        "compare-seeds",
        help="pass@k of several runs (training seeds) of config B vs several of config A, CIs over tasks and runs",
        description="Compare two configs over several training runs each (one per seed): the interval "
        "resamples the tasks and each side's runs, so it carries the seed-to-seed spread that a "
        "comparison of two single runs leaves out. Every run must have graded the same tasks. Example: "
        "codemoe eval compare-seeds --baseline runs/qs-sync-* --candidate runs/qs-async-*",
    )
    p.add_argument("--baseline", nargs="+", type=Path, required=True, help="runs (or eval folders) of config A")
    p.add_argument("--candidate", nargs="+", type=Path, required=True, help="runs (or eval folders) of config B")
    p.add_argument("--stage-a", help="eval stage id in every baseline run (default: each run's last)")
    p.add_argument("--stage-b", help="eval stage id in every candidate run (default: each run's last)")
    _comparison_options(p)
    p.set_defaults(handler=_cmd_compare_seeds)

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

    p = sub.add_parser("ablation", help="run pipeline variants (MoE vs dense, with vs without RL, ...) and compare")
    p.add_argument(
        "spec",
        help="ablation YAML path, a list of them (specs: ...), or a ready one: rl-vs-sft, moe-vs-dense, "
        "agentic (all four agentic-*: rl-vs-sft, stepwise-vs-outcome, moe-vs-dense, samples)",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of every arm (a variant's own win)")
    p.add_argument("--plan", action="store_true", help="print the runs and shared stages, run nothing")
    p.add_argument("--out", help="folder of the runs and the ablation JSON and markdown (default: run.dir)")
    p.add_argument(
        "--markdown", action="store_true", help="print the table as markdown (it is written to a file anyway)"
    )
    p.add_argument(
        "--resume", action="store_true", help="take up the runs an earlier, stopped call left in --out (same configs)"
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=_cmd_ablation)
