#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install the project with the given extras, editable.
# Usage: scripts/setup.sh [EXTRAS]   e.g. scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-embedded}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$python" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"objstore-payload needs Python >= 3.11, {sys.executable} is {sys.version.split()[0]}")
PY
    "$python" -m venv .venv
fi
scripts/pip-quiet.sh .venv/bin/python install --upgrade "pip>=24"
scripts/pip-quiet.sh .venv/bin/python install -e ".[${extras}]"
if [[ ",${extras}," == *",dev,"* ]]; then
    # vLLM "light" for the plugin tests: the real classes and plugin loader on the CPU
    # build of torch, without vLLM's CUDA pins.
    scripts/pip-quiet.sh .venv/bin/python install --no-deps "vllm==0.33.0" "xgrammar==0.2.8"
    scripts/pip-quiet.sh .venv/bin/python install -r scripts/vllm-light-requirements.txt
fi
.venv/bin/python -c "import objstore_payload" # fail here, not later, if the install broke
