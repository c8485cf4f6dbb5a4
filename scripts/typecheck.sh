#!/usr/bin/env bash
# mypy --strict over the package as it is installed. adapters/ and lifecycle/ are mapped
# into objstore_payload.* by setuptools' package-dir, which mypy cannot follow through an
# editable install, so the package is installed (not editable) into a scratch folder and
# checked there.
set -euo pipefail
cd "$(dirname "$0")/.."
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
scripts/pip-quiet.sh .venv/bin/python install --no-deps --no-build-isolation --target "$stage" .
rm -rf "$stage"/*.dist-info "$stage/bin"
(cd "$stage" && "$OLDPWD/.venv/bin/mypy" --config-file "$OLDPWD/pyproject.toml" \
    --cache-dir "$OLDPWD/.mypy_cache" -p objstore_payload)
