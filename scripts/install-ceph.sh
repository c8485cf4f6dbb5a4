#!/usr/bin/env bash
# Install the Debian packages the Ceph RGW tests need, when they are missing and this
# machine can (root, apt). Elsewhere the RGW tests skip with the reason; CI must run them.
set -euo pipefail
if command -v radosgw >/dev/null && command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null; then
    echo "Ceph RGW: installed"
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    started=$(date +%s)
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        ceph-mon ceph-osd radosgw >/dev/null
    echo "Ceph RGW: installed ceph-mon ceph-osd radosgw in $(($(date +%s) - started)) s"
elif [ -n "${CI:-}" ]; then
    echo "Ceph RGW: cannot install here (needs root and apt), and CI must run the RGW tests" >&2
    exit 1
else
    echo "Ceph RGW: cannot install here (needs root and apt); the RGW tests will skip"
fi
