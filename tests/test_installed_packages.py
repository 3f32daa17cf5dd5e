"""codemoe installed from wheels, away from any checkout: the presets ship inside the packages.

The six packages are built as wheels (hatchling, no build isolation, so no network) and installed
without dependencies into a fresh virtualenv under ``tmp_path``. Their third-party dependencies come
from the checkout's ``.venv``: a folder of links to everything in its site-packages except codemoe's
own distributions and editable finders, added to the new venv's path by a ``.pth`` file. Every
command runs from a working directory outside the checkout, with no ``CODEMOE_REGISTRY``, so a
preset can only come from the installed package itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["moe-core", "router", "rl-algos", "sandbox", "serving", "evals"]

pytestmark = pytest.mark.slow


def _run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(map(str, args))}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _third_party_links(target: Path) -> Path:
    """Links to every entry of this interpreter's site-packages but codemoe's own (dist-infos,
    editable finders), so the new venv imports torch & co. from here and codemoe only from its wheels."""
    site = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("codemoe", "_editable_impl_codemoe", "__editable__")):
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the new venv's bin folder, an environment for it): codemoe from wheels, nothing from the checkout."""
    root = tmp_path_factory.mktemp("installed")
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "--no-index",
          "-w", str(wheels), *(str(ROOT / "packages" / p) for p in PACKAGES)], cwd=root, env=dict(os.environ))
    assert len(list(wheels.glob("codemoe_*.whl"))) == len(PACKAGES)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root, env=dict(os.environ))
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          *map(str, sorted(wheels.glob("*.whl")))], cwd=root, env=dict(os.environ))
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=root, env=dict(os.environ)).stdout.strip())
    (site / "third_party.pth").write_text(f"{_third_party_links(root / 'third_party')}\n")
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(root),
        "COLUMNS": "200",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }
    return venv / "bin", env


@pytest.fixture
def away(tmp_path: Path) -> Path:
    """A working directory outside the checkout, with no registry/ above it."""
    assert ROOT not in tmp_path.parents and not any((p / "registry").is_dir() for p in (tmp_path, *tmp_path.parents))
    return tmp_path


def test_codemoe_is_imported_from_the_wheels(installed, away: Path):
    bin_dir, env = installed
    out = _run([str(bin_dir / "python"), "-c", "import codemoe.core, codemoe.sandbox, codemoe.rl, codemoe.evals as e; "
                "print(codemoe.core.__file__); print(e.__file__)"], cwd=away, env=env).stdout.split()
    assert all(Path(path).is_relative_to(bin_dir.parent) for path in out), out


def test_model_init_tiny_finds_the_shipped_preset(installed, away: Path):
    bin_dir, env = installed
    _run([str(bin_dir / "codemoe"), "model", "init", "tiny", "--out", str(away / "tiny")], cwd=away, env=env)
    config = json.loads((away / "tiny" / "config.json").read_text())
    assert config["model_type"] == "qwen3_moe" and config["num_local_experts"] == 8 and config["hidden_size"] == 128


def test_a_reward_preset_loads_and_scores(installed, away: Path):
    bin_dir, env = installed
    script = (
        "from codemoe.sandbox.rewards import RewardInput, build_reward\n"
        "from codemoe.sandbox.rewards.presets import load_preset\n"
        "spec = load_preset('seed2-weighted')\n"
        "passed = RewardInput(visible_before={'t.py::a': 'failed'}, visible_after={'t.py::a': 'passed'})\n"
        "print(sorted(spec['components']), build_reward(spec)(passed).components['task_complete'])\n"
    )
    out = _run([str(bin_dir / "python"), "-c", script], cwd=away, env=env).stdout
    assert out.strip() == "['compile_success', 'hack_penalty', 'task_complete', 'test_pass_rate'] 1.0"


def test_hack_report_runs_on_the_shipped_corpus(installed, away: Path):
    bin_dir, env = installed
    out = _run([str(bin_dir / "codemoe"), "sandbox", "hack-report", "--json", "--check", "--workers", "2"],
               cwd=away, env=env).stdout
    report = json.loads(out)
    assert report["recipe"] == "seed2-weighted"
    assert {row["detector"]: row["detection_rate"] for row in report["detectors"]}  # every detector reported
    solutions = ROOT / "packages" / "sandbox" / "src" / "codemoe" / "sandbox" / "rewards" / "data" / "hacks" / "solutions"
    shipped = len(list(solutions.glob("*/*.yaml")))
    assert shipped >= 131 and sum(kind["count"] for kind in report["kinds"]) == shipped  # every solution of the checkout's corpus


def test_a_misspelled_recipe_is_one_line_and_runs_nothing(installed, away: Path):
    bin_dir, env = installed
    result = subprocess.run([str(bin_dir / "codemoe"), "sandbox", "hack-report", "--recipe", "seed2-weigted"],
                            cwd=away, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: no reward preset 'seed2-weigted' in ")
    assert "seed2-weighted" in result.stderr and result.stdout == ""


def test_run_smoke_away_from_a_checkout(installed, away: Path):
    bin_dir, env = installed
    _run([str(bin_dir / "codemoe"), "run", "--no-progress", "smoke"], cwd=away, env=env)
    (run_dir,) = (away / "runs").iterdir()
    state = json.loads((run_dir / "state.json").read_text())
    assert "environment" in state["finished"], state
    assert "torch_threads: 0" in (run_dir / "config.yaml").read_text()
