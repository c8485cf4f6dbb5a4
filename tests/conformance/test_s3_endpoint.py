"""The conformance suite on any S3 endpoint named by environment variables: MinIO for local
development, AWS, R2... Skipped unless ``OBJSTORE_PAYLOAD_TEST_S3_ENDPOINT`` is set.

- ``OBJSTORE_PAYLOAD_TEST_S3_ENDPOINT``: endpoint URL (``aws`` for AWS's own endpoints)
- ``OBJSTORE_PAYLOAD_TEST_S3_BUCKET``: an existing bucket the tests may write to
- ``OBJSTORE_PAYLOAD_TEST_S3_ACCESS_KEY_ID`` / ``..._SECRET_ACCESS_KEY``: credentials (else
  the AWS chain)
- ``OBJSTORE_PAYLOAD_TEST_S3_ADDRESSING_STYLE``: ``path`` (default) or ``virtual``
- ``OBJSTORE_PAYLOAD_TEST_S3_CHECKSUM_MODE``: ``when_required`` for S3 look-alikes
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from objstore_payload import Store, StoreConfig
from objstore_payload.store import S3Options
from tests.conformance.base import FAST_RETRY, StoreConformance

ENDPOINT = os.environ.get("OBJSTORE_PAYLOAD_TEST_S3_ENDPOINT")
if not ENDPOINT:
    pytest.skip(
        "set OBJSTORE_PAYLOAD_TEST_S3_ENDPOINT to run the suite against an S3 endpoint",
        allow_module_level=True,
    )
pytestmark = pytest.mark.s3


def options() -> S3Options:
    env = os.environ
    values: dict[str, Any] = {
        "endpoint_url": None if ENDPOINT == "aws" else ENDPOINT,
        "addressing_style": env.get("OBJSTORE_PAYLOAD_TEST_S3_ADDRESSING_STYLE", "path"),
        "access_key_id": env.get("OBJSTORE_PAYLOAD_TEST_S3_ACCESS_KEY_ID"),
        "secret_access_key": env.get("OBJSTORE_PAYLOAD_TEST_S3_SECRET_ACCESS_KEY"),
        "region": env.get("OBJSTORE_PAYLOAD_TEST_S3_REGION", "us-east-1"),
        "checksum_mode": env.get("OBJSTORE_PAYLOAD_TEST_S3_CHECKSUM_MODE"),
    }
    return S3Options(**values)


class TestS3Endpoint(StoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        bucket = os.environ.get("OBJSTORE_PAYLOAD_TEST_S3_BUCKET", "payloads")
        config = StoreConfig(
            root=f"s3://{bucket}/objstore-payload-tests/{uuid.uuid4().hex}",
            s3=options(),
            retry=FAST_RETRY,
        )
        with Store(config, record_requests=True) as store:
            yield store
            leftovers = store.list()
            if leftovers:
                store.delete(leftovers)
