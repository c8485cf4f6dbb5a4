#!/usr/bin/env bash
# Run `python -m pip ARGS` with its output kept in a log that is shown only on failure.
set -uo pipefail
python="$1"; shift
log="$(mktemp)"
if ! "$python" -m pip --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2
    rm -f "$log"
    exit 1
fi
rm -f "$log"
