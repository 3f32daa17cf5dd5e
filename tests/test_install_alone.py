"""codemoe-sandbox installs into an empty virtualenv without torch or any other codemoe package."""

import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_sandbox_installs_alone_without_torch(tmp_path: Path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO / "packages" / "sandbox")],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    listed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True).stdout
    names = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert "codemoe-sandbox" in names
    assert not names & {"torch", "transformers", "codemoe-core", "omegaconf"}
    probe = "import codemoe.sandbox, importlib.util as u; print(u.find_spec('torch'), u.find_spec('codemoe.core'))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "None"]
