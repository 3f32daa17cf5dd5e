"""``codemoe serve MODEL_DIR`` as a real process, and the plugin's registrations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest


def test_engines_are_registered_without_importing_torch():
    code = (
        "import sys\n"
        "from codemoe.core import Registry\n"
        "import codemoe.serving, codemoe.serving.plugin as plugin\n"
        "r = Registry()\n"
        "plugin.codemoe_register_components(r)\n"
        "print(r.names('engine'), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['embedded', 'openai', 'sglang'] False"


@pytest.mark.slow
@pytest.mark.parametrize("http", ["stdlib", "fastapi"])
def test_codemoe_serve_answers_over_http(model_dir, http):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "codemoe.core", "serve", str(model_dir), "--port", "0", "--served-model-name", "m"]
    cmd += ["--prefix-cache-tokens", "4096", "--http", http]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "codemoe serve: m on http://127.0.0.1:" in line, proc.stderr.read() if proc.poll() is not None else line
        url = line.split(" on ")[1].split()[0]

        def complete(prompt: str) -> dict:
            body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 3, "temperature": 0}).encode()
            headers = {"Content-Type": "application/json"}
            req = urllib.request.Request(f"{url}/v1/completions", data=body, headers=headers)
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())

        answer = complete("def add(a, b):")
        assert answer["choices"][0]["finish_reason"] in ("length", "stop")
        assert answer["usage"]["completion_tokens"] <= 3
        complete("def add(a, b):" + answer["choices"][0]["text"] + "\n")  # the next turn: the flag is honoured
        with urllib.request.urlopen(f"{url}/health", timeout=60) as resp:
            assert json.loads(resp.read())["prefix_cache_reused_tokens"] > 0
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # SIGTERM stops the server cleanly


def test_serve_reports_a_missing_checkpoint(tmp_path):
    cmd = [sys.executable, "-m", "codemoe.core", "serve", str(tmp_path / "nope"), "--port", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no config.json" in " ".join(proc.stderr.split())  # wrapped to the terminal
