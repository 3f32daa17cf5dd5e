#!/usr/bin/env bash
# Build the virtualenv a real SGLang server runs in on this CPU machine (codemoe talks to it over
# HTTP; SGLang pins its own torch, so it never shares codemoe's venv).
#   engines/sglang/install.sh [VENV]      (default: .venv-sglang at the repository root)
# About 9 minutes and 6 GB from the package registry. The stand-in kernel module beside this
# script (sgl_kernel/, a CPU test shim) is put on the venv's path; it is never for GPU use.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-$here/../../.venv-sglang}"
python="${PYTHON:-python3}"
test -x "$venv/bin/python" || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" torch==2.14.1 torchvision==0.29.1
"${pip[@]}" -r "$here/requirements.txt" torch==2.14.1
"${pip[@]}" --no-deps sglang==0.5.23
"${pip[@]}" dill
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# The routed-experts capturer pins its host buffer; pinning needs a GPU driver. On this CPU-only
# machine the buffer is plain host memory (the one change to SGLang's own files, checked here).
base="$site/sglang/srt/state_capturer/base.py"
grep -q "pin_memory=True," "$base" && sed -i 's/pin_memory=True,/pin_memory=torch.cuda.is_available(),/' "$base"
grep -q "pin_memory=torch.cuda.is_available()," "$base"
echo "$here/shim" > "$site/codemoe-sglang-cpu-shim.pth"
"$venv/bin/python" -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)"
touch "$venv/.codemoe-sglang-installed"
