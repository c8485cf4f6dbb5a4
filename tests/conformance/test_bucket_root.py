"""A store whose root is a whole bucket (no key prefix) lists, reads and deletes like any
other: the listing asks for every key of the bucket, not for keys under "/"."""

from __future__ import annotations

import pytest

from objstore_payload import PayloadWriter, Store, StoreConfig
from objstore_payload.testing.embedded_s3 import EmbeddedS3
from objstore_payload.testing.loopback import create_bucket
from tests.conformance.base import worked_example


@pytest.mark.parametrize("engine", ["fsspec", "boto3", "obstore"])
def test_a_bucket_root_store(embedded_s3: EmbeddedS3, engine: str) -> None:
    bucket = f"whole-bucket-{engine}"
    create_bucket(embedded_s3.s3_options(), bucket, if_missing=True)
    config = StoreConfig(root=f"s3://{bucket}", engine=engine, s3=embedded_s3.s3_options())
    with Store(config) as store:
        (segment, *_) = PayloadWriter(store).write(store.version_prefix(1), worked_example())
        assert store.list() == [segment.uri]
        assert store.list(store.version_prefix(1)) == [segment.uri]
        assert store.delete(store.list()).deleted == 1
        assert store.list() == []
