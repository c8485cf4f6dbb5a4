"""Feeding a training loop: read the next micro batches' windows while the current one
trains, in a thread or in torch DataLoader worker processes.

`PrefetchLoader` reads at most ``depth`` micro batches ahead on a background thread and
stops starting reads while the tensors waiting for the caller exceed ``max_bytes``.
`MicroBatchDataset` serves the same tensors from DataLoader workers: it carries only a
`StoreConfig` and opens its store in the worker process, because storage clients (s3fs
instances, their event loop and sessions) must not cross a fork or be pickled.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Self

import torch
import torch.utils.data

from objstore_payload.adapters.rollout import MicroBatch, decode_micro_batch, encode_message
from objstore_payload.adapters.torch_tensors import MaskWidth, PayloadTensors, micro_batch_tensors
from objstore_payload.reader import PayloadReader
from objstore_payload.store.config import StoreConfig
from objstore_payload.store.store import Store

__all__ = ["MicroBatchDataset", "PrefetchLoader", "tensor_bytes"]

_DONE = object()


def tensor_bytes(tensors: PayloadTensors) -> int:
    """Bytes held by the tensors."""
    return sum(t.numel() * t.element_size() for t in tensors.as_dict().values() if t is not None)


class PrefetchLoader:
    """Iterate ``(micro_batch, tensors)`` for one CP rank, reading ahead in the background.

    The read of micro batch k + 1 (up to k + ``depth``) overlaps the caller's work on
    micro batch k, so a training step longer than a read waits for no I/O. Errors from
    the background reads are raised in the caller at the item they belong to.
    """

    def __init__(
        self,
        micro_batches: Iterable[MicroBatch],
        reader: PayloadReader | None,
        *,
        cp_rank: int = 0,
        cp_size: int = 1,
        depth: int = 2,
        max_bytes: int = 1 << 30,
        mask_width: MaskWidth = "micro_batch",
    ) -> None:
        if depth < 1 or max_bytes < 1:
            raise ValueError("depth and max_bytes must be positive")
        self._source = iter(micro_batches)
        self._reader = reader
        self._cp = (cp_rank, cp_size)
        self._mask_width: MaskWidth = mask_width
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._budget = threading.Condition()
        self._queued_bytes = 0
        self._max_bytes = max_bytes
        self._stop = threading.Event()
        self._started = False
        self._thread = threading.Thread(target=self._run, name="payload-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for micro_batch in self._source:
                with self._budget:
                    while self._queued_bytes >= self._max_bytes and not self._stop.is_set():
                        self._budget.wait(0.1)
                if self._stop.is_set():
                    return
                tensors = micro_batch_tensors(
                    micro_batch,
                    cp_rank=self._cp[0],
                    cp_size=self._cp[1],
                    reader=self._reader,
                    mask_width=self._mask_width,
                )
                size = tensor_bytes(tensors)
                with self._budget:
                    self._queued_bytes += size
                self._put((micro_batch, tensors, size))
        except BaseException as exc:  # handed to the caller, raised there
            self._put(exc)
        finally:
            self._put(_DONE)

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[tuple[MicroBatch, PayloadTensors]]:
        if self._started:
            raise RuntimeError("a PrefetchLoader is iterated once; make a new one per epoch")
        self._started = True
        return self._items()

    def _items(self) -> Iterator[tuple[MicroBatch, PayloadTensors]]:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():  # closed while waiting
                    return
                continue
            if item is _DONE or self._stop.is_set():
                return
            if isinstance(item, BaseException):
                self.close()
                raise item
            micro_batch, tensors, size = item
            with self._budget:
                self._queued_bytes -= size
                self._budget.notify_all()
            yield micro_batch, tensors

    @property
    def queued_bytes(self) -> int:
        """Bytes of tensors read and not yet taken by the caller."""
        return self._queued_bytes

    def close(self) -> None:
        """Stop reading ahead (a read in flight finishes and is dropped); an iteration
        waiting for the next item ends."""
        self._stop.set()
        with self._budget:
            self._budget.notify_all()
        while True:  # unblock the reader thread if it waits for room in the queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=30)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class MicroBatchDataset(torch.utils.data.Dataset[PayloadTensors]):
    """Micro batches for one CP rank as a map-style dataset for ``torch.utils.data``.

    Picklable under spawn: it holds the micro batches as msgpack and the store's config;
    each worker process opens its own store on first use.
    """

    def __init__(
        self,
        micro_batches: Sequence[MicroBatch],
        store_config: StoreConfig,
        *,
        cp_rank: int = 0,
        cp_size: int = 1,
        mask_width: MaskWidth = "micro_batch",
    ) -> None:
        self._messages = [encode_message(mb) for mb in micro_batches]
        self._config = store_config
        self._cp = (cp_rank, cp_size)
        self._mask_width: MaskWidth = mask_width
        self._store: Store | None = None

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, index: int) -> PayloadTensors:
        micro_batch = decode_micro_batch(self._messages[index])
        if self._store is None:
            self._store = Store(self._config)
        return micro_batch_tensors(
            micro_batch,
            cp_rank=self._cp[0],
            cp_size=self._cp[1],
            reader=PayloadReader(self._store),
            mask_width=self._mask_width,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None  # storage clients never travel between processes
        return state
