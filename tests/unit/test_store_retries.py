"""The store's retry layer: what it retries (bodies that came back short or broke off
mid-stream, which HTTP clients do not retry), what it leaves to the client's own retry
layer (every other request failure: raised at once), what it gives up on, what it says.

The failures are injected by a wrapper engine around a real memory filesystem engine,
because a short or failing read cannot be provoked from the memory store itself; real
HTTP-level faults come with the fault matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import fsspec
import pytest

from objstore_payload import PayloadNotFoundError, ShortReadError, Store, StoreConfig, StoreIOError
from objstore_payload.store import Block, RetryPolicy
from objstore_payload.store.engine import Engine, EngineWrapper, InterruptedBody, ReadOutcome
from objstore_payload.store.fsspec_engine import FsspecEngine


class FlakyEngine(EngineWrapper):
    """Serves reads from ``inner`` after ``failures`` bad answers per block."""

    name = "flaky"
    default_coalesce_gap = 0

    def __init__(self, inner: Engine, failures: int, fault: str) -> None:
        super().__init__(inner)
        self.failures, self.fault = failures, fault
        self.calls = 0

    def read_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        self.calls += 1
        real = self.inner.read_blocks(blocks)
        if self.calls > self.failures:
            return real
        if self.fault == "short":
            return [bytes(r)[: len(r) // 2] if isinstance(r, bytes) else r for r in real]
        if self.fault == "cut":
            return [InterruptedBody("the body broke off") for _ in blocks]
        return [ConnectionResetError("reset by peer") for _ in blocks]


def make_store(failures: int, fault: str, attempts: int = 4) -> tuple[Store, FlakyEngine, str]:
    engine = FlakyEngine(FsspecEngine(fsspec.filesystem("memory")), failures, fault)
    policy = RetryPolicy(max_attempts=attempts, initial_backoff_s=0.001, max_backoff_s=0.002)
    store = Store(StoreConfig(root="memory://retries", retry=policy), engine=engine)
    uri = store.new_blob_uri(store.root.url)
    store.put(uri, [bytes(range(100))])
    return store, engine, uri


@pytest.mark.parametrize("fault", ["short", "cut"])
def test_transient_faults_recover_within_the_budget(fault: str) -> None:
    store, engine, uri = make_store(failures=2, fault=fault)
    assert bytes(store.read(uri, 10, 30)) == bytes(range(10, 30))
    assert engine.calls == 3
    assert store.stats.retries == 2


def test_persistent_short_read_names_uri_offset_and_counts() -> None:
    store, engine, uri = make_store(failures=99, fault="short", attempts=3)
    with pytest.raises(ShortReadError, match=r"at offset 10: expected 20 bytes, received 10"):
        store.read(uri, 10, 30)
    assert engine.calls == 3


def test_persistent_cut_is_a_store_error_with_cause() -> None:
    store, _, uri = make_store(failures=99, fault="cut", attempts=2)
    with pytest.raises(StoreIOError, match=r"bytes \[0, 10\) failed after 2 attempts") as info:
        store.read(uri, 0, 10)
    assert isinstance(info.value.__cause__, InterruptedBody)


def test_request_failures_are_left_to_the_clients_retries() -> None:
    # botocore already retried a reset before the response: one layer, not two.
    store, engine, uri = make_store(failures=1, fault="reset", attempts=4)
    with pytest.raises(StoreIOError, match=r"bytes \[0, 10\) failed: ") as info:
        store.read(uri, 0, 10)
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert engine.calls == 1


def test_total_timeout_caps_the_retries() -> None:
    engine = FlakyEngine(FsspecEngine(fsspec.filesystem("memory")), 99, "cut")
    policy = RetryPolicy(
        max_attempts=100, initial_backoff_s=0.05, max_backoff_s=0.05, total_timeout_s=0.12
    )
    store = Store(StoreConfig(root="memory://retries-timeout", retry=policy), engine=engine)
    uri = store.new_blob_uri(store.root.url)
    store.put(uri, [b"x" * 10])
    with pytest.raises(StoreIOError):
        store.read(uri, 0, 10)
    assert engine.calls <= 4


def test_missing_objects_are_not_retried() -> None:
    store, engine, _ = make_store(failures=0, fault="short")
    with pytest.raises(PayloadNotFoundError):
        store.read(store.new_blob_uri(store.root.url), 0, 10)
    assert engine.calls == 1
