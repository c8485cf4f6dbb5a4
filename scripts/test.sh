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
echo "== checkov (terraform/)"
# checkov pins its own boto3/botocore; it gets a virtual environment of its own.
if [ ! -x .venv-checkov/bin/checkov ]; then
    "${PYTHON:-python3}" -m venv .venv-checkov
    scripts/pip-quiet.sh .venv-checkov/bin/python install "checkov==3.3.30"
fi
# --skip-download: no fetching of policy metadata (the scan itself is offline).
.venv-checkov/bin/checkov -d terraform --framework terraform --quiet --compact --skip-download
echo "== Ceph RGW"
scripts/install-ceph.sh
# The tests start RGW in this folder; whatever happens to them, its daemons stop here too.
OBJSTORE_PAYLOAD_TEST_RGW_DIR="$(mktemp -d)"
export OBJSTORE_PAYLOAD_TEST_RGW_DIR
trap 'scripts/ceph-rgw.sh down "$OBJSTORE_PAYLOAD_TEST_RGW_DIR"; rm -rf "$OBJSTORE_PAYLOAD_TEST_RGW_DIR"' EXIT
echo "== pytest"
.venv/bin/python -m pytest "$@"
