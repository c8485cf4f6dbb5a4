"""Prefetching and DataLoader worker processes (fork and spawn)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from objstore_payload import PayloadReader, ShortReadError, Store, StoreConfig  # noqa: E402
from objstore_payload.adapters.loader import MicroBatchDataset, PrefetchLoader, tensor_bytes  # noqa: E402
from objstore_payload.adapters.rollout import MicroBatch, prepare_batch  # noqa: E402
from objstore_payload.adapters.torch_tensors import PayloadTensors, micro_batch_tensors  # noqa: E402
from objstore_payload.store import RetryPolicy  # noqa: E402
from objstore_payload.testing.embedded_s3 import EmbeddedS3  # noqa: E402
from tests.adapters.helpers import SampleArrays  # noqa: E402


def samples(store: Store, count: int = 8, n: int = 64) -> list[MicroBatch]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(count):
        counts = np.zeros(n, np.int32)
        counts[n // 2 :] = rng.integers(1, 4, n - n // 2)
        ids = rng.integers(0, 1000, int(counts.sum()), dtype=np.int32)
        arrays = SampleArrays(
            rng.integers(0, 1000, n, dtype=np.int32),
            (np.arange(n) >= n // 2).astype(np.uint8),
            rng.integers(0, 64, (n, 4, 2)).astype(np.uint8),
            counts,
            ids,
            None,
            n // 3,
            (n // 2 + 5,),
        )
        out.append(arrays.by_segments(store, store.root.url))
    (rank0, _) = prepare_batch(out, seq_len=n, dp_size=2, pad_to_multiple_of=4)
    return rank0


def same(a: PayloadTensors, b: PayloadTensors) -> bool:
    for name, tensor in a.as_dict().items():
        other = b.as_dict()[name]
        if (tensor is None) != (other is None):
            return False
        if tensor is not None and other is not None and not torch.equal(tensor, other):
            return False
    return a.cp_windowed == b.cp_windowed


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Store]:
    with Store(StoreConfig(root=(tmp_path / "p").as_uri())) as store:
        yield store


def test_prefetch_yields_the_same_tensors_in_order(file_store: Store) -> None:
    micro_batches = samples(file_store)
    reader = PayloadReader(file_store)
    with PrefetchLoader(micro_batches, reader, cp_rank=1, cp_size=4, depth=2) as loader:
        got = list(loader)
    assert [mb for mb, _ in got] == micro_batches
    for mb, tensors in got:
        assert same(tensors, micro_batch_tensors(mb, cp_rank=1, cp_size=4, reader=reader))


class CountingReader(PayloadReader):
    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.started = 0
        self.lock = threading.Lock()

    def read_window(self, segments, windows):  # type: ignore[no-untyped-def]
        with self.lock:
            self.started += 1
        return super().read_window(segments, windows)


def test_prefetch_reads_ahead_at_most_depth(file_store: Store) -> None:
    micro_batches = samples(file_store, count=8)
    reader = CountingReader(file_store)
    loader = PrefetchLoader(micro_batches, reader, depth=2)
    iterator = iter(loader)
    next(iterator)
    time.sleep(0.3)  # let the background thread run as far as it may
    # one taken, two queued, one read done and waiting for room
    assert reader.started <= 1 + 2 + 1
    loader.close()


def test_prefetch_stops_at_the_byte_cap(file_store: Store) -> None:
    micro_batches = samples(file_store, count=8)
    reader = CountingReader(file_store)
    one = tensor_bytes(micro_batch_tensors(micro_batches[0], reader=PayloadReader(file_store)))
    loader = PrefetchLoader(micro_batches, reader, depth=8, max_bytes=one)
    iterator = iter(loader)
    time.sleep(0.3)
    assert reader.started == 1  # the first read fills the budget
    next(iterator)
    time.sleep(0.3)
    assert reader.started == 2
    assert loader.queued_bytes <= 2 * one
    loader.close()


def test_prefetch_raises_read_errors_in_the_caller(file_store: Store, tmp_path: Path) -> None:
    micro_batches = samples(file_store, count=3)
    for path in (tmp_path / "p").iterdir():
        path.write_bytes(b"")  # every blob truncated
    config = StoreConfig(root=file_store.root.url, retry=RetryPolicy(max_attempts=1))
    with Store(config) as broken, pytest.raises(ShortReadError):
        for _ in PrefetchLoader(micro_batches, PayloadReader(broken)):
            pass


def expected(micro_batches: Sequence[MicroBatch], store: Store) -> list[PayloadTensors]:
    reader = PayloadReader(store)
    return [micro_batch_tensors(mb, cp_rank=2, cp_size=4, reader=reader) for mb in micro_batches]


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("backend", ["file", "moto-server"])
def test_dataloader_workers_open_their_own_store(
    context: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "file":
        config = StoreConfig(root=(tmp_path / "p").as_uri())
    else:
        server: EmbeddedS3 = request.getfixturevalue("embedded_s3")
        server.ensure_bucket()
        config = StoreConfig(root=f"s3://{server.bucket}/loader-{context}", s3=server.s3_options())
    with Store(config) as store:
        micro_batches = samples(store, count=6)
        want = expected(micro_batches, store)  # the parent's store and s3fs loop exist now
        dataset = MicroBatchDataset(micro_batches, config, cp_rank=2, cp_size=4)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=2, multiprocessing_context=context
        )
        got = list(loader)
    assert len(got) == len(want)
    assert all(same(g, w) for g, w in zip(got, want, strict=True))


def test_prefetch_never_hangs_on_close_or_a_second_iteration(file_store: Store) -> None:
    micro_batches = samples(file_store, count=6)
    loader = PrefetchLoader(micro_batches, PayloadReader(file_store), depth=1)
    iterator = iter(loader)
    next(iterator)
    threading.Timer(0.2, loader.close).start()  # closed from another thread mid-iteration
    rest = list(iterator)
    assert len(rest) <= 5
    with pytest.raises(RuntimeError, match="iterated once"):
        iter(loader)
