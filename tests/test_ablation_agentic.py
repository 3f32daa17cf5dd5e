"""The agentic ablations (``codemoe eval ablation agentic``): every shipped spec composes against its
pipeline, arms that differ only from the rl stage on share one trajectories + SFT run, and an arm
that changes a shared stage is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codemoe.core import hookimpl
from codemoe.core.cli import main
from codemoe.core.errors import ConfigError
from codemoe.evals.ablation import ABLATIONS_DIR, load_ablations, plan_ablations, run_ablations
from omegaconf import OmegaConf

SHIPPED = sorted(p.stem for p in ABLATIONS_DIR.glob("*.yaml"))



def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_spec_composes_against_its_pipeline(name: str, registry, registry_dir: Path):
    _, specs = load_ablations(name)
    plan = plan_ablations(specs, registry, registry_dir=registry_dir)
    for spec in specs:
        for variant_name, variant in spec.variants.items():
            run = plan.runs[plan.arms[(spec.name, variant_name)][0]]
            for item in (*spec.overrides, *variant.overrides):  # each override key is in the run's config
                assert OmegaConf.select(run.config, item.partition("=")[0].lstrip("+")) is not None, item


def test_the_agentic_list_shares_runs_and_stages_across_its_four_ablations(registry, registry_dir: Path):
    name, specs = load_ablations("agentic")
    assert name == "agentic"
    assert [s.name for s in specs] == [
        "agentic-rl-vs-sft", "agentic-stepwise-vs-outcome", "agentic-moe-vs-dense", "agentic-samples"
    ]
    plan = plan_ablations(specs, registry, registry_dir=registry_dir)
    assert len(plan.arms) == 9
    ran = [[s for s in run.config.stages if s not in run.shared] for run in plan.runs]
    assert sum("trajectories" in stages for stages in ran) == 1  # oracle episodes recorded once for all
    assert sum("sft" in stages for stages in ran) == 2  # the pipeline's MoE and the dense model
    assert all(run.source in (None, 0) for run in plan.runs)
    by_arm = {arm: plan.runs[index].config for arm, (index, _) in plan.arms.items()}
    rewards = {v: set(by_arm[("agentic-stepwise-vs-outcome", v)].stages.rl.reward.components)
               for v in ("stepwise", "outcome")}
    shaping = {"newly_passing", "regressions", "compile_errors", "step_cost", "format_errors"}
    assert "all_pass" in rewards["outcome"] and not shaping & rewards["outcome"]  # the episode's result only
    assert shaping <= rewards["stepwise"]
    assert [by_arm[("agentic-samples", f"samples_{n}")].stages.rl.algo.group_size for n in (4, 8, 16)] == [4, 8, 16]


def test_agentic_moe_and_dense_have_equal_active_parameters(registry, registry_dir: Path):
    from codemoe.core.models import count_parameters

    _, (spec,) = load_ablations("agentic-moe-vs-dense")
    plan = plan_ablations([spec], registry, registry_dir=registry_dir)
    counts = {}
    for variant in spec.variants:
        sft = plan.runs[plan.arms[(spec.name, variant)][0]].config.stages.sft
        counts[variant] = count_parameters(OmegaConf.to_container(sft.model), vocab_size=sft.vocab_size)
    assert counts["moe"].total > 2 * counts["dense"].total
    # the dense width is top_k x the expert width, so the feed-forwards match exactly; only the
    # router (hidden_size x num_experts per layer) is active in the MoE alone: well under 1%
    assert counts["moe"].active / counts["dense"].active == pytest.approx(1.0, abs=0.01)
    spec.variants["dense"].overrides.append("stages.sft.model.moe_intermediate_size=512")  # twice the width
    with pytest.raises(ConfigError, match=r"active parameters differ by 1\.\d+x .* more than max_active_ratio=1\.05"):
        plan_ablations([spec], registry, registry_dir=registry_dir)  # refused before anything runs


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("stages.rl.algo.group_sze=4", "group_sze"),  # an option of a component (the algorithm)
        ("stages.rl.sampels=4", "sampels"),  # an option of a stage
        ("stages.rll.steps=1", "rll"),  # a stage that does not exist
    ],
)
def test_a_misspelt_override_stops_the_ablation_before_it_runs(override, named, tmp_path, registry, registry_dir):
    _, specs = load_ablations(_spec(tmp_path, f"""
name: typo
pipeline: agentic-repos
share: [trajectories, sft, eval_sft]
baseline: a
variants:
  a: {{eval_stage: eval_rl}}
  b: {{eval_stage: eval_rl, overrides: ["{override}"]}}
"""))
    with pytest.raises(ConfigError, match=rf"ablation 'typo', variant 'b': .*{named}"):
        plan_ablations(specs, registry, registry_dir=registry_dir)


@pytest.mark.parametrize(
    ("share", "overrides", "message"),
    [
        ("[trajectories, sft]", '["stages.sft.model.num_experts=1"]',
         r"variant 'dense': it changes stages\.sft\.model\.num_experts \(8 in variant 'moe', 1 here\)"),
        ("[trajectories, sft]", '["run.seed=1"]', r"variant 'dense': it changes run\.seed"),
        ("[sft]", "[]", r"stage 'sft' reads stage 'trajectories' \(stages\.sft\.trajectories_from=trajectories\)"),
        ("[sft, nope]", "[]", r"share names \['nope'\], not stages of agentic-repos"),
    ],
)
def test_an_arm_that_touches_a_shared_stage_is_refused(share, overrides, message, tmp_path, registry, registry_dir):
    _, specs = load_ablations(_spec(tmp_path, f"""
name: bad-share
pipeline: agentic-repos
share: {share}
baseline: dense
variants:
  moe: {{eval_stage: eval_rl}}
  dense: {{eval_stage: eval_rl, overrides: {overrides}}}
"""))
    with pytest.raises(ConfigError, match=message):
        plan_ablations(specs, registry, registry_dir=registry_dir)


class _StageLog:
    """Every stage start: (run dir, stage id, the SFT checkpoint the run's results hold at that moment)."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str, str | None]] = []

    @hookimpl
    def codemoe_before_stage(self, ctx, stage) -> None:
        self.started.append((ctx.run_dir.name, stage.id, ctx.results.get("sft", {}).get("checkpoint")))


@pytest.mark.slow
def test_samples_arms_share_one_sft_run(
    spine, run_root: Path, registry_dir: Path, monkeypatch: pytest.MonkeyPatch, agentic_repos_short: list[str]
):
    monkeypatch.setenv("CODEMOE_CACHE_DIR", str(run_root / "cache"))  # the generated task folders
    pm, registry, hooks = spine
    log = _StageLog()
    pm.register(log)
    _, specs = load_ablations("agentic-samples")
    out = run_root / "ablation"
    suite = run_ablations(specs, registry, hooks, registry_dir=registry_dir, overrides=agentic_repos_short, show_progress=False, out_dir=out)

    started = [stage for _, stage, _ in log.started]
    assert started.count("trajectories") == started.count("sft") == started.count("eval_sft") == 1
    assert started.count("rl") == 3
    (shared_sft,) = out.glob("*/sft/checkpoint")  # the one SFT checkpoint on disk
    assert [ckpt for _, stage, ckpt in log.started if stage == "rl"] == [str(shared_sft)] * 3
    rows = suite["ablations"][0]["variants"]
    assert list(rows) == ["samples_4", "samples_8", "samples_16"]
    assert len({row["run_dir"] for row in rows.values()}) == 3
    for n, row in zip((4, 8, 16), rows.values(), strict=True):
        config = OmegaConf.load(Path(row["run_dir"]) / "config.yaml")
        assert config.stages.rl.algo.group_size == n
        state = json.loads((Path(row["run_dir"]) / "state.json").read_text())["finished"]
        assert set(state) == {"environment", "trajectories", "sft", "rl", "eval_sft", "eval_rl", "report"}
        assert state["sft"]["checkpoint"] == str(shared_sft)
        if n == 4:  # the first run makes the shared stages, the others record them as its results
            assert Path(row["run_dir"]) == shared_sft.parents[1] and "shared_from" not in state["sft"]
        else:
            assert state["sft"]["shared_from"] == state["eval_sft"]["shared_from"] == str(shared_sft.parents[1])
            assert not (Path(row["run_dir"]) / "sft").exists() and (Path(row["run_dir"]) / "rl" / "checkpoint").is_dir()
        assert row["tasks"] == 2 and row["eval_stage"] == "eval_rl"
    assert "vs_baseline" in rows["samples_16"] and "vs_baseline" not in rows["samples_4"]
    # agent evaluations: format errors per episode with a CI, and their paired change to the baseline
    assert all(row["format_errors"]["low"] <= row["format_errors"]["value"] <= row["format_errors"]["high"]
               for row in rows.values())
    assert "format_errors_vs_baseline" in rows["samples_16"] and "format_errors_vs_baseline" not in rows["samples_4"]
    table = (out / "ablation-agentic-samples.md").read_text().splitlines()
    assert [line.split(" | ")[1] for line in table[2:]] == ["samples_4", "samples_8", "samples_16"]
    assert "format errors / episode" in table[0] and f"{rows['samples_8']['format_errors']['value']:.2f} [" in table[3]
    assert json.loads((out / "ablation-agentic-samples.json").read_text())["share"] == ["trajectories", "sft", "eval_sft"]

    # stopped after samples_16's rl stage: --resume finishes that run and reads the others
    state_file = Path(rows["samples_16"]["run_dir"]) / "state.json"
    state = json.loads(state_file.read_text())
    del state["finished"]["eval_rl"], state["finished"]["report"]
    state_file.write_text(json.dumps(state))
    log.started.clear()
    again = run_ablations(specs, registry, hooks, registry_dir=registry_dir, overrides=agentic_repos_short, show_progress=False,
                          out_dir=out, resume=True)
    assert [(run, stage) for run, stage, _ in log.started] == [(state_file.parent.name, "eval_rl"), (state_file.parent.name, "report")]
    assert again["runs"] == suite["runs"] and len(list(out.glob("agentic-samples-*"))) == 3


def test_the_command_plans_the_agentic_list(run_root: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["eval", "ablation", "agentic", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "runs for 9 arms of 4 ablation(s)" in out.splitlines()[0]
    assert ("agentic-stepwise-vs-outcome-outcome: runs environment, rl, eval_rl, report; "
            "takes trajectories, sft, eval_sft from run 1;") in out


def test_a_list_names_ready_specs_or_paths_next_to_it(tmp_path: Path):
    (tmp_path / "mine.yaml").write_text(
        "name: mine\npipeline: agentic-repos\nbaseline: a\nvariants: {a: {}, b: {overrides: [stages.rl.steps=3]}}\n"
    )
    (tmp_path / "list.yaml").write_text("name: both\nspecs: [agentic-samples, mine.yaml]\n")
    name, specs = load_ablations(tmp_path / "list.yaml")
    assert name == "both" and [s.name for s in specs] == ["agentic-samples", "mine"]
    (tmp_path / "list.yaml").write_text("specs: [agentic-samples, agentic-samples]\n")
    with pytest.raises(ConfigError, match="same name"):
        load_ablations(tmp_path / "list.yaml")
    (tmp_path / "list.yaml").write_text("specs: [agentic-samples]\nbaseline: a\n")
    with pytest.raises(ConfigError, match=r"unknown keys \['baseline'\] in a list of ablations"):
        load_ablations(tmp_path / "list.yaml")
