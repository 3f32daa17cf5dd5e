"""Plots of a run with matplotlib (Agg backend, files only): reward, pass@1, expert load, KL/entropy.

Each function writes one PNG and returns its path, or None when the run logged nothing to plot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codemoe.evals.curves import Series, expert_load, series

__all__ = ["plot_expert_load", "plot_kl_entropy", "plot_pass_at_1", "plot_reward", "write_plots"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _lines(path: Path, curves: Mapping[str, Series], title: str, ylabel: str) -> Path | None:
    if not curves:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, (steps, values) in curves.items():
        ax.plot(steps, values, label=label, marker="." if len(steps) < 40 else None)
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_reward(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Mean reward per training step, one line per stage that logs it."""
    return _lines(path, series(records, "reward"), "Reward", "mean reward")


def plot_pass_at_1(
    records: Sequence[dict[str, Any]], path: Path, evals: Mapping[str, tuple[int, float, float, float]] = {}
) -> Path | None:
    """Training pass rate over steps, plus held-out pass@1 of each evaluation (with its CI) at the
    step it evaluated. ``evals`` maps a label to (step, value, low, high)."""
    curves = series(records, "pass_rate")
    if not curves and not evals:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, (steps, values) in curves.items():
        ax.plot(steps, values, label=f"{label} (visible tests)")
    for label, (step, value, low, high) in evals.items():
        ax.errorbar(
            [step], [value], yerr=[[value - low], [high - value]], fmt="o", capsize=4, label=f"{label} (hidden)"
        )
    ax.set(title="pass@1", xlabel="step", ylabel="pass@1", ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_expert_load(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Heatmap per layer: expert (rows) by step (columns), colour = share of tokens routed there."""
    steps, grids = expert_load(records)
    if not steps:
        return None
    plt = _pyplot()
    layers = max(len(g) for g in grids)
    experts = max(len(row) for g in grids for row in g)
    fig, axes = plt.subplots(layers, 1, figsize=(7, 1.2 + 1.6 * layers), squeeze=False)
    for layer in range(layers):
        # matrix: [experts, steps]
        matrix = [[g[layer][e] if layer < len(g) and e < len(g[layer]) else 0.0 for g in grids] for e in range(experts)]
        ax = axes[layer][0]
        image = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0)
        ax.set(ylabel=f"layer {layer}\nexpert")
        tick_idx = sorted({0, len(steps) // 2, len(steps) - 1})
        ax.set_xticks(tick_idx, [str(steps[i]) for i in tick_idx])
        fig.colorbar(image, ax=ax, fraction=0.03)
    axes[-1][0].set_xlabel("step")
    fig.suptitle("Expert load (share of routed tokens)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_kl_entropy(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """KL to the reference policy and policy entropy over steps, side by side."""
    kl, entropy = series(records, "kl"), series(records, "entropy")
    if not kl and not entropy:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, curves, name in ((axes[0], kl, "KL"), (axes[1], entropy, "entropy")):
        for label, (steps, values) in curves.items():
            ax.plot(steps, values, label=label)
        ax.set(title=name, xlabel="step")
        ax.grid(alpha=0.3)
        if curves:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_plots(
    records: Sequence[dict[str, Any]], folder: Path, evals: Mapping[str, tuple[int, float, float, float]] = {}
) -> dict[str, Path]:
    """Write every plot the records allow into ``folder``; returns name -> path of those written."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {
        "reward": plot_reward(records, folder / "reward.png"),
        "pass_at_1": plot_pass_at_1(records, folder / "pass_at_1.png", evals),
        "expert_load": plot_expert_load(records, folder / "expert_load.png"),
        "kl_entropy": plot_kl_entropy(records, folder / "kl_entropy.png"),
    }
    return {name: path for name, path in made.items() if path is not None}
