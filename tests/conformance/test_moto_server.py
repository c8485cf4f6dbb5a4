"""The conformance suite over real HTTP: moto's server on 127.0.0.1, with the s3fs, boto3
and obstore engines, and with the S3 options that differ between stores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from objstore_payload import Store
from objstore_payload.testing.embedded_s3 import EmbeddedS3
from tests.conformance.base import StoreConformance, s3_store

pytestmark = pytest.mark.s3


def _store(server: EmbeddedS3, engine: str, **s3: Any) -> Store:
    server.ensure_bucket()
    return s3_store(server, engine, **s3)


class TestMotoServerS3fs(StoreConformance):
    @pytest.fixture
    def store(self, embedded_s3: EmbeddedS3) -> Iterator[Store]:
        with _store(embedded_s3, "fsspec") as store:
            yield store


class TestMotoServerBoto3(StoreConformance):
    @pytest.fixture
    def store(self, embedded_s3: EmbeddedS3) -> Iterator[Store]:
        with _store(embedded_s3, "boto3") as store:
            yield store


class TestMotoServerObstore(StoreConformance):
    @pytest.fixture
    def store(self, embedded_s3: EmbeddedS3) -> Iterator[Store]:
        with _store(embedded_s3, "obstore") as store:
            yield store


class TestMotoServerS3fsWhenRequiredChecksumsSmallPool(StoreConformance):
    """Checksums only where required (what S3 look-alikes need) and a 2-connection pool."""

    @pytest.fixture
    def store(self, embedded_s3: EmbeddedS3) -> Iterator[Store]:
        with _store(
            embedded_s3, "fsspec", checksum_mode="when_required", max_pool_connections=2
        ) as store:
            yield store
