"""The conformance suite on a real S3 server: Ceph RGW on 127.0.0.1 (s3fs and boto3
engines; checksums only where required; a small connection pool)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from objstore_payload import Store, StoreConfig
from objstore_payload.testing.ceph_rgw import CephRgw
from tests.conformance.base import FAST_RETRY, StoreConformance

pytestmark = pytest.mark.s3


def _store(rgw: CephRgw, engine: str, **s3: Any) -> Store:
    config = StoreConfig(
        root=f"s3://{rgw.bucket}/{uuid.uuid4().hex}",
        engine=engine,  # type: ignore[arg-type]
        s3=rgw.s3_options(**s3),
        retry=FAST_RETRY,
    )
    return Store(config, record_requests=True)


class TestCephRgwS3fs(StoreConformance):
    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with _store(ceph_rgw, "fsspec") as store:
            yield store


class TestCephRgwBoto3(StoreConformance):
    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with _store(ceph_rgw, "boto3") as store:
            yield store


class TestCephRgwBoto3AutoAddressing(StoreConformance):
    """botocore's own addressing choice for an endpoint URL (path-style for an IP)."""

    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with _store(ceph_rgw, "boto3", addressing_style="auto") as store:
            yield store


class TestCephRgwWhenRequiredChecksumsSmallPool(StoreConformance):
    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with _store(
            ceph_rgw, "fsspec", checksum_mode="when_required", max_pool_connections=2
        ) as store:
            yield store
