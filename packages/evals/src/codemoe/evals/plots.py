"""Plots of a run with matplotlib (Agg backend, files only): training loss, reward with its spread,
pass@1 with confidence intervals, expert load, KL and entropy, and off-policy rollouts (policy lag,
importance weights, engine/trainer gaps).

Each ``<name>_figure`` builds one matplotlib figure (None when the run logged nothing for it) and
``plot_<name>`` writes it as a PNG and returns its path. Every axis is labelled. Two choices make the plots readable rather than merely drawn:

- pass@1 is drawn on an axis fitted to the values and their intervals (:func:`fitted_limits`), not
  0-1: differences of a few points between 0.4 and 0.6 are what a run is about; the title says the
  range shown.
- expert load is one heatmap per layer on one colour scale for every layer, diverging at the
  uniform share 1/E (white: balanced, red: more than its share, blue: less), with 1/E marked on the
  shared colour bar, so layers can be compared and an imbalance read off against balance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codemoe.evals.curves import expert_load, labels, off_policy_stages, series

__all__ = [
    "expert_load_figure",
    "fitted_limits",
    "kl_entropy_figure",
    "loss_figure",
    "off_policy_figure",
    "pass_at_1_figure",
    "plot_expert_load",
    "plot_kl_entropy",
    "plot_loss",
    "plot_off_policy",
    "plot_pass_at_1",
    "plot_reward",
    "reward_figure",
    "write_plots",
]

_UNIFORM_LABEL = "uniform 1/E"
_PHASE_COLOURS = ("tab:orange", "tab:green", "tab:purple", "tab:cyan", "tab:olive")  # SFT phase shading
_STYLES = ("-", "--", ":", "-.")  # component lines that coincide stay visible


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path | None:
    """Write ``fig`` (None: nothing to plot) as a PNG and free it."""
    if fig is None:
        return None
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def fitted_limits(values: Sequence[float], *, lower: float = 0.0, upper: float = 1.0) -> tuple[float, float]:
    """Y limits around ``values`` with a margin of 15% of their span (at least 0.02 each side),
    kept inside [lower, upper] (a rate never leaves [0, 1])."""
    lo, hi = min(values), max(values)
    margin = max(0.15 * (hi - lo), 0.02)
    return max(lower, lo - margin), min(upper, hi + margin)


# ---------------------------------------------------------------------------------------------
# training curves
# ---------------------------------------------------------------------------------------------


def loss_figure(records: Sequence[dict[str, Any]]) -> Any:
    """Training loss per stage, one panel each (SFT's cross-entropy and RL's policy loss differ in
    kind and scale); SFT's warm-up phases are shaded and named."""
    curves = series(records, "loss")
    if not curves:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(len(curves), 1, figsize=(7, 1.0 + 2.6 * len(curves)), squeeze=False)
    for ax, (stage, (steps, values)) in zip(axes[:, 0], curves.items(), strict=True):
        sft = bool(series(records, "token_acc", stage))  # SFT reports token accuracy next to its loss
        ax.plot(steps, values, color="black", linewidth=1.2, marker="." if len(steps) < 40 else None)
        shades: dict[str, str] = {}  # phase -> colour; a phase that comes back keeps its colour
        for start, end, phase in _spans(labels(records, "phase", stage)):
            first = phase not in shades
            colour = shades.setdefault(phase, _PHASE_COLOURS[len(shades) % len(_PHASE_COLOURS)])
            label = f"phase: {phase}" if first else None
            ax.axvspan(start - 0.5, end + 0.5, color=colour, alpha=0.3, zorder=0, linewidth=0, label=label)
        if shades:
            ax.legend(fontsize=8, loc="upper right")
        rl = bool(series(records, "reward", stage))
        ylabel = "cross-entropy (nats/token)" if sft else "policy loss" if rl else "loss"
        ax.set(title=f"{stage}: training loss", xlabel="optimizer step", ylabel=ylabel)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _spans(points: Sequence[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """Runs of equal labels as (first step, last step, label)."""
    spans: list[tuple[int, int, str]] = []
    for step, label in points:
        if spans and spans[-1][2] == label:
            spans[-1] = (spans[-1][0], step, label)
        else:
            spans.append((step, step, label))
    return spans


def reward_figure(records: Sequence[dict[str, Any]]) -> Any:
    """Mean reward per step with a band of one standard deviation over the step's samples (one line
    per stage), and beside it each reward component's mean when the trainer logged them."""
    means, spread = series(records, "reward"), series(records, "reward_std")
    if not means:
        return None
    components = {
        name: curve
        # reward/<component> and the recipe's flags such as reward/hacked; not each detector's reward/<part>/<detector>
        for name in sorted({k for r in records for k in r if k.startswith("reward/") and k.count("/") == 1})
        for curve in series(records, name).values()
    }
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2 if components else 1, figsize=(11 if components else 6.5, 3.6), squeeze=False)
    ax = axes[0][0]
    for stage, (steps, values) in means.items():
        (line,) = ax.plot(steps, values, label=f"{stage}: mean", marker="." if len(steps) < 40 else None)
        if stage in spread and spread[stage][0] == steps:
            low = [m - s for m, s in zip(values, spread[stage][1], strict=True)]
            high = [m + s for m, s in zip(values, spread[stage][1], strict=True)]
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, label=f"{stage}: ± 1 std")
    ax.set(title="Reward per step (recipe total)", xlabel="step", ylabel="reward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if components:
        ax = axes[0][1]
        for i, (name, (steps, values)) in enumerate(components.items()):
            ax.plot(steps, values, linestyle=_STYLES[i % len(_STYLES)], linewidth=1.6, label=name.removeprefix("reward/"))
        ax.set(title="Reward components (mean per step)", xlabel="step", ylabel="component value")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def pass_at_1_figure(
    records: Sequence[dict[str, Any]], evals: Mapping[str, tuple[int, float, float, float]] = {}
) -> Any:
    """Training pass rate over steps, plus held-out pass@1 of each evaluation (with its CI) at the
    step it evaluated, on a y axis fitted to the values and intervals. ``evals`` maps a label to
    (step, value, low, high)."""
    curves = series(records, "pass_rate")
    if not curves and not evals:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    shown: list[float] = []
    for label, (steps, values) in curves.items():
        ax.plot(steps, values, label=f"{label}: pass rate (visible tests)", alpha=0.8)
        shown += values
    for label, (step, value, low, high) in evals.items():
        ax.errorbar(
            [step],
            [value],
            yerr=[[value - low], [high - value]],
            fmt="o",
            capsize=4,
            clip_on=False,  # a point at 0 or 1 stays whole on the axis edge
            label=f"{label}: pass@1 (hidden)",
        )
        shown += [low, high]
    low, high = fitted_limits(shown)
    ax.set_ylim(low, high)
    fitted = "" if (low, high) == (0.0, 1.0) else ", not 0 to 1"
    ax.set(title=f"pass@1 with CIs (y axis {low:.2f} to {high:.2f}{fitted})", xlabel="step", ylabel="pass@1")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# routing
# ---------------------------------------------------------------------------------------------


def expert_load_figure(records: Sequence[dict[str, Any]]) -> Any:
    """Heatmap per layer: expert (rows) by step (columns), colour = share of the layer's routed
    tokens, on one colour scale for every layer, centred at and marked with the uniform share 1/E."""
    from matplotlib.colors import TwoSlopeNorm

    steps, grids = expert_load(records)
    if not steps:
        return None
    stage = _load_stage(records, steps, grids)
    plt = _pyplot()
    layers = max(len(g) for g in grids)
    experts = max(len(row) for g in grids for row in g)
    uniform = 1.0 / experts
    # matrices[layer]: [experts, steps]
    matrices = [
        [[g[layer][e] if layer < len(g) and e < len(g[layer]) else 0.0 for g in grids] for e in range(experts)]
        for layer in range(layers)
    ]
    cells = [v for m in matrices for row in m for v in row]
    # TwoSlopeNorm needs vmin < vcenter < vmax: a perfectly balanced run still gets a (tiny) scale
    norm = TwoSlopeNorm(vcenter=uniform, vmin=min(min(cells), 0.999 * uniform), vmax=max(max(cells), 1.001 * uniform))
    fig, axes = plt.subplots(
        layers, 1, figsize=(8, 1.4 + 1.5 * layers), squeeze=False, sharex=True, constrained_layout=True
    )
    for layer, matrix in enumerate(matrices):
        ax = axes[layer][0]
        image = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap="RdBu_r", norm=norm)
        ax.set(ylabel=f"layer {layer}\nexpert")
        ax.set_yticks(range(experts) if experts <= 16 else [0, experts - 1])
        ticks = sorted({0, len(steps) // 2, len(steps) - 1})
        ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    axes[-1][0].set_xlabel("step")
    bar = fig.colorbar(image, ax=axes[:, 0].tolist(), fraction=0.04, pad=0.02)
    bar.set_label("share of the layer's routed tokens")
    bar.ax.axhline(uniform, color="black", linewidth=1.5)
    bar.set_ticks(sorted({norm.vmin, uniform, norm.vmax}))
    bar.set_ticklabels([f"{v:.3f}" if v != uniform else f"{_UNIFORM_LABEL} = {v:.3f}" for v in bar.get_ticks()])
    fig.suptitle(
        f"Expert load per layer{f' ({stage})' if stage else ''}: {experts} experts, one colour scale for every "
        "layer\nwhite = the uniform share 1/E, red = more tokens than that, blue = fewer"
    )
    return fig


def _load_stage(records: Sequence[dict[str, Any]], steps: list[int], grids: list[Any]) -> str | None:
    """The stage whose expert load :func:`expert_load` picked (None: several, one point each)."""
    for stage in dict.fromkeys(r["stage"] for r in records if "stage" in r):
        if expert_load(records, stage) == (steps, grids):
            return stage
    return None


def kl_entropy_figure(records: Sequence[dict[str, Any]]) -> Any:
    """KL to the reference policy and policy entropy over steps, side by side."""
    kl, entropy = series(records, "kl"), series(records, "entropy")
    if not kl and not entropy:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    panels = (
        (axes[0], kl, "KL to the reference", "KL (per token)"),
        (axes[1], entropy, "Policy entropy", "entropy (nats/token)"),
    )
    for ax, curves, title, ylabel in panels:
        for label, (steps, values) in curves.items():
            ax.plot(steps, values, label=label)
        ax.set(title=title, xlabel="step", ylabel=ylabel)
        ax.grid(alpha=0.3)
        if curves:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def off_policy_figure(records: Sequence[dict[str, Any]]) -> Any:
    """Four panels over steps for RL stages with off-policy rollouts (a policy lag, or an engine
    whose log-probs differ from the trainer's): policy lag and drops, IS weights, the log-prob gap,
    routing agreement. None for on-policy runs on the policy itself."""
    stages = off_policy_stages(records)
    if not stages:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.2))
    panels = (
        (axes[0], ("staleness_mean", "stale_dropped"), "Policy lag", "versions / batches dropped"),
        (axes[1], ("is_weight_mean", "is_weight_min", "is_weight_max"), "Importance weights", "weight"),
        (axes[2], ("logp_mismatch_mean", "logp_mismatch_max"), "Engine vs trainer log-probs", "|gap| (nats/token)"),
        (axes[3], ("routing_agreement",), "Routing agreement", "share of decisions"),
    )
    for ax, quantities, title, ylabel in panels:
        for sid in stages:
            for style, quantity in zip(_STYLES, quantities):
                curve = series(records, quantity, sid).get(sid)
                if curve:
                    ax.plot(*curve, style, label=f"{sid} {quantity}" if len(stages) > 1 else quantity)
        ax.set(title=title, xlabel="step", ylabel=ylabel)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_off_policy(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """:func:`off_policy_figure` as a PNG."""
    return _save(off_policy_figure(records), path)


def plot_loss(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """:func:`loss_figure` as a PNG."""
    return _save(loss_figure(records), path)


def plot_reward(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """:func:`reward_figure` as a PNG."""
    return _save(reward_figure(records), path)


def plot_pass_at_1(
    records: Sequence[dict[str, Any]], path: Path, evals: Mapping[str, tuple[int, float, float, float]] = {}
) -> Path | None:
    """:func:`pass_at_1_figure` as a PNG."""
    return _save(pass_at_1_figure(records, evals), path)


def plot_expert_load(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """:func:`expert_load_figure` as a PNG."""
    return _save(expert_load_figure(records), path)


def plot_kl_entropy(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """:func:`kl_entropy_figure` as a PNG."""
    return _save(kl_entropy_figure(records), path)


def write_plots(
    records: Sequence[dict[str, Any]], folder: Path, evals: Mapping[str, tuple[int, float, float, float]] = {}
) -> dict[str, Path]:
    """Write every plot the records allow into ``folder``; returns name -> path of those written."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {
        "loss": plot_loss(records, folder / "loss.png"),
        "reward": plot_reward(records, folder / "reward.png"),
        "pass_at_1": plot_pass_at_1(records, folder / "pass_at_1.png", evals),
        "expert_load": plot_expert_load(records, folder / "expert_load.png"),
        "kl_entropy": plot_kl_entropy(records, folder / "kl_entropy.png"),
        "off_policy": plot_off_policy(records, folder / "off_policy.png"),
    }
    return {name: path for name, path in made.items() if path is not None}

