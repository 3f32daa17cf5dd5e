"""`codemoe eval run` on a checkpoint a short real SFT stage wrote: agent episodes on a fresh held-out
draw of generated repositories, completions on a function-level suite, the agent metrics in the eval
stage's summary, comparison and report, and the errors a user meets first."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from codemoe.core import compose, run_pipeline
from codemoe.core.cli import main

REGISTRY = Path(__file__).resolve().parents[1] / "registry"

# oracle episodes on 4 generated train repositories -> 2 SFT steps -> the same checkpoint scored twice
# on the held-out split as agents, the second against the first (a comparison needs a baseline stage)
PIPELINE = """
run: {name: sft-for-eval, dir: %(runs)s}
stages:
  environment: {torch_threads: 1}
  trajectories:
    suite: {name: synthetic-repos, train_tasks: 4, heldout_tasks: 2}
    split: train
    agent: {name: oracle, imitate_fraction: 1.0}
  sft:
    model: tiny_agent
    vocab_size: 1024
    trajectories_from: trajectories
    max_tokens: 256
    batch_size: 4
    phases: [{phase: all, steps: 2, lr: 3.0e-3}]
  eval_a: &agent_eval
    name: eval
    checkpoint_from: sft
    suite: {name: synthetic-repos, train_tasks: 4, heldout_tasks: 2}
    environment: repo
    samples: 1
    max_turns: 2
    max_new_tokens: 16
    stop: []
  eval_b:
    <<: *agent_eval
    baseline: eval_a
  report: {name: report, print_report: false}
"""
AGENT_METRICS = {"resolve_rate", "format_errors", "format_error_episodes", "turns_to_resolve",
                 "self_correction_rate", "anti_spin_rate"}


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory: pytest.TempPathFactory):
    """The run above, with its generated task folders in a cache of its own."""
    root = tmp_path_factory.mktemp("eval-run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CODEMOE_CACHE_DIR", str(root / "cache"))
        mp.setenv("CODEMOE_REGISTRY", str(REGISTRY))
        from codemoe.core import Hooks, build_plugin_manager, build_registry

        pm = build_plugin_manager()
        pipeline = root / "p.yaml"
        pipeline.write_text(PIPELINE % {"runs": root / "runs"})
        ctx = run_pipeline(compose(pipeline, registry_dir=REGISTRY), build_registry(pm), Hooks(pm), show_progress=False)
        yield root, ctx


@pytest.fixture
def cache(sft_run, monkeypatch: pytest.MonkeyPatch) -> Path:
    root, _ = sft_run
    monkeypatch.setenv("CODEMOE_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("CODEMOE_REGISTRY", str(REGISTRY))
    monkeypatch.chdir(root)
    return root / "cache"


def _samples(stage_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (stage_dir / "samples.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_eval_stage_reports_agent_metrics_their_change_and_the_report(sft_run) -> None:
    _, ctx = sft_run
    result = ctx.results["eval_b"]
    summary = json.loads(Path(result["summary"]).read_text())
    agent = summary["agent"]
    assert set(agent["metrics"]) == AGENT_METRICS and agent["episodes"] == 2 and agent["tasks"] == 2
    # the facts of every episode are in samples.jsonl, and the summary counts exactly them
    facts = [s["episode"] for s in _samples(ctx.run_dir / "eval_b")]
    assert len(facts) == 2 and all(f["turns"] <= 2 for f in facts)
    assert agent["metrics"]["format_errors"]["value"] == sum(f["format_errors"] for f in facts) / 2
    assert agent["stop_reasons"] == {r: sum(f["stop_reason"] == r for f in facts) for r in agent["stop_reasons"]}
    # the resolve rate is pass@1 of the episodes, with the same interval
    pass1, rate = summary["overall"]["pass@1"], agent["metrics"]["resolve_rate"]
    assert [rate[k] for k in ("value", "low", "high")] == pytest.approx([pass1[k] for k in ("value", "low", "high")])
    assert result["agent"]["format_errors"] == round(agent["metrics"]["format_errors"]["value"], 4)
    # before/after of each metric against the baseline stage, paired over the same held-out tasks
    change = result["comparison"]["agent"]
    assert change["paired"] and change["tasks"] == 2 and set(change["metrics"]) == AGENT_METRICS
    before = json.loads(Path(ctx.results["eval_a"]["summary"]).read_text())["agent"]["metrics"]["format_errors"]
    assert change["metrics"]["format_errors"]["before"]["value"] == before["value"]
    report = (ctx.run_dir / "report.md").read_text()
    assert "## Agent metrics (held-out episodes, 95% CI)" in report
    assert "## Agent metrics before and after: eval_a -> eval_b" in report
    assert "| format errors per episode |" in report and "| stop reasons (episodes) |" in report
    curves = [json.loads(line) for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("stage") == "eval_b" and "format_errors" in r and "format_errors_low" in r for r in curves)


@pytest.mark.slow
def test_eval_compare_of_two_agent_evaluations_gives_every_metric_before_and_after(sft_run, capsys) -> None:
    _, ctx = sft_run
    assert main(["eval", "compare", str(ctx.run_dir / "eval_a"), str(ctx.run_dir / "eval_b"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["agent"]["paired"] and set(out["agent"]["metrics"]) == AGENT_METRICS
    assert out["agent"]["metrics"] == ctx.results["eval_b"]["comparison"]["agent"]["metrics"]  # as the stage saw it
    assert main(["eval", "compare", str(ctx.run_dir)]) == 0
    text = capsys.readouterr().out
    assert "agent metrics, 2 tasks (paired bootstrap, 95% CI):" in text and "  format errors per episode: " in text


@pytest.mark.slow
def test_eval_run_scores_a_checkpoint_as_an_agent_on_a_fresh_heldout_draw(sft_run, cache: Path, capsys) -> None:
    root, ctx = sft_run
    checkpoint = ctx.results["sft"]["checkpoint"]
    out = root / "seed1.json"
    args = ["eval", "run", checkpoint, "--suite", "synthetic-repos", "seed=1", "heldout_tasks=2", "train_tasks=4",
            "--samples", "1", "--max-turns", "2", "--max-new-tokens", "16", "--no-progress", "--json", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "format errors per episode:" in printed and "self-correction rate:" in printed
    document = json.loads(out.read_text())
    assert document["mode"] == "agent" and document["split"] == "heldout" and document["suite"]["seed"] == 1
    assert document["tasks"] == 2 and document["agent"]["episodes"] == 2
    assert set(document["agent"]["metrics"]) == AGENT_METRICS
    for est in document["agent"]["metrics"].values():
        assert est["value"] is None or est["low"] <= est["value"] <= est["high"]
    # another seed: other held-out repositories than the pipeline's draw
    seed0 = set(json.loads(Path(ctx.results["eval_a"]["summary"]).read_text())["per_task"])
    assert set(document["per_task"]) and not set(document["per_task"]) & seed0
    assert {p.name for p in cache.glob("synthetic-repos/*-seed1-budget20/heldout/*")} == set(document["per_task"])
    # through the eval stage: a run directory holding the one-stage pipeline, its state and report
    run_dir = Path(document["run_dir"])
    state = json.loads((run_dir / "state.json").read_text())["finished"]
    assert list(state) == ["eval", "report"] and state["eval"]["kind"] == "eval"
    assert state["eval"]["checkpoint"] == str(Path(checkpoint).resolve())
    assert "## Agent metrics" in (run_dir / "report.md").read_text()


@pytest.mark.slow
def test_eval_run_warns_when_the_prefix_cache_drops_histories(sft_run, caplog) -> None:
    """Two episodes whose histories (over 1,000 tokens each with the full tool documentation) do not
    fit 2,500 tokens together: a kept history pushes out the other episode's, whose next turn
    prefills it again; the stage says so and what to raise."""
    _, ctx = sft_run
    args = ["eval", "run", ctx.results["sft"]["checkpoint"], "--suite", "synthetic-repos", "heldout_tasks=2",
            "train_tasks=4", "--samples", "1", "--max-turns", "2", "--max-new-tokens", "16", "--no-progress",
            "--set", "engine={name: embedded, prefix_cache_tokens: 2500}"]
    with caplog.at_level(logging.WARNING, logger="codemoe.evals"):
        assert main(args) == 0
    assert "prefix cache dropped" in caplog.text and "engine.prefix_cache_tokens" in caplog.text


@pytest.mark.slow
def test_eval_run_like_a_runs_eval_stage_takes_its_settings(sft_run, cache: Path) -> None:
    root, ctx = sft_run
    out = root / "like.json"
    args = ["eval", "run", ctx.results["sft"]["checkpoint"], "--suite", "synthetic-repos", "seed=2", "heldout_tasks=1",
            "--like", f"{ctx.run_dir}:eval_b", "--samples", "2", "--no-progress", "--json", str(out)]
    assert main(args) == 0
    run_dir = Path(json.loads(out.read_text())["run_dir"])
    from omegaconf import OmegaConf

    stage = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml").stages["eval"])
    # eval_b's environment and sampling, this command's suite and samples; not its baseline nor checkpoint source
    assert stage["environment"] == "repo" and (stage["max_turns"], stage["max_new_tokens"], stage["stop"]) == (2, 16, [])
    assert stage["samples"] == 2 and stage["suite"]["seed"] == 2
    assert "baseline" not in stage and "checkpoint_from" not in stage
    assert json.loads(out.read_text())["agent"]["episodes"] == 2
    from codemoe.core.errors import ConfigError
    from codemoe.evals.cli import like_stage

    with pytest.raises(ConfigError, match="has no eval stage 'sft'; its eval stages: eval_a, eval_b"):
        like_stage(f"{ctx.run_dir}:sft")
    assert like_stage(str(ctx.run_dir)) == like_stage(f"{ctx.run_dir}:eval_b")  # the last eval stage


@pytest.mark.slow
def test_eval_run_scores_completions_on_a_function_level_suite(sft_run, cache: Path) -> None:
    root, ctx = sft_run
    out = root / "synthetic.json"
    args = ["eval", "run", ctx.results["sft"]["checkpoint"], "--suite", "synthetic", "heldout_tasks=3",
            "--samples", "2", "--max-new-tokens", "8", "--no-progress", "--json", str(out)]
    assert main(args) == 0
    document = json.loads(out.read_text())
    assert document["mode"] == "completions" and document["tasks"] == 3 and document["samples_per_task"] == 2
    assert "agent" not in document
    samples = _samples(Path(document["run_dir"]) / "eval")
    assert len(samples) == 6 and all(s["episode"] is None and "[action]" not in s["completion"] for s in samples)


@pytest.mark.slow
def test_the_facts_of_a_real_episode_the_oracle_plays_with_a_decoy_fix(registry, tmp_path: Path, monkeypatch) -> None:
    from codemoe.core.contracts import play, repository_task
    from codemoe.evals.agent_metrics import episode_facts

    monkeypatch.setenv("CODEMOE_CACHE_DIR", str(tmp_path / "cache"))
    suite = {"name": "synthetic-repos", "train_tasks": 0, "heldout_tasks": 1, "families": ["multi-round-error-correction"]}
    (task,) = registry.build("suite", suite).tasks("heldout")
    executor = registry.build("executor", {"name": "local"})
    try:
        environment = registry.build("environment", {"name": "repo"}, executor=executor)
        oracle = registry.build("scripted_agent", "oracle", task=repository_task(task))
        episode = play(environment, repository_task(task), oracle)
    finally:
        executor.close()
    # run the tests (failing), read, play the decoy, run (failing), correct it, run (passing), submit
    steps = [(r.tool, r.data.get("status")) for r in episode.log if r.tool in ("run_tests", "edit", "submit")]
    assert steps == [("run_tests", "failed"), ("edit", None), ("run_tests", "failed"), ("edit", None),
                     ("run_tests", "passed"), ("submit", None)]
    assert episode_facts(episode) == {"resolved": True, "turns": len(episode.log), "format_errors": 0,
                                      "stop_reason": "submitted", "self_correction": True}


@pytest.fixture
def fake_checkpoint(tmp_path: Path) -> Path:
    """A folder that passes the checkpoint check; the errors below come before anything loads it."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--suite", "synthetic-repo"], "unknown suite 'synthetic-repo' (did you mean 'synthetic-repos'?)"),
        (["--suite", "synthetic-repos", "seed"], "suite option 'seed' is not of the form key=value"),
        (["--suite", "synthetic-repos", "sed=1"], "suite option 'sed' (in 'sed=1'): suite 'synthetic-repos' has no "
                                                  "such option (did you mean 'seed'?)"),
        (["--suite", "synthetic", "heldout_tasks=many"], "heldout_tasks"),
        (["--suite", "synthetic-repos", "heldout_tasks=[1"], "suite option 'heldout_tasks=[1': the value is not valid YAML"),
        (["--suite", "synthetic", "--like", "nowhere:eval"], "--like nowhere:eval: nowhere is not a run directory"),
        (["--suite", "synthetic", "--set", "tempreature=0.5"], "'stages.eval.tempreature': unknown option (did you mean "
                                                              "'temperature'?)"),
    ],
)
def test_eval_run_refuses_a_bad_suite_or_option(fake_checkpoint: Path, run_root: Path, argv, message, capsys) -> None:
    assert main(["eval", "run", str(fake_checkpoint), *argv]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_eval_run_refuses_what_is_not_a_checkpoint_folder(tmp_path: Path, run_root: Path, capsys) -> None:
    assert main(["eval", "run", str(tmp_path / "nowhere"), "--suite", "synthetic"]) == 2
    assert f"checkpoint folder {tmp_path / 'nowhere'} does not exist" in " ".join(capsys.readouterr().err.split())
    stage = tmp_path / "sft"
    (stage / "checkpoint").mkdir(parents=True)
    (stage / "checkpoint" / "config.json").write_text("{}")
    assert main(["eval", "run", str(stage), "--suite", "synthetic"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is not a model checkpoint folder (no config.json in it); did you mean" in err and "checkpoint" in err
