"""The fault matrix over real HTTP: {short read, body cut mid-stream, 503 SlowDown,
connection reset, 500 InternalError, object missing, request timeout} x {writer PUT,
reader GET, collector DELETE}, for both S3 engines (s3fs and boto3).

Faults come from `FaultProxy`, a proxy on 127.0.0.1 in front of the moto server. Every
cell must either recover within the retry budget (botocore's one retry layer for HTTP
errors, the store's own for bodies that come back short, each bounded) and give exactly
the written values, or raise one of the package's typed errors naming the object (and,
for reads, the byte range); no cell may yield a wrong tensor. A transient fault is one
failure followed by normal service; a persistent one never stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import msgspec
import numpy as np
import pytest

from objstore_payload import (
    PayloadError,
    PayloadNotFoundError,
    PayloadReader,
    PayloadWriter,
    RequestArrays,
    ShortReadError,
    Store,
    StoreConfig,
    StoreIOError,
)
from objstore_payload.lifecycle import PayloadCollector
from objstore_payload.reader import FieldWindow
from objstore_payload.store.config import RetryPolicy
from objstore_payload.testing.embedded_s3 import EmbeddedS3
from objstore_payload.testing.fault_proxy import Fault, FaultKind, FaultProxy

T = TypeVar("T")
KINDS: list[FaultKind] = ["short", "cut", "slowdown", "reset", "internal", "missing", "timeout"]
ENGINES = ["fsspec", "boto3", "obstore"]
RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05, total_timeout_s=20)
READ_TIMEOUT_S = 1.0
"""The client's read timeout; a ``timeout`` fault holds the answer longer than this."""
BUDGET_S = 25.0
"""No cell may take longer than this: retries are bounded."""


def arrays() -> RequestArrays:
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 5, 300).astype(np.int32)
    return RequestArrays(
        prompt_len=500,
        completion_len=300,
        routed_experts=rng.integers(0, 128, (799, 4, 2), dtype=np.uint8),
        sampling_mask=(counts, rng.integers(0, 50_000, int(counts.sum()), dtype=np.int32)),
    )


@pytest.fixture(scope="module")
def proxy(embedded_s3: EmbeddedS3) -> Iterator[FaultProxy]:
    embedded_s3.ensure_bucket()
    with FaultProxy(embedded_s3.endpoint_url) as running:
        yield running


@pytest.fixture(params=ENGINES)
def store(
    request: pytest.FixtureRequest, proxy: FaultProxy, embedded_s3: EmbeddedS3
) -> Iterator[Store]:
    options = msgspec.structs.replace(
        embedded_s3.s3_options(read_timeout_s=READ_TIMEOUT_S, connect_timeout_s=1.0),
        endpoint_url=proxy.endpoint_url,
    )
    config = StoreConfig(
        root=f"s3://{embedded_s3.bucket}/faults-{request.param}",
        engine=request.param,
        s3=options,
        retry=RETRY,
    )
    proxy.clear()
    with Store(config) as opened:
        yield opened
    proxy.clear()


def expected_windows(data: RequestArrays) -> tuple[np.ndarray, np.ndarray]:
    counts, ids = data.sampling_mask  # type: ignore[misc]
    mask = np.full((counts.size, int(counts.max())), -1, np.int32)
    mask[np.arange(mask.shape[1]) < counts[:, None]] = ids
    return np.asarray(data.routed_experts), mask


def read_back(store: Store, segments: list) -> tuple[np.ndarray | None, np.ndarray | None]:  # type: ignore[type-arg]
    routing, mask = PayloadReader(store).read_window(
        segments, [FieldWindow("routed_experts", 0, 799), FieldWindow("sampling_mask", 500, 800)]
    )
    return routing, mask


def assert_exact(store: Store, segments: list) -> None:  # type: ignore[type-arg]
    want_routing, want_mask = expected_windows(arrays())
    routing, mask = read_back(store, segments)
    assert routing is not None
    assert mask is not None
    np.testing.assert_array_equal(routing, want_routing)
    np.testing.assert_array_equal(mask, want_mask)


def arrays_size() -> int:
    from objstore_payload.layout import encode_blob

    return encode_blob(arrays().regions()).size


def attempt(fn: Callable[[], T]) -> T | PayloadError:
    """``fn()``, or the package error it raised (anything else propagates and fails)."""
    try:
        return fn()
    except PayloadError as exc:
        return exc


def fault(operation: str, kind: FaultKind, persistent: bool) -> Fault:
    return Fault(operation, kind, times=1000 if persistent else 1, delay_s=3 * READ_TIMEOUT_S)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_reader_get(store: Store, proxy: FaultProxy, kind: FaultKind, persistent: bool) -> None:
    segments = PayloadWriter(store).write(store.version_prefix(1), arrays())
    proxy.inject(fault("get", kind, persistent))
    started = time.monotonic()
    got = attempt(lambda: read_back(store, segments))
    proxy.clear()
    assert time.monotonic() - started < BUDGET_S
    if kind == "missing":
        assert isinstance(got, PayloadNotFoundError), got
        assert segments[0].uri in str(got)
    elif persistent:
        assert isinstance(got, (StoreIOError, ShortReadError)), got
        assert segments[0].uri in str(got)
        assert "bytes [" in str(got) or ("offset" in str(got) and "received" in str(got))
    else:  # one failure, then normal service: exactly the written values
        assert not isinstance(got, PayloadError), f"a single {kind} must be recovered: {got!r}"
        want_routing, want_mask = expected_windows(arrays())
        np.testing.assert_array_equal(got[0], want_routing)
        np.testing.assert_array_equal(got[1], want_mask)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_writer_put(store: Store, proxy: FaultProxy, kind: FaultKind, persistent: bool) -> None:
    proxy.inject(fault("put", kind, persistent))
    started = time.monotonic()
    written = attempt(lambda: PayloadWriter(store).write(store.version_prefix(2), arrays()))
    proxy.clear()
    assert time.monotonic() - started < BUDGET_S
    left = store.list(store.version_prefix(2))
    if isinstance(written, PayloadError):
        assert persistent or kind == "missing", f"a single {kind} must be recovered: {written!r}"
        assert "faults-" in str(written)  # names the object
        if kind == "short":
            assert f"of {arrays_size()} bytes" in str(written)
        assert left == []  # nothing half-written is visible
        return
    # A write that returned is whole: every value reads back exactly.
    assert not persistent, f"a persistent {kind} cannot end in a successful write"
    assert_exact(store, written)
    store.delete(left)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_collector_delete(
    store: Store, proxy: FaultProxy, kind: FaultKind, persistent: bool
) -> None:
    writer = PayloadWriter(store)
    written = [writer.write_blob(store.version_prefix(3), arrays()) for _ in range(3)]
    collector = PayloadCollector(store, max_off_policy_steps=8, resume=True)
    collector.record_batch(1, [w.uri for w in written if w is not None])
    if kind == "missing":
        # A racing collector got there first: the objects are gone before the request.
        store.delete([w.uri for w in written if w is not None])
    else:
        proxy.inject(fault("delete", kind, persistent))
    started = time.monotonic()
    try:
        collector.on_policy_update(1).result(timeout=BUDGET_S)
    finally:
        proxy.clear()
        collector.close()
    assert time.monotonic() - started < BUDGET_S
    left = store.list(store.version_prefix(3))
    try:
        if kind in ("short", "cut"):
            # The server deleted; only its answer was broken. Nothing is lost either way:
            # keys reported as failed are already gone (deleting again is harmless).
            assert left == []
            assert collector.stats.failed in (0, 3)
        elif persistent and kind != "missing":
            # Reported, not lost: what could not be deleted is counted and named, and
            # the request was not sent again on top of the client's retries.
            assert collector.stats.failed == len(left) == 3
            assert all("faults-" in path for path, _ in collector.stats.errors)
            assert collector.stats.delete_requests == 1
        else:  # recovered, or already gone: deleting a missing object is not an error
            assert left == [], kind
            assert collector.stats.failed == 0
    finally:
        store.delete(left)
