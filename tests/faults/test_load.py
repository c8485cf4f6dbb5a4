"""Load, at reduced size: 64 concurrent writers and 8 concurrent readers through one
store for a few seconds (the full 60 s run is ``objstore-payload bench load``). Nothing
lost or corrupt, memory bounded, no descriptor (socket, file) left open."""

from __future__ import annotations

import pytest

from objstore_payload import StoreConfig
from objstore_payload.bench.load import run_load

pytestmark = pytest.mark.load


@pytest.mark.parametrize("server", ["moto", "rgw"])
@pytest.mark.parametrize("engine", ["fsspec", "boto3"])
def test_many_writers_and_readers_lose_nothing(
    request: pytest.FixtureRequest, server: str, engine: str
) -> None:
    running = request.getfixturevalue("embedded_s3" if server == "moto" else "ceph_rgw")
    if server == "moto":
        running.ensure_bucket()
    config = StoreConfig(
        root=f"s3://{running.bucket}/load-{engine}", engine=engine, s3=running.s3_options()
    )
    result = run_load(config, writers=64, readers=8, duration_s=6.0, max_writes=300)
    assert result.errors == []
    assert result.written > 0
    assert result.read == result.written
    assert result.lost == 0
    assert result.corrupt == 0
    assert result.fds_leaked == []  # sessions and sockets all closed
    assert result.rss_after - result.rss_before < 512 << 20
