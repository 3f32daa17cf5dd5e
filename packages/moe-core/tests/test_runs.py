import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from codemoe.core import Hooks, build_plugin_manager, build_registry, compose, hookimpl, run_pipeline

EVENTS: list[tuple] = []


@dataclass
class CountConfig:
    steps: int = 3  # how many steps to log
    fail_at: int = 0  # raise at this step (0: never), to simulate a crash mid-run


class Count:
    def __init__(self, config: CountConfig) -> None:
        self.config = config

    def run(self, ctx, stage):
        for step in range(1, self.config.steps + 1):
            if step == self.config.fail_at:
                raise RuntimeError(f"crash at step {step}")
            ctx.metrics.write(stage.id, step, loss=1.0 / step)
            ctx.hooks.after_rollout_batch(ctx=ctx, stage=stage, step=step, batch=[step])
            ctx.hooks.after_train_step(ctx=ctx, stage=stage, step=step, metrics={"loss": 1.0 / step})
        return {"steps": self.config.steps, "seen": sorted(ctx.results)}


class Recorder:
    @hookimpl
    def codemoe_register_components(self, registry):
        registry.register("stage", "count", Count, CountConfig)

    @hookimpl
    def codemoe_before_stage(self, ctx, stage):
        EVENTS.append(("before", stage.id))

    @hookimpl
    def codemoe_after_stage(self, ctx, stage, result):
        EVENTS.append(("after", stage.id, result["steps"]))

    @hookimpl
    def codemoe_after_train_step(self, ctx, stage, step, metrics):
        EVENTS.append(("step", stage.id, step))

    @hookimpl
    def codemoe_after_rollout_batch(self, ctx, stage, step, batch):
        assert batch == [step]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    EVENTS.clear()
    monkeypatch.chdir(tmp_path)
    reg = tmp_path / "registry"
    (reg / "pipelines").mkdir(parents=True)
    (reg / "pipelines" / "two.yaml").write_text(
        "run: {name: two, dir: runs}\nstages:\n  a: {name: count, steps: 2}\n  b: {name: count, steps: 3}\n"
    )
    pm = build_plugin_manager([("recorder", Recorder())], entry_points=False)
    return reg, pm, build_registry(pm)


def test_stages_run_in_order_and_the_run_dir_holds_config_log_metrics(setup):
    reg, pm, registry = setup
    ctx = run_pipeline(compose("two", registry_dir=reg), registry, Hooks(pm), show_progress=False)
    assert EVENTS[0] == ("before", "a") and EVENTS[-1] == ("after", "b", 3)
    assert [e for e in EVENTS if e[0] == "step"] == [("step", "a", 1), ("step", "a", 2)] + [
        ("step", "b", s) for s in (1, 2, 3)
    ]
    assert ctx.results["b"] == {"steps": 3, "seen": ["a"]}  # later stages see earlier results
    assert (ctx.run_dir / "config.yaml").read_text().startswith("run:")
    assert "stage b finished" in (ctx.run_dir / "run.log").read_text()
    records = [json.loads(line) for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["stage"], r["step"], r["loss"]) for r in records if "loss" in r][-1] == ("b", 3, pytest.approx(1 / 3))


def test_resume_skips_finished_stages_and_reruns_the_interrupted_one(setup):
    reg, pm, registry = setup
    crashing = compose("two", ["stages.b.fail_at=2"], registry_dir=reg)
    with pytest.raises(RuntimeError, match="crash at step 2"):
        run_pipeline(crashing, registry, Hooks(pm), show_progress=False)
    run_dir = next(Path("runs").iterdir())
    assert list(json.loads((run_dir / "state.json").read_text())["finished"]) == ["a"]
    assert "stage b failed" in (run_dir / "run.log").read_text()
    EVENTS.clear()
    ctx = run_pipeline(compose("two", registry_dir=reg), registry, Hooks(pm), run_dir=run_dir, show_progress=False)
    assert ("before", "a") not in EVENTS and ("after", "b", 3) in EVENTS
    assert ctx.results["a"] == {"steps": 2, "seen": []}  # restored from state.json


def test_unknown_stage_fails_before_anything_runs(setup, tmp_path: Path):
    reg, pm, registry = setup
    (reg / "pipelines" / "bad.yaml").write_text("stages:\n  a: {name: count}\n  b: {name: cuont}\n")
    from codemoe.core import RegistryError

    with pytest.raises(RegistryError, match="'stages.b'.*did you mean 'count'"):
        run_pipeline(compose("bad", registry_dir=reg), registry, Hooks(pm), show_progress=False)
    assert EVENTS == [] and not (tmp_path / "runs").exists()


def test_built_in_plugins_give_a_runnable_smoke_pipeline(run_root: Path):
    pm = build_plugin_manager()
    ctx = run_pipeline(compose("smoke"), build_registry(pm), Hooks(pm), show_progress=False)
    assert ctx.results["environment"]["torch"].startswith("2.13")
    assert ctx.run_dir.parent == run_root / "runs"


def test_ranks_of_one_torchrun_launch_share_one_run_directory(tmp_path: Path, monkeypatch):
    """Rank 0 makes the run directory and hands its path over the launch's TCP store (as torchrun's
    agent hosts it); the launch's other ranks take it (no '-2' copies), and a rank that cannot see
    the folder (another node without a shared filesystem) stops with what to change."""
    import socket
    from datetime import timedelta

    import torch.distributed as dist
    from codemoe.core.errors import CodemoeError
    from codemoe.core.runs import MetricsWriter, create_run_dir
    from omegaconf import OmegaConf

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    cfg = OmegaConf.create({"run": {"name": "t", "dir": str(tmp_path)}})
    for name, value in {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-a")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(CodemoeError, match="rank 1: rank 0 did not create the run directory"):
        create_run_dir(cfg, wait_s=0.5)
    monkeypatch.setenv("RANK", "0")
    first = create_run_dir(cfg)
    monkeypatch.setenv("RANK", "1")
    assert create_run_dir(cfg) == first
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-b")  # another launch gets its own directory
    monkeypatch.setenv("RANK", "0")
    assert create_run_dir(cfg) != first
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2
    # what a rank on a node without the folder is handed: rank 0's path on its own disk
    server.set("codemoe/run_dir/launch-c", str(tmp_path / "elsewhere" / "t-1"))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-c")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(CodemoeError, match="does not exist here.*filesystem all nodes share"):
        create_run_dir(cfg)
    MetricsWriter(first / "metrics.jsonl", enabled=False).write("s", 1, loss=1.0)  # ranks > 0 write nothing
    assert not (first / "metrics.jsonl").exists()
