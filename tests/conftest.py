"""Shared fixtures: an embedded S3 server (moto, real HTTP on 127.0.0.1) and test hygiene."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from objstore_payload.testing.ceph_rgw import CephRgw, rgw_available
from objstore_payload.testing.embedded_s3 import EmbeddedS3

ROOT = Path(__file__).resolve().parents[1]

# Tests never touch a user's AWS setup: no shared config files, dummy credentials for
# moto's in-process mock, a fixed region.
os.environ["BOTO_CONFIG"] = os.devnull
os.environ["AWS_CONFIG_FILE"] = os.devnull
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

# Seeded and bounded: the same examples on every run, sized for a 2-core machine.
settings.register_profile(
    "default",
    derandomize=True,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def embedded_s3() -> Iterator[EmbeddedS3]:
    """One moto server for the session (port 0: a fixed port deadlocks parallel runs)."""
    server = EmbeddedS3(bucket="payloads").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def ceph_rgw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CephRgw]:
    """One Ceph RGW for the session, stopped by PID at the end, also when tests fail.

    Skipped with the reason where Ceph cannot be installed; under CI it must run.
    """
    why_not = rgw_available()
    if why_not is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Ceph RGW tests: {why_not}")
        pytest.skip(why_not)
    directory = Path(
        os.environ.get("OBJSTORE_PAYLOAD_TEST_RGW_DIR") or tmp_path_factory.mktemp("rgw")
    )
    rgw = CephRgw(ROOT / "scripts" / "ceph-rgw.sh", directory).start()
    try:
        yield rgw
    finally:
        rgw.stop()
