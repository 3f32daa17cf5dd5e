"""codemoe-core states a torch range, not the exact build this repository pins: installing it into
an environment that already has another torch (a CUDA build, an older release) keeps that torch."""

from __future__ import annotations

import json
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _wheel(folder: Path, version: str) -> Path:
    """A minimal wheel of a distribution named ``torch`` at ``version`` (stands for a user's own build)."""
    path = folder / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: codemoe-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
        whl.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n")
    return path


@pytest.mark.slow
def test_installing_codemoe_core_keeps_the_torch_already_there(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--no-deps", str(_wheel(tmp_path, "2.7.0"))], check=True)
    keep = subprocess.run(
        [*pip, "install", "--dry-run", "-q", "--report", str(tmp_path / "keep.json"), str(REPO / "packages" / "moe-core")],
        capture_output=True, text=True,
    )
    assert keep.returncode == 0, keep.stderr[-2000:]
    planned = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads((tmp_path / "keep.json").read_text())["install"]}
    assert "codemoe-core" in planned and "transformers" in planned
    assert "torch" not in planned, planned["torch"]  # the installed 2.7.0 satisfies codemoe-core's range
