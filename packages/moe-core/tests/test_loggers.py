"""Experiment trackers (kind ``logger``): chosen in ``run.loggers``, fed every metric the run writes,
refused with the key and the fix when misspelled, misconfigured or not installed."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from codemoe.core import (
    CodemoeError,
    ConfigError,
    Hooks,
    RegistryError,
    build_plugin_manager,
    build_registry,
    compose,
    hookimpl,
    run_pipeline,
)
from codemoe.core.loggers import scalars

LOGGED: list[tuple] = []


@dataclass
class ListConfig:
    label: str = "list"  # tags what this logger saw, to tell two of them apart


class ListLogger:
    """A third-party logger as a plugin writes one: it keeps what it is given."""

    def __init__(self, config: ListConfig, run_dir: Path) -> None:
        self.label, self.run_dir = config.label, run_dir

    def log(self, stage, step, values) -> None:
        LOGGED.append((self.label, stage, step, dict(values)))

    def close(self) -> None:
        LOGGED.append((self.label, "closed"))


class Steps:
    def __init__(self, config=None) -> None:
        pass

    def run(self, ctx, stage):
        for step in (1, 2):
            ctx.metrics.write(stage.id, step, loss=1.0 / step, phase="all", hacked=step == 2, load=[[0.25, 0.75]])
        return {}


class Plugin:
    @hookimpl
    def codemoe_register_components(self, registry):
        registry.register("stage", "steps", Steps)
        registry.register("logger", "list", lambda config, run_dir: ListLogger(config, run_dir), ListConfig)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    LOGGED.clear()
    monkeypatch.chdir(tmp_path)
    reg = tmp_path / "registry"
    (reg / "pipelines").mkdir(parents=True)
    (reg / "pipelines" / "p.yaml").write_text("run: {name: p, dir: runs}\nstages:\n  a: steps\n")
    pm = build_plugin_manager([("list-logger", Plugin())])  # with the built-in plugins: tensorboard, wandb
    return reg, build_registry(pm), Hooks(pm)


def test_loggers_are_off_by_default(setup):
    reg, registry, hooks = setup
    cfg = compose("p", registry_dir=reg)
    assert cfg.run.loggers == []
    ctx = run_pipeline(cfg, registry, hooks, show_progress=False)
    assert LOGGED == [] and not (ctx.run_dir / "tensorboard").exists() and not (ctx.run_dir / "wandb").exists()


def test_every_logger_gets_every_numeric_metric_with_its_stage_and_step_and_is_closed(setup):
    reg, registry, hooks = setup
    cfg = compose("p", ["+run.loggers=[list, {name: list, label: second}]"], registry_dir=reg)
    ctx = run_pipeline(cfg, registry, hooks, show_progress=False)
    first = [entry for entry in LOGGED if entry[0] == "list"]
    assert first[0] == ("list", "a", 1, {"loss": 1.0, "hacked": 0.0, "load/0/0": 0.25, "load/0/1": 0.75})
    assert first[1][1:3] == ("a", 2) and first[1][3]["hacked"] == 1.0
    assert first[2] == ("list", "a", None, {"stage_seconds": pytest.approx(first[2][3]["stage_seconds"])})
    assert first[-1] == ("list", "closed")
    assert [e for e in LOGGED if e[0] == "second"] == [("second", *e[1:]) for e in first]
    jsonl = [json.loads(line) for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["stage"], r["step"]) for r in jsonl] == [(stage, step) for _, stage, step, _ in first[:-1]]


def test_only_rank_0_of_a_launch_builds_loggers(setup, monkeypatch):
    reg, registry, hooks = setup
    monkeypatch.setenv("RANK", "1")  # another rank of a torchrun launch: rank 0 writes the run's metrics
    run_pipeline(compose("p", ["run.loggers=[list]"], registry_dir=reg), registry, hooks, show_progress=False)
    assert LOGGED == []


def test_a_misspelled_logger_or_option_stops_the_run_before_it_starts(setup, tmp_path: Path):
    reg, registry, hooks = setup
    with pytest.raises(RegistryError, match=r"unknown logger 'tensorbord' at 'run.loggers\[1\]'.*did you mean 'tensorboard'"):
        run_pipeline(compose("p", ["+run.loggers=[list, tensorbord]"], registry_dir=reg), registry, hooks)
    with pytest.raises(ConfigError, match=r"'run.loggers\[0\].mode': 'ofline' is not a W&B mode"):
        run_pipeline(compose("p", ["+run.loggers=[{name: wandb, mode: ofline}]"], registry_dir=reg), registry, hooks)
    assert LOGGED == [] and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("logger", "module"), [("tensorboard", "tensorboard"), ("wandb", "wandb")])
def test_a_logger_whose_extra_is_missing_names_the_extra_to_install(setup, monkeypatch, logger, module):
    reg, registry, hooks = setup
    monkeypatch.setitem(sys.modules, module, None)  # what Python does for a package that is not there
    cfg = compose("p", [f"+run.loggers=[list, {logger}]"], registry_dir=reg)
    with pytest.raises(CodemoeError, match=rf"pip install 'codemoe-core\[{logger}\]'"):
        run_pipeline(cfg, registry, hooks, show_progress=False)
    assert LOGGED == [("list", "closed")]  # the logger built before it is closed; no stage ran
    (run_dir,) = Path("runs").iterdir()
    assert not (run_dir / "metrics.jsonl").exists()


def test_scalars_flatten_numbers_and_leave_text_out():
    values = {"loss": 0.5, "ok": True, "phase": "router", "grid": [[0.1, 0.9], [1, 0]], "steps": 3}
    assert scalars(values) == {
        "loss": 0.5, "ok": 1.0, "grid/0/0": 0.1, "grid/0/1": 0.9, "grid/1/0": 1.0, "grid/1/1": 0.0, "steps": 3.0,
    }
