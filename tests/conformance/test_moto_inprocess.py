"""The conformance suite on moto's in-process S3 mock (boto3 engine).

moto's in-process mock patches botocore but not aiobotocore, so s3fs cannot run under it;
the boto3 thread-pool engine can. The s3fs engine runs against the moto server instead
(test_moto_server.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from objstore_payload import Store, StoreConfig
from tests.conformance.base import FAST_RETRY, StoreConformance


class TestMotoInProcessStore(StoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        with mock_aws():
            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="payloads")
            config = StoreConfig(
                root=f"s3://payloads/{uuid.uuid4().hex}", engine="boto3", retry=FAST_RETRY
            )
            with Store(config, record_requests=True) as store:
                yield store
