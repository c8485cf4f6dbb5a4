#!/usr/bin/env bash
# Set up .venv with every test dependency, then lint, type-check and run the whole suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict"
scripts/typecheck.sh
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
