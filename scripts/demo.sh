#!/usr/bin/env bash
# Set up .venv and run the demo on an embedded S3 server (moto on 127.0.0.1, free port).
# Extra arguments go to `objstore-payload demo`, e.g. --store file:///tmp/payloads.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh embedded
exec .venv/bin/objstore-payload demo "$@"
