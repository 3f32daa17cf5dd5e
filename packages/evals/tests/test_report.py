"""report.md, plots, the report stage and ``codemoe eval compare`` on runs with known evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codemoe.core import compose, run_pipeline
from codemoe.evals.compare import compare_runs
from codemoe.evals.curves import expert_load, read_metrics, series

PIPELINE = """
run: {name: known, dir: %s}
stages:
  train: {name: curves, steps: 6}
  eval_sft: {name: known_eval, solved: 10, step: 0}
  eval_rl: {name: known_eval, solved: 18, step: 6}
  report: {name: report, print_report: false}
"""


@pytest.fixture
def run(spine, write_pipeline, tmp_path: Path, registry_dir: Path):
    _, registry, hooks = spine
    cfg = compose(write_pipeline(PIPELINE % (tmp_path / "runs")), registry_dir=registry_dir)
    return run_pipeline(cfg, registry, hooks, show_progress=False)


def test_curves_are_read_from_metrics(run) -> None:
    records = read_metrics(run.run_dir)
    steps, rewards = series(records, "reward")["train"]
    assert steps == [1, 2, 3, 4, 5, 6] and rewards[-1] == pytest.approx(0.6)
    load_steps, grids = expert_load(records)
    assert load_steps == steps
    assert len(grids[0]) == 2 and grids[0][0] == [0.2, 0.4, 0.2, 0.2]


def test_report_has_evaluations_improvement_and_plots(run) -> None:
    report = (run.run_dir / "report.md").read_text()
    assert run.results["report"]["plots"] == ["expert_load.png", "kl_entropy.png", "pass_at_1.png", "reward.png"]
    for png in run.results["report"]["plots"]:
        assert (run.run_dir / "plots" / png).read_bytes()[:4] == b"\x89PNG"
    assert "| eval_sft | known | heldout |" in report
    assert "25.0% [" in report and "45.0% [" in report  # 10/40 and 18/40 tasks solved
    assert "absolute: +20.0 points" in report
    assert "relative: +80.0%" in report  # 0.45 / 0.25 - 1
    assert "| even |" in report and "| odd |" in report
    assert "0.200 -> 0.500" in report  # reward: mean of the first 3 steps -> the last 3
    assert "![expert_load](plots/expert_load.png)" in report
    assert "*Share of each layer's routed tokens per expert over training" in report  # each plot says what it shows


def test_compare_two_stages_of_one_run_and_two_runs(run, capsys) -> None:
    label_a, label_b, imp = compare_runs(run.run_dir)
    assert label_a.endswith("eval_sft") and label_b.endswith("eval_rl")
    assert imp.paired and imp.absolute.value == pytest.approx(0.2) and imp.absolute.excludes_zero()
    from codemoe.core.cli import main

    assert main(["eval", "compare", str(run.run_dir / "eval_sft"), str(run.run_dir / "eval_rl"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["relative"]["value"] == pytest.approx(0.8)
    assert main(["eval", "compare", str(run.run_dir)]) == 0
    assert "(excludes zero)" in capsys.readouterr().out


def test_report_command_rebuilds_the_report(run, capsys) -> None:
    from codemoe.core.cli import main

    (run.run_dir / "report.md").unlink()
    assert main(["eval", "report", str(run.run_dir)]) == 0
    assert "absolute: +20.0 points" in (run.run_dir / "report.md").read_text()


def test_an_asynchronous_stage_reports_its_policy_lag_weights_and_gaps(tmp_path: Path, off_policy_records) -> None:
    """Known answers from four logged steps: lags 0, 1, 1, 1; one batch dropped; IS weights with
    mean 1.0 between 0.1 and 1.9 over the run; 2.5% of tokens truncated on average; the log-prob
    gap and routing agreement of the first 2 steps against the last 2 (half the run, as the
    training table's trends). A synchronous run on the policy itself has no such section."""
    from codemoe.evals.report import build_report

    def records(lag: bool) -> str:
        return "".join(json.dumps(record) + "\n" for record in off_policy_records(lag))

    (tmp_path / "async").mkdir()
    (tmp_path / "async" / "metrics.jsonl").write_text(records(lag=True))
    report = build_report(tmp_path / "async", results={}).read_text()
    assert "## Off-policy rollouts" in report
    assert ("| rl | 0: 25.0%, 1: 75.0% | 1 | 1.000 [0.100, 1.900] | 2.50% / 0.00% | 0.0150 -> 0.0350 "
            "| 0.750 -> 1.750 | 0.985 -> 0.965 |") in report
    assert "![off_policy](plots/off_policy.png)" in report
    (tmp_path / "sync").mkdir()
    (tmp_path / "sync" / "metrics.jsonl").write_text(records(lag=False))
    report = build_report(tmp_path / "sync", results={}).read_text()
    assert "Off-policy" not in report and "off_policy" not in report


def test_compare_seeds_command_over_runs(run, capsys) -> None:
    """Two copies of the same run a side (as two seeds that agree): every run's pass@1, the means
    (25% = 10/40 tasks against 45% = 18/40), and the interval; a path that is no run is an error."""
    from codemoe.core.cli import main

    runs = [str(run.run_dir)] * 2
    assert main(["eval", "compare-seeds", "--baseline", *runs, "--stage-a", "eval_sft", "--candidate", *runs,
                 "--stage-b", "eval_rl"]) == 0
    out = capsys.readouterr().out
    assert "40 tasks, 2 runs against 2 (bootstrap over tasks and runs, 95% CI)" in out
    assert out.count(":eval_sft: 25.0%") == 2 and out.count(":eval_rl: 45.0%") == 2
    assert "absolute: +20.0 points" in out and "(excludes zero)" in out and "a lower bound" in out
    assert main(["eval", "compare-seeds", "--baseline", *runs, "--candidate", str(run.run_dir / "nowhere")]) == 2
    assert "eval compare-seeds:" in capsys.readouterr().err
