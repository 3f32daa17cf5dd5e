"""The report's plots say what they show: labelled axes, SFT phases, the reward's spread, pass@1 on an
axis fitted to its values, expert load on one colour scale with the uniform share marked. Checked on
the matplotlib objects, not on pixels."""

from __future__ import annotations

from pathlib import Path

import pytest
from codemoe.evals.plots import (
    expert_load_figure,
    fitted_limits,
    kl_entropy_figure,
    loss_figure,
    pass_at_1_figure,
    reward_figure,
    write_plots,
)
from matplotlib.collections import PolyCollection
from matplotlib.image import AxesImage

E = 4  # experts per layer in the records below


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _records() -> list[dict]:
    """An SFT stage (two phases) and an RL stage, logged as the trainers log them."""
    out = []
    for step in range(1, 7):
        load = {f"expert_load/{layer}/{e}": (0.55 if e == 0 and layer == 1 else 0.15) for layer in range(2) for e in range(E)}
        out.append({"stage": "sft", "step": step, "loss": 3.0 / step, "token_acc": 0.1 * step,
                    "phase": "router" if step <= 2 else "all", **load})
    for step in range(1, 5):
        load = {f"expert_load/{layer}/{e}": (0.4 if e == step % E else 0.2) for layer in range(2) for e in range(E)}
        out.append({"stage": "rl", "step": step, "loss": 0.01 * step, "reward_mean": 0.1 * step, "reward_std": 0.05,
                    "reward/test_pass_rate": 0.1 * step, "reward/compile_success": 0.5, "pass_rate": 0.4 + 0.05 * step,
                    "reward/hack_penalty/exit_early": 0.0,  # a detector's part: in the logs, not on the plot
                    "kl": 0.01 * step, "entropy": 1.0 - 0.1 * step, **load})
    out.append({"stage": "rl", "step": None, "stage_seconds": 12.0})
    return out


def test_loss_has_a_panel_per_stage_with_the_sft_phases_shaded_and_named():
    fig = loss_figure(_records())
    sft, rl = fig.axes
    assert sft.get_title() == "sft: training loss" and rl.get_title() == "rl: training loss"
    assert sft.get_ylabel() == "cross-entropy (nats/token)" and rl.get_ylabel() == "policy loss"
    assert [t.get_text() for t in sft.get_legend().get_texts()] == ["phase: router", "phase: all"]
    assert list(sft.lines[0].get_xdata()) == [1, 2, 3, 4, 5, 6]
    assert all(ax.get_xlabel() == "optimizer step" for ax in fig.axes)


def test_reward_has_its_one_std_band_and_every_component():
    fig = reward_figure(_records())
    total, parts = fig.axes
    (band,) = [c for c in total.collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    # the band runs from mean - std to mean + std: 0.1 - 0.05 at step 1 to 0.4 + 0.05 at step 4
    assert ys.min() == pytest.approx(0.05) and ys.max() == pytest.approx(0.45)
    assert [t.get_text() for t in parts.get_legend().get_texts()] == ["compile_success", "test_pass_rate"]
    assert total.get_ylabel() == "reward" and parts.get_ylabel() == "component value"
    assert all(ax.get_xlabel() == "step" for ax in fig.axes)


def test_pass_at_1_axis_is_fitted_to_the_values_and_intervals_and_says_its_range():
    # training pass rate 0.45-0.60, two evaluations with CIs inside 0.38-0.62
    fig = pass_at_1_figure(_records(), {"eval_sft": (0, 0.42, 0.38, 0.47), "eval_rl": (4, 0.55, 0.50, 0.62)})
    (ax,) = fig.axes
    low, high = ax.get_ylim()
    # span 0.38-0.62 (0.24) plus 15% of it each side: 0.344 to 0.656
    assert (low, high) == pytest.approx((0.38 - 0.036, 0.62 + 0.036))
    assert "0.34 to 0.66" in ax.get_title() and "not 0 to 1" in ax.get_title()
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "pass@1"
    (wide,) = pass_at_1_figure([], {"eval": (0, 0.5, 0.01, 0.99)}).axes  # an interval over nearly all of 0-1
    assert wide.get_ylim() == (0.0, 1.0) and wide.get_title() == "pass@1 with CIs (y axis 0.00 to 1.00)"


def test_fitted_limits_keep_a_margin_and_stay_inside_0_1():
    assert fitted_limits([0.4, 0.6]) == pytest.approx((0.37, 0.63))
    assert fitted_limits([0.5, 0.5]) == pytest.approx((0.48, 0.52))  # no span: the 0.02 floor
    assert fitted_limits([0.0, 0.99]) == pytest.approx((0.0, 1.0))


def test_expert_load_shares_one_colour_scale_centred_and_marked_at_the_uniform_share():
    fig = expert_load_figure(_records())
    layers = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    images = [next(a for a in ax.get_children() if isinstance(a, AxesImage)) for ax in layers]
    assert len(images) == 2  # the SFT stage (6 steps) is the busiest trainer
    norms = {(im.norm.vmin, im.norm.vcenter, im.norm.vmax) for im in images}
    assert norms == {(0.15, 1 / E, 0.55)}  # one scale: the smallest and largest share of any layer
    assert images[0].norm is images[1].norm
    uniform = [(tick, label.get_text()) for tick, label in zip(bar.get_yticks(), bar.get_yticklabels(), strict=True)
               if "uniform 1/E" in label.get_text()]
    assert uniform == [(pytest.approx(1 / E), "uniform 1/E = 0.250")]
    assert any(line.get_ydata()[0] == pytest.approx(1 / E) for line in bar.lines)  # the mark across the bar
    assert [ax.get_ylabel() for ax in layers] == ["layer 0\nexpert", "layer 1\nexpert"]
    assert layers[-1].get_xlabel() == "step" and "(sft)" in fig.get_suptitle()
    assert bar.get_ylabel() == "share of the layer's routed tokens"


def test_kl_and_entropy_panels_are_labelled():
    kl, entropy = kl_entropy_figure(_records()).axes
    assert (kl.get_ylabel(), entropy.get_ylabel()) == ("KL (per token)", "entropy (nats/token)")
    assert kl.get_xlabel() == entropy.get_xlabel() == "step"


def test_write_plots_writes_each_png_and_skips_what_was_not_logged(tmp_path: Path):
    made = write_plots(_records(), tmp_path)
    assert sorted(made) == ["expert_load", "kl_entropy", "loss", "pass_at_1", "reward"]
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in made.values())
    assert write_plots([{"stage": "env", "step": None, "torch_threads": 1}], tmp_path / "none") == {}


def test_off_policy_panels_are_labelled_and_drawn_only_for_off_policy_runs(tmp_path: Path, off_policy_records):
    from codemoe.evals.plots import off_policy_figure

    lag, weights, gap, routing = off_policy_figure(off_policy_records(lag=True)).axes
    assert [ax.get_title() for ax in (lag, weights, gap, routing)] == [
        "Policy lag", "Importance weights", "Engine vs trainer log-probs", "Routing agreement"]
    assert [line.get_label() for line in weights.lines] == ["is_weight_mean", "is_weight_min", "is_weight_max"]
    assert list(gap.lines[1].get_ydata()) == [0.5, 1.0, 1.5, 2.0]
    assert off_policy_figure(off_policy_records(lag=False)) is None
    assert "off_policy" not in write_plots(off_policy_records(lag=False), tmp_path)


def test_a_synchronous_stage_on_another_engine_is_off_policy_and_float_error_is_not(off_policy_records):
    """No lag logged, but an engine whose log-probs differ by tenths of a nat (a server's kernels)
    or that disagrees on more than 1 routing decision in 1,000: off-policy. Float error is not."""
    from codemoe.evals.curves import off_policy_stages

    on_policy = off_policy_records(lag=False)
    assert off_policy_stages(on_policy) == []
    gap = [{**r, "logp_mismatch_max": 0.3} if r["step"] == 3 else r for r in on_policy]
    routing = [{**r, "routing_agreement": 0.99} if r["step"] == 3 else r for r in on_policy]
    assert off_policy_stages(gap) == off_policy_stages(routing) == ["rl"]
    # an engine with a float error of its own (bf16: tenths of a nat) is judged against its bounds
    assert off_policy_stages(gap, gap_nats=0.5) == off_policy_stages(routing, agreement_min=0.98) == []
