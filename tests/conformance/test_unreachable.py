"""An S3 endpoint that refuses connections: every operation raises the package's typed
error (never a botocore exception), after the bounded retries."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from objstore_payload import Store, StoreConfig, StoreIOError
from objstore_payload.store import RetryPolicy, S3Options


@pytest.fixture(scope="module")
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens here once the socket closes


@pytest.fixture(params=["fsspec", "boto3", "obstore"])
def store(request: pytest.FixtureRequest, closed_port: int) -> Iterator[Store]:
    config = StoreConfig(
        root="s3://payloads/unreachable",
        engine=request.param,
        s3=S3Options(
            endpoint_url=f"http://127.0.0.1:{closed_port}",
            addressing_style="path",
            access_key_id="x",
            secret_access_key="y",
            region="us-east-1",
            max_attempts=1,
            connect_timeout_s=1,
        ),
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.001),
    )
    with Store(config) as store:
        yield store


def test_every_operation_raises_the_typed_error(store: Store) -> None:
    uri = f"{store.root.url}/v0/a.bin"
    with pytest.raises(StoreIOError):
        store.put(uri, [b"data"])
    with pytest.raises(StoreIOError):
        store.read(uri, 0, 4)
    with pytest.raises(StoreIOError):
        store.size(uri)
    with pytest.raises(StoreIOError):
        store.list()
    report = store.delete([uri])
    assert report.deleted == 0
    assert len(report.failed) == 1
    assert store.stats.put_requests == 0
