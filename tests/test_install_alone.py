"""codemoe-sandbox installs into an empty virtualenv without torch or any other codemoe package."""

import json
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

    # and it runs untrusted code from that environment: a pytest file in the sandbox, as JSON
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_add.py").write_text("def test_add():\n    assert 1 + 1 == 2\n\ndef test_bad():\n    assert 1 == 2\n")
    run = subprocess.run(
        [python, "-m", "codemoe.sandbox", "run", str(project), "--runner", "pytest", "--timeout", "60"],
        capture_output=True, text=True,
    )
    result = json.loads(run.stdout)
    assert result["status"] == "failed", run.stderr
    assert sorted(result["tests"].values()) == ["failed", "passed"]
