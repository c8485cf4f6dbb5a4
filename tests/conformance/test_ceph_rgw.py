"""The conformance suite on a real S3 server: Ceph RGW on 127.0.0.1 (s3fs, boto3 and
obstore engines; checksums only where required; a small connection pool)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from objstore_payload import Store
from objstore_payload.testing.ceph_rgw import CephRgw
from tests.conformance.base import StoreConformance, s3_store

pytestmark = pytest.mark.s3


class TestCephRgwS3fs(StoreConformance):
    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with s3_store(ceph_rgw, "fsspec") as store:
            yield store


class TestCephRgwBoto3(StoreConformance):
    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with s3_store(ceph_rgw, "boto3") as store:
            yield store


class TestCephRgwObstore(StoreConformance):
    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with s3_store(ceph_rgw, "obstore") as store:
            yield store


class TestCephRgwBoto3AutoAddressing(StoreConformance):
    """botocore's own addressing choice for an endpoint URL (path-style for an IP)."""

    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with s3_store(ceph_rgw, "boto3", addressing_style="auto") as store:
            yield store


class TestCephRgwWhenRequiredChecksumsSmallPool(StoreConformance):
    @pytest.fixture
    def store(self, ceph_rgw: CephRgw) -> Iterator[Store]:
        with s3_store(
            ceph_rgw, "fsspec", checksum_mode="when_required", max_pool_connections=2
        ) as store:
            yield store
