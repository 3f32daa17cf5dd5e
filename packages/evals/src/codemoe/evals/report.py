"""``report.md`` for a run: evaluations with CIs, the improvement, per-family scores, agent metrics
(and their change) of agent evaluations, training curves, off-policy rollouts (policy lag, importance
weights, engine/trainer gaps) and expert load, human-review links, and the plots (written next to it
in ``plots/``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codemoe.evals.agent_metrics import METRICS, compare_agent, format_change, format_estimate
from codemoe.evals.compare import compare_summaries, eval_stages, format_improvement
from codemoe.evals.curves import expert_load, off_policy_stages, read_metrics, series
from codemoe.evals.plots import write_plots
from codemoe.evals.summary import load_summary

__all__ = ["REPORT_FILE", "build_report"]

REPORT_FILE = "report.md"

# what each plot of codemoe.evals.plots shows, under it in the report
_CAPTIONS = {
    "loss": "Training loss per stage (SFT: cross-entropy per completion token, its warm-up phases shaded).",
    "reward": "Reward per step: the mean with a band of one standard deviation over the step's samples; "
    "each reward component's mean beside it.",
    "pass_at_1": "Training pass rate on visible tests, and each evaluation's pass@1 on hidden tests with its CI; "
    "the y axis is fitted to the values (its range is in the title).",
    "expert_load": "Share of each layer's routed tokens per expert over training, one colour scale for every "
    "layer: white is the uniform share 1/E (marked on the colour bar), red more, blue less.",
    "kl_entropy": "KL to the reference policy and the policy's entropy per token.",
    "off_policy": "Off-policy rollouts per step: the batch's policy lag (and batches dropped), the importance "
    "weights' mean and range, the engine's log-probs against the trainer's (mean and largest gap per token), "
    "and the share of routing decisions they agree on.",
}


def _ci(block: Mapping[str, float]) -> str:
    return f"{100 * block['value']:.1f}% [{100 * block['low']:.1f}, {100 * block['high']:.1f}]"


def _relative(path: Path, root: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path


def _eval_table(evals: Mapping[str, dict[str, Any]], summaries: Mapping[str, dict[str, Any]]) -> list[str]:
    ks = sorted({k for s in summaries.values() for k in s["ks"]})
    conf = next(iter(summaries.values()))["confidence"]
    head = ["stage", "suite", "split", "checkpoint", "tasks", "samples/task"] + [
        f"pass@{k} ({conf:.0%} CI)" for k in ks
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sid, result in evals.items():
        s = summaries[sid]
        cells = [
            sid,
            str(result.get("suite", "")),
            str(result.get("split", "")),
            str(result.get("checkpoint_from") or Path(str(result.get("checkpoint", ""))).name),
            str(s["tasks"]),
            str(s["samples_per_task"]),
        ] + [_ci(s["overall"][f"pass@{k}"]) if f"pass@{k}" in s["overall"] else "-" for k in ks]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _family_table(summaries: Mapping[str, dict[str, Any]]) -> list[str]:
    families = sorted({f for s in summaries.values() for f in s["families"]})
    head = ["family", *summaries]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for family in families:
        row = [family]
        for s in summaries.values():
            block = s["families"].get(family)
            row.append(f"{_ci(block['pass@1'])} ({block['tasks']} tasks)" if block and "pass@1" in block else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _agent_table(agents: Mapping[str, dict[str, Any]]) -> list[str]:
    """One column per agent evaluation: each metric with its CI and what it averages over."""
    head = ["metric", *agents]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, metric in METRICS.items():
        lines.append(
            "| "
            + " | ".join([metric.label, *(format_estimate(name, a["metrics"][name]) for a in agents.values())])
            + " |"
        )
    reasons = [", ".join(f"{r} {n}" for r, n in a["stop_reasons"].items()) for a in agents.values()]
    lines.append("| " + " | ".join(["stop reasons (episodes)", *reasons]) + " |")
    return lines


def _agent_change(a: str, b: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Each agent metric of stage ``a`` and of stage ``b``, and the change (paired over tasks)."""
    cmp = compare_agent(before, after, confidence=before["confidence"])
    pct = f"{cmp['confidence']:.0%}"
    lines = [
        f"{cmp['tasks']} tasks, {'paired' if cmp['paired'] else 'unpaired'} bootstrap over tasks, {pct} CI.",
        "",
        f"| metric | {a} (before) | {b} (after) | change | relative |",
        "|---|---|---|---|---|",
    ]
    for name, metric in METRICS.items():
        m = cmp["metrics"][name]
        rel = m["relative"]
        relative = (
            "-"
            if rel["value"] is None
            else f"{100 * rel['value']:+.1f}% [{100 * rel['low']:+.1f}, {100 * rel['high']:+.1f}]"
        )
        cells = [
            metric.label,
            format_estimate(name, m["before"]),
            format_estimate(name, m["after"]),
            format_change(name, m["absolute"]),
            relative,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _training_table(records: list[dict[str, Any]]) -> list[str]:
    rows = []
    quantities = ("loss", "reward", "pass_rate", "kl", "entropy")
    curves = {q: series(records, q) for q in quantities}
    stages = sorted({sid for c in curves.values() for sid in c})
    for sid in stages:
        cells = [sid, *(_trend(curves[q][sid][1] if sid in curves[q] else [], 3) for q in quantities)]
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    head = "| stage | loss (first 5 steps -> last 5, mean) | reward | pass rate | KL | entropy |"
    return [head, "|---|---|---|---|---|---|", *rows]


def _expert_lines(records: list[dict[str, Any]]) -> list[str]:
    steps, grids = expert_load(records)
    if not steps:
        return []
    last = grids[-1]
    lines = [
        f"At step {steps[-1]} (share of routed tokens per expert; uniform would be {1 / len(last[0]):.3f}):",
        "",
        "| layer | min | max | max / uniform |",
        "|---|---|---|---|",
    ]
    for layer, row in enumerate(last):
        total = sum(row) or 1.0
        shares = [v / total for v in row]
        lines.append(f"| {layer} | {min(shares):.3f} | {max(shares):.3f} | {max(shares) * len(shares):.2f} |")
    return lines


_OFF_POLICY = ("staleness_mean", "stale_dropped", "is_weight_mean", "is_weight_min", "is_weight_max",
               "is_truncated_frac", "is_masked_frac", "logp_mismatch_mean", "logp_mismatch_max", "routing_agreement")


def _trend(values: list[float], digits: int) -> str:
    """Mean of the first / last ``w`` steps (5, or half a short run): single steps are noisy."""
    if not values:
        return "-"
    w = max(1, min(5, len(values) // 2))
    return f"{sum(values[:w]) / w:.{digits}f} -> {sum(values[-w:]) / w:.{digits}f}"


def _off_policy_lines(records: list[dict[str, Any]]) -> list[str]:
    """Per RL stage whose samples were not all the trainer's own policy's (a policy lag, or an engine
    whose log-probs or routing differ): the staleness histogram, batches dropped, the IS weights
    and the engine/trainer gaps, first 5 steps -> last 5 (means) where a trend matters."""
    curves = {q: series(records, q) for q in _OFF_POLICY}
    rows = []
    for sid in sorted(off_policy_stages(records)):  # on-policy, on the policy itself: nothing to show
        v = {q: curves[q][sid][1] if sid in curves[q] else [] for q in _OFF_POLICY}
        histogram: dict[int, float] = {}
        for record in records:
            if record.get("stage") == sid and record.get("step") is not None:
                for key, value in record.items():
                    if key.startswith("staleness/") and value:
                        lag = int(key.split("/")[1])
                        histogram[lag] = histogram.get(lag, 0.0) + value
        total = sum(histogram.values())
        lags = ", ".join(f"{k}: {n / total:.1%}" for k, n in sorted(histogram.items())) if total else "-"
        weights = v["is_weight_mean"]
        band = (f"{sum(weights) / len(weights):.3f} [{min(v['is_weight_min']):.3f}, {max(v['is_weight_max']):.3f}]"
                if weights else "-")
        cut = [sum(v[q]) / len(v[q]) if v[q] else 0.0 for q in ("is_truncated_frac", "is_masked_frac")]
        rows.append(f"| {sid} | {lags} | {sum(v['stale_dropped']):.0f} | {band} | {cut[0]:.2%} / {cut[1]:.2%} | "
                    f"{_trend(v['logp_mismatch_mean'], 4)} | {_trend(v['logp_mismatch_max'], 3)} | "
                    f"{_trend(v['routing_agreement'], 3)} |")
    if not rows:
        return []
    return [
        "Steps by the policy lag of their batch (versions), batches dropped as too stale, the importance "
        "weights (mean over steps [lowest, highest]), the share of tokens truncated / masked, and the engine's "
        "log-probs and routing against the trainer's (first 5 steps -> last 5, means):",
        "",
        "| stage | lag: share of steps | dropped | IS weight | truncated / masked | log-prob gap, mean | log-prob gap, max "
        "| routing agreement |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def build_report(
    run_dir: Path,
    results: Mapping[str, Any] | None = None,
    *,
    baseline: str | None = None,
    candidate: str | None = None,
    k: int = 1,
    title: str | None = None,
) -> Path:
    """Write ``report.md`` and ``plots/`` into ``run_dir``; returns the report's path.

    ``baseline`` and ``candidate`` are eval stage ids to compare (default: the first and last).
    """
    run_dir = Path(run_dir)
    evals = eval_stages(run_dir, results)
    summaries = {sid: load_summary(Path(r["summary"])) for sid, r in evals.items()}
    records = read_metrics(run_dir)
    points = {
        sid: (
            int(evals[sid].get("step") or 0),
            *(summaries[sid]["overall"]["pass@1"][x] for x in ("value", "low", "high")),
        )
        for sid in evals
        if "pass@1" in summaries[sid]["overall"]
    }
    plots = write_plots(records, run_dir / "plots", points)
    out = [f"# {title or 'codemoe run report'}: {run_dir.name}", ""]
    if evals:
        out += ["## Evaluation (hidden tests)", "", *_eval_table(evals, summaries), ""]
        ids = list(evals)
        a, b = baseline or ids[0], candidate or ids[-1]
        if a != b:
            imp = compare_summaries(summaries[a], summaries[b], k=k)
            out += ["## Improvement", "", "```", format_improvement(a, b, imp, k), "```", ""]
        out += ["## pass@1 per family", "", *_family_table(summaries), ""]
        agents = {sid: s["agent"] for sid, s in summaries.items() if s.get("agent")}
        if agents:
            conf = next(iter(agents.values()))["confidence"]
            out += [f"## Agent metrics (held-out episodes, {conf:.0%} CI)", "", *_agent_table(agents), ""]
        if a != b and a in agents and b in agents:
            out += [
                f"## Agent metrics before and after: {a} -> {b}",
                "",
                *_agent_change(a, b, agents[a], agents[b]),
                "",
            ]
    training = _training_table(records)
    if training:
        out += ["## Training", "", *training, ""]
    off_policy = _off_policy_lines(records)
    if off_policy:
        out += ["## Off-policy rollouts", "", *off_policy, ""]
    experts = _expert_lines(records)
    if experts:
        out += ["## Expert load", "", *experts, ""]
    if plots:
        out += ["## Plots", ""]
        for name, path in plots.items():
            out += [f"![{name}](plots/{path.name})", "", f"*{_CAPTIONS.get(name, name)}*", ""]
    reviews = [(sid, r["review"]) for sid, r in evals.items() if r.get("review")]
    if reviews:
        out += ["## Human review", ""]
        for sid, page in reviews:
            rel = _relative(Path(page), run_dir)
            out.append(
                f"- {sid}: [{rel}]({rel}) ({evals[sid].get('review_samples', '?')} samples); import verdicts "
                f"with `codemoe eval review-import {Path(page).parent} verdicts.json`"
            )
        out.append("")
    path = run_dir / REPORT_FILE
    path.write_text("\n".join(out))
    return path
