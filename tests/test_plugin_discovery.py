"""Every distribution of the workspace, and a third-party plugin, found through the entry point."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from codemoe.core import Hooks, build_plugin_manager, build_registry, compose, plugin_infos, run_pipeline

DISTRIBUTIONS = {
    "core": "codemoe-core",
    "router": "codemoe-router",
    "rl": "codemoe-rl-algos",
    "sandbox": "codemoe-sandbox",
    "serving": "codemoe-serving",
    "evals": "codemoe-evals",
    "example": "codemoe-example",
}
DATA = Path(__file__).parent / "data"


def codemoe(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    exe = shutil.which("codemoe") or str(Path(sys.executable).parent / "codemoe")
    environ = {**os.environ, "COLUMNS": "200", **env}
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, env=environ)


def test_codemoe_plugins_lists_every_package_and_the_example_plugin():
    result = codemoe("plugins", "--json")
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert {name: plugins[name]["distribution"] for name in DISTRIBUTIONS} == DISTRIBUTIONS
    assert "stage:disk-check" in plugins["example"]["components"]
    assert {"codemoe_register_components", "codemoe_after_stage"} <= set(plugins["example"]["hooks"])


def test_components_of_one_kind():
    names = {c["name"] for c in json.loads(codemoe("components", "stage", "--json").stdout)}
    assert {"environment", "disk-check"} <= names


def test_disable_env_blocks_built_ins_and_third_parties(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CODEMOE_DISABLE_PLUGINS", "serving,example")
    names = {info.name for info in plugin_infos(build_plugin_manager())}
    assert names.isdisjoint({"serving", "example"}) and {"core", "sandbox"} <= names


def test_a_pipeline_uses_the_third_party_component(run_root: Path):
    pm = build_plugin_manager()
    cfg = compose(DATA / "pipelines" / "with-example-plugin.yaml")
    ctx = run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)
    assert ctx.results["disk-check"]["free_gb"] > 0
    timeline = (ctx.run_dir / "timeline.md").read_text()  # written by the plugin's after_stage hook
    assert "| disk-check | disk-check |" in timeline and "| environment | environment |" in timeline


def test_the_third_party_stage_fails_with_its_config_key(run_root: Path):
    pm = build_plugin_manager()
    cfg = compose(DATA / "pipelines" / "with-example-plugin.yaml", ["stages.disk-check.min_free_gb=1e9"])
    with pytest.raises(RuntimeError, match=r"stages.disk-check.min_free_gb"):
        run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)


def test_listing_plugins_and_components_does_not_import_torch():
    """Design rule: plugin modules register "module:attr" targets, so the CLI starts fast."""
    code = (
        "import sys; from codemoe.core import build_plugin_manager, build_registry;"
        "r = build_registry(build_plugin_manager()); print(len(r.components()), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    count, imported = out.stdout.split()
    assert int(count) >= 2 and imported == "False"
