"""`Store`: one storage root, its engine, and the rules every engine shares.

The store checks every URI against its root before any I/O, merges nearby ranges of one
object, issues one concurrent pass per call, retries short or failed ranges within one
budget, raises typed errors that name the URI, offset and byte counts, and counts what
it sent. Sync methods serve trainers; ``a``-prefixed twins serve event loops (the vLLM
API server) and never block them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NoReturn, Self

from objstore_payload.errors import (
    InvalidSegmentError,
    PayloadError,
    PayloadNotFoundError,
    ShortReadError,
    StoreConfigError,
    StoreIOError,
)
from objstore_payload.store.coalesce import Block, CoalescePolicy, coalesce
from objstore_payload.store.config import StoreConfig
from objstore_payload.store.engine import Engine, ReadOutcome, scatter
from objstore_payload.store.root import StoreRoot

__all__ = ["DeleteReport", "RequestRecord", "Store", "StoreStats", "open_store"]

BLOB_SUFFIX = ".bin"
"""Errors that another attempt cannot fix; everything else (timeouts, resets, 5xx, short
bodies) is retried within the budget."""


@dataclass(slots=True)
class StoreStats:
    """Counters of what a store sent to storage (after merging and retries)."""

    get_requests: int = 0
    """Ranged reads issued (one per merged block per attempt)."""
    bytes_fetched: int = 0
    """Bytes that came back from storage, gaps included."""
    bytes_requested: int = 0
    """Bytes callers asked for (no gaps, no retries)."""
    put_requests: int = 0
    bytes_written: int = 0
    delete_requests: int = 0
    keys_deleted: int = 0
    retries: int = 0
    """Ranges read again after a short or failed read."""

    def snapshot(self) -> StoreStats:
        """A copy of the current counters."""
        return StoreStats(*(getattr(self, f) for f in self.__slots__))

    def reset(self) -> None:
        """Set every counter to zero."""
        for name in self.__slots__:
            setattr(self, name, 0)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request sent to storage, kept when ``record_requests=True``."""

    op: str
    path: str
    start: int = 0
    end: int = 0


@dataclass(slots=True)
class DeleteReport:
    """What `Store.delete` did."""

    requests: int = 0
    deleted: int = 0
    failed: list[tuple[str, BaseException]] = field(default_factory=list)


def _build_engine(config: StoreConfig, root: StoreRoot) -> Engine:
    choice = config.engine
    if root.protocol == "file":
        if choice not in ("auto", "local"):
            # fsspec's local filesystem follows symlinks and writes in place; the local
            # engine keeps reads inside the root and writes atomic and durable.
            raise StoreConfigError(f"file:// roots use the local engine, not {choice!r}")
        from objstore_payload.store.local import LocalEngine

        return LocalEngine(
            root.fs_root,
            threads=config.read.local_threads,
            open_files=config.read.local_open_files,
        )
    if choice == "local":
        raise StoreConfigError(f"engine 'local' serves file:// roots only, not {root.url}")
    if root.is_s3:
        if choice == "obstore":
            return _obstore_engine(config)
        if choice == "boto3":
            from objstore_payload.store.s3 import Boto3Engine, make_boto3_client

            return Boto3Engine(
                make_boto3_client(config.s3), max_concurrency=config.read.max_concurrency
            )
        from objstore_payload.store.fsspec_engine import S3FsspecEngine
        from objstore_payload.store.s3 import make_s3fs

        return S3FsspecEngine(make_s3fs(config.s3), max_concurrency=config.read.max_concurrency)
    if choice in ("boto3", "obstore"):
        raise StoreConfigError(f"engine {choice!r} serves s3:// roots only, not {root.url}")
    import fsspec

    from objstore_payload.store.fsspec_engine import FsspecEngine

    try:
        fs = fsspec.filesystem(root.protocol, **config.storage_options)
    except (ImportError, ValueError, TypeError) as exc:
        raise StoreConfigError(f"cannot open an fsspec filesystem for {root.url}: {exc}") from exc
    return FsspecEngine(fs, max_concurrency=config.read.max_concurrency)


def _obstore_engine(config: StoreConfig) -> Engine:
    # obstore is an optional extra: without it, say how to get it rather than fail on
    # an import deep inside the first read.
    try:
        import obstore  # noqa: F401
    except ImportError as exc:
        raise StoreConfigError(
            "engine 'obstore' needs obstore: pip install 'objstore-payload[obstore]'"
        ) from exc
    from objstore_payload.store.obstore_engine import ObstoreEngine

    return ObstoreEngine(config.s3, max_concurrency=config.read.max_concurrency)


_CHECKED_URIS = 1 << 16


class Store:
    """A storage root with its engine. Thread-safe; close it (or use ``with``) when done."""

    def __init__(
        self,
        config: StoreConfig | str,
        *,
        engine: Engine | None = None,
        record_requests: bool = False,
    ) -> None:
        self.config = StoreConfig(root=config) if isinstance(config, str) else config
        self.root = StoreRoot.parse(self.config.root)
        self.stats = StoreStats()
        self.requests: list[RequestRecord] | None = [] if record_requests else None
        self._own_engine = engine is None
        self._engine = engine
        self._engine_pid = os.getpid()
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._checked: dict[str, str] = {}

    # -- engine ---------------------------------------------------------------------
    def _engine_is_current(self) -> bool:
        return self._engine is not None and (
            not self._own_engine or self._engine_pid == os.getpid()
        )

    @property
    def engine(self) -> Engine:
        """The storage engine, built on first use and rebuilt after a fork (s3fs and
        its event loop must not be shared with a forked DataLoader worker)."""
        if self._engine_pid != os.getpid():
            # A fork may have copied the locks while another thread held them.
            self._lock = threading.Lock()
            self._stats_lock = threading.Lock()
            inherited = self._engine if self._own_engine else None
            after_fork = getattr(inherited, "after_fork", None)
            if after_fork is not None:  # the parent's cached descriptors, copied by fork
                after_fork()
        with self._lock:
            if not self._engine_is_current():
                self._engine = _build_engine(self.config, self.root)
                self._engine_pid = os.getpid()
            assert self._engine is not None
            return self._engine

    async def aengine(self) -> Engine:
        """`engine` for event loops: building a client takes ~100-200 ms, so the first
        call builds it in a worker thread instead of on the loop."""
        if self._engine_is_current():
            assert self._engine is not None
            return self._engine
        return await asyncio.to_thread(lambda: self.engine)

    def _policy(self, engine: Engine) -> CoalescePolicy:
        gap = self.config.read.coalesce_gap
        return CoalescePolicy(
            max_gap=engine.default_coalesce_gap if gap is None else gap,
            max_block=self.config.read.max_block,
        )

    @property
    def coalesce_policy(self) -> CoalescePolicy:
        """The range-merging policy of this store."""
        return self._policy(self.engine)

    def _count(self, **increments: int) -> None:
        with self._stats_lock:
            for name, value in increments.items():
                setattr(self.stats, name, getattr(self.stats, name) + value)

    # -- names ----------------------------------------------------------------------
    def check_uri(self, uri: str) -> str:
        """The engine-level path of ``uri``; `UriNotAllowedError` unless it is a plain key
        under this store's root."""
        path = self._checked.get(uri) if type(uri) is str else None
        if path is None:
            # A pure function of the URI: a window read checks each blob's URI several
            # times (plan, each pass), so accepted ones are remembered (bounded).
            path = self.root.fs_path(self.root.relative_key(uri))
            if len(self._checked) >= _CHECKED_URIS:
                self._checked.clear()
            self._checked[uri] = path
        return path

    def new_blob_uri(self, destination: str) -> str:
        """A fresh ``<destination>/<uuid>.bin`` URI; ``destination`` must be this root or a
        prefix under it (e.g. ``<root>/v7``)."""
        prefix = self.root.relative_prefix(destination)
        name = uuid.uuid4().hex + BLOB_SUFFIX
        return self.root.uri(f"{prefix}/{name}" if prefix else name)

    def version_prefix(self, version: int) -> str:
        """``<root>/v<version>``: where rollouts dispatched at policy ``version`` write."""
        if type(version) is not int or version < 0:
            raise ValueError(f"policy version must be a non-negative int, got {version!r}")
        return f"{self.root.url}/v{version}"

    # -- reads ----------------------------------------------------------------------
    def _record(self, op: str, blocks: Sequence[Block]) -> None:
        self._count(get_requests=len(blocks))
        if self.requests is not None:
            self.requests.extend(RequestRecord(op, b.path, b.start, b.end) for b in blocks)

    def read_ranges(
        self,
        ranges: Sequence[tuple[str, int, int]],
        *,
        into: Sequence[memoryview | None] | None = None,
    ) -> list[memoryview]:
        """Bytes ``[start, end)`` of each ``(uri, start, end)``, in order, in one pass.

        Every URI is checked before any I/O. Nearby ranges of one object are merged;
        short or failed ranges are retried per `RetryPolicy`; then `ShortReadError`,
        `PayloadNotFoundError` or `StoreIOError` is raised.

        ``into`` optionally gives a writable, C-contiguous destination per range (exactly
        its size) or None: those ranges land there and their view is the destination.
        Engines that can (local files: ``preadv``) read straight into destinations, with
        no intermediate buffer.
        """
        engine = self.engine
        read = _ReadPass(self, ranges, into, engine)
        while (batch := read.next_batch()) is not None:
            delay = read.settle(engine.read_blocks_into(*batch))
            if delay:
                time.sleep(delay)
        return read.views()

    async def aread_ranges(
        self,
        ranges: Sequence[tuple[str, int, int]],
        *,
        into: Sequence[memoryview | None] | None = None,
    ) -> list[memoryview]:
        """Async `read_ranges`: same checks, merging, retries and errors."""
        engine = await self.aengine()
        read = _ReadPass(self, ranges, into, engine)
        while (batch := read.next_batch()) is not None:
            delay = read.settle(await engine.aread_blocks_into(*batch))
            if delay:
                await asyncio.sleep(delay)
        return read.views()

    def read(self, uri: str, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` of one object."""
        return self.read_ranges([(uri, start, end)])[0]

    # -- writes ---------------------------------------------------------------------
    def _before_put(self, uri: str, size: int) -> str:
        path = self.check_uri(uri)
        if self.requests is not None:
            self.requests.append(RequestRecord("put", path, 0, size))
        return path

    def put(self, uri: str, parts: Sequence[memoryview | bytes], size: int | None = None) -> None:
        """Write an object; durable and atomic when this returns. On object stores the
        stored size is checked (`StoreConfig.verify_writes`) and a short object uploaded
        again, within the retry policy."""
        views = [memoryview(p) for p in parts]
        total = sum(v.nbytes for v in views) if size is None else size
        path = self._before_put(uri, total)
        with _write_errors(uri, total):
            engine = self.engine
        upload = _Upload(self, uri, path, total, engine)
        while True:
            with _write_errors(uri, total):
                engine.put(path, views, total)
                stored = engine.size(path) if upload.verify else total
            delay = upload.settle(stored)
            if delay is None:
                break
            time.sleep(delay)
        self._count(put_requests=upload.attempts, bytes_written=total)

    async def aput(
        self, uri: str, parts: Sequence[memoryview | bytes], size: int | None = None
    ) -> None:
        """Async `put`, off the event loop."""
        views = [memoryview(p) for p in parts]
        total = sum(v.nbytes for v in views) if size is None else size
        path = self._before_put(uri, total)
        with _write_errors(uri, total):
            engine = await self.aengine()
        upload = _Upload(self, uri, path, total, engine)
        while True:
            with _write_errors(uri, total):
                await engine.aput(path, views, total)
                stored = await asyncio.to_thread(engine.size, path) if upload.verify else total
            delay = await asyncio.to_thread(upload.settle, stored)  # it may delete
            if delay is None:
                break
            await asyncio.sleep(delay)
        self._count(put_requests=upload.attempts, bytes_written=total)

    # -- housekeeping ---------------------------------------------------------------
    def size(self, uri: str) -> int:
        """Size in bytes of the object at ``uri``."""
        path = self.check_uri(uri)
        if self.requests is not None:
            self.requests.append(RequestRecord("head", path))
        try:
            return self.engine.size(path)
        except FileNotFoundError as exc:
            raise PayloadNotFoundError(f"payload blob {uri} does not exist") from exc
        except PayloadError:
            raise
        except Exception as exc:
            raise StoreIOError(f"cannot stat {uri}: {exc!r}") from exc

    def list(self, prefix: str | None = None) -> list[str]:
        """URIs of every object under ``prefix`` (default: the whole root)."""
        key = self.root.relative_prefix(prefix if prefix is not None else self.root.url)
        path = self.root.fs_path(key) if key else self.root.fs_root
        if self.requests is not None:
            self.requests.append(RequestRecord("list", path))
        try:
            found = self.engine.list(path)
        except PayloadError:
            raise
        except Exception as exc:
            raise StoreIOError(f"cannot list {prefix or self.root.url}: {exc!r}") from exc
        head = self.root.fs_root.rstrip("/") + "/"
        return [self.root.url + "/" + p[len(head) :] for p in found if p.startswith(head)]

    def delete(self, uris: Sequence[str]) -> DeleteReport:
        """Delete objects in batches (S3: DeleteObjects, 1,000 keys per request); per-key
        failures are returned, not dropped. Missing objects count as deleted."""
        paths = [self.check_uri(uri) for uri in uris]
        if not paths:
            return DeleteReport()
        if self.requests is not None:
            self.requests.extend(RequestRecord("delete", p) for p in paths)
        try:
            outcome = self.engine.delete(paths)
        except PayloadError:
            raise
        except Exception as exc:
            raise StoreIOError(f"deleting {len(paths)} objects failed: {exc!r}") from exc
        self._count(delete_requests=outcome.requests, keys_deleted=len(paths) - len(outcome.failed))
        return DeleteReport(
            requests=outcome.requests,
            deleted=len(paths) - len(outcome.failed),
            failed=outcome.failed,
        )

    def close(self) -> None:
        """Release the engine's connections, threads and descriptors."""
        with self._lock:
            if self._engine is not None and self._own_engine:
                self._engine.close()
                self._engine = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.root.url!r}, engine={self.config.engine!r})"


@contextlib.contextmanager
def _write_errors(uri: str, total: int) -> Iterator[None]:
    """Package errors pass through; any other becomes `StoreIOError` naming the write."""
    try:
        yield
    except PayloadError:
        raise
    except Exception as exc:
        raise StoreIOError(f"writing {uri} ({total} bytes) failed: {exc!r}") from exc


class _Upload:
    """One `Store.put` across attempts: whether the stored size is checked, and what to
    do when it is short (shared by the sync and async writes)."""

    def __init__(self, store: Store, uri: str, path: str, total: int, engine: Engine) -> None:
        self._store, self._uri, self._path, self._total = store, uri, path, total
        self._engine = engine
        self.verify = store.config.verify_writes and not engine.writes_whole
        self.attempts = 0
        self._retry = store.config.retry
        self._deadline = time.monotonic() + self._retry.total_timeout_s

    def settle(self, stored: int) -> float | None:
        """None when the object is whole; else the delay before uploading again (the
        short object is deleted first where the credentials allow), or `StoreIOError`
        once the retry budget is spent. No segment ever names a short object."""
        self.attempts += 1
        if stored == self._total:
            return None
        try:
            outcome = self._engine.delete([self._path])
            removed: BaseException | None = outcome.failed[0][1] if outcome.failed else None
        except Exception as exc:  # a writer may lack s3:DeleteObject (the Terraform one does)
            removed = exc
        delay = self._retry.delay(self.attempts)
        if self.attempts >= self._retry.max_attempts or time.monotonic() + delay > self._deadline:
            fate = (
                "removed"
                if removed is None
                else f"could not remove it ({removed!r}): the collector's version backstop "
                "and the bucket lifecycle rule will"
            )
            raise StoreIOError(
                f"writing {self._uri}: the store kept {stored} of {self._total} bytes, "
                f"{self.attempts} times; {fate}"
            ) from removed
        self._store._count(retries=1)
        return delay


class _ReadPass:
    """The state of one `Store.read_ranges` call across attempts: the merged blocks,
    where each block's bytes go, what came back, what must be read again, and the retry
    budget (shared by the sync and async reads, which only differ in how they wait)."""

    def __init__(
        self,
        store: Store,
        ranges: Sequence[tuple[str, int, int]],
        into: Sequence[memoryview | None] | None,
        engine: Engine,
    ) -> None:
        self._store = store
        self._engine = engine
        policy = store._policy(engine)
        self.uri_of_path: dict[str, str] = {}
        resolved = []
        for uri, start, end in ranges:
            if type(start) is not int or type(end) is not int or not 0 <= start <= end:
                raise InvalidSegmentError(f"invalid byte range [{start!r}, {end!r}) of {uri!r}")
            path = store.check_uri(uri)
            self.uri_of_path[path] = uri
            resolved.append((path, start, end))
        if into is not None and len(into) != len(resolved):
            raise ValueError(f"{len(into)} destinations for {len(resolved)} ranges")
        self.blocks, self.pieces = coalesce(resolved, policy)
        store._count(bytes_requested=sum(end - start for _, start, end in resolved))
        self.into = (
            [_byte_view(d, r) for d, r in zip(into, resolved, strict=True)] if into else None
        )
        self.targets = self._targets()
        self.results: list[ReadOutcome | int | None] = [None] * len(self.blocks)
        self.failures: dict[int, ReadOutcome | int] = {}
        self.todo = list(range(len(self.blocks)))
        self._retry = store.config.retry
        self._deadline = time.monotonic() + self._retry.total_timeout_s
        self._attempt = 0

    def _targets(self) -> list[list[memoryview] | None]:
        """Per block: the views its bytes are scattered into, or None to get the bytes
        back. A block gets views when at least one of its ranges has a destination and
        none of its ranges overlap (one scatter cannot serve overlapping ranges): its
        destinations, a private buffer for each range without one, and throwaway scratch
        for the merged gaps."""
        targets: list[list[memoryview] | None] = [None] * len(self.blocks)
        self.buffers: dict[int, memoryview] = {}
        if self.into is None:
            return targets
        members: dict[int, list[int]] = {}
        for index, piece in enumerate(self.pieces):
            if piece.size:
                members.setdefault(piece.block, []).append(index)
        scratch = memoryview(bytearray(0))
        for block_index, indexes in members.items():
            if all(self.into[i] is None for i in indexes):
                continue
            indexes.sort(key=lambda i: self.pieces[i].offset)
            views: list[memoryview] = []
            own: dict[int, memoryview] = {}
            cursor = 0
            for i in indexes:
                piece = self.pieces[i]
                if piece.offset < cursor:
                    break
                if piece.offset > cursor:
                    gap = piece.offset - cursor
                    if scratch.nbytes < gap:
                        scratch = memoryview(bytearray(gap))
                    views.append(scratch[:gap])
                dest = self.into[i]
                if dest is None:
                    dest = own[i] = memoryview(bytearray(piece.size))
                views.append(dest)
                cursor = piece.offset + piece.size
            else:
                targets[block_index] = views
                self.buffers.update(own)
        return targets

    def next_batch(self) -> tuple[list[Block], list[list[memoryview] | None]] | None:
        """The blocks still to read and their targets (counted as sent), or None when
        every block came back whole."""
        if not self.todo:
            return None
        self._attempt += 1
        blocks = [self.blocks[i] for i in self.todo]
        self._store._record("get", blocks)
        return blocks, [self.targets[i] for i in self.todo]

    def settle(self, outcomes: Sequence[ReadOutcome | int]) -> float:
        """File the outcomes of one attempt and keep the blocks worth another; return the
        delay before that attempt (0 when done), or raise once the budget is spent."""
        again = []
        for index, outcome in zip(self.todo, outcomes, strict=True):
            block = self.blocks[index]
            if isinstance(outcome, BaseException):
                uri = self.uri_of_path[block.path]
                if isinstance(outcome, PayloadError):
                    raise outcome
                if isinstance(outcome, FileNotFoundError):
                    raise PayloadNotFoundError(
                        f"payload blob {uri} does not exist (reading bytes "
                        f"[{block.start}, {block.end}))"
                    ) from outcome
                if not self._engine.retryable(outcome):
                    # The engine's client already retried this request (botocore's one
                    # retry layer); retrying here again would stack retries on retries.
                    raise StoreIOError(
                        f"reading {uri} bytes [{block.start}, {block.end}) failed: {outcome!r}"
                    ) from outcome
                self.failures[index] = outcome
                again.append(index)
                continue
            targets = self.targets[index]
            if targets is not None and not isinstance(outcome, int):
                copied = scatter(outcome, targets)  # an engine that ignored the targets
                assert isinstance(copied, int)
                outcome = copied
            received = outcome if isinstance(outcome, int) else len(outcome)
            self._store._count(bytes_fetched=received)
            if received == block.size:
                self.results[index] = outcome
                self.failures.pop(index, None)
            else:
                self.failures[index] = outcome
                again.append(index)
        self.todo = again
        if not again:
            return 0.0
        delay = self._retry.delay(self._attempt)
        if self._attempt >= self._retry.max_attempts or time.monotonic() + delay > self._deadline:
            self.give_up(self._attempt)
        self._store._count(retries=len(again))
        return delay

    def give_up(self, attempts: int) -> NoReturn:
        """Raise the error of the first block that never came back whole."""
        index, outcome = next(iter(self.failures.items()))
        block = self.blocks[index]
        uri = self.uri_of_path[block.path]
        if isinstance(outcome, BaseException):
            raise StoreIOError(
                f"reading {uri} bytes [{block.start}, {block.end}) failed after {attempts} "
                f"attempts: {outcome!r}"
            ) from outcome
        received = outcome if isinstance(outcome, int) else len(outcome)
        raise ShortReadError(uri, block.start, block.size, received)

    def views(self) -> list[memoryview]:
        """One view per asked-for range, in order (the destination where one was given)."""
        empty = memoryview(b"")
        out = []
        for index, piece in enumerate(self.pieces):
            dest = self.into[index] if self.into is not None else None
            if not piece.size:
                out.append(dest if dest is not None else empty)
                continue
            if self.targets[piece.block] is not None:
                out.append(dest if dest is not None else self.buffers[index])
                continue
            result = self.results[piece.block]
            assert result is not None
            assert not isinstance(result, (int, BaseException))
            view = memoryview(result)[piece.offset : piece.offset + piece.size]
            if dest is not None:
                dest[:] = view
                view = dest
            out.append(view)
        return out


def _byte_view(dest: memoryview | None, resolved: tuple[str, int, int]) -> memoryview | None:
    """``dest`` as a flat writable byte view of exactly the range's size."""
    if dest is None:
        return None
    view = memoryview(dest)
    if view.readonly or not view.c_contiguous:
        raise ValueError("read destinations must be writable and C-contiguous")
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    _, start, end = resolved
    if view.nbytes != end - start:
        raise ValueError(f"destination of {view.nbytes} bytes for a range of {end - start}")
    return view


def open_store(root: str | StoreConfig, **options: Any) -> Store:
    """A `Store` for ``root`` (a URL or a full `StoreConfig`); keyword ``options`` are
    `StoreConfig` fields, e.g. ``s3={"endpoint_url": ..., "addressing_style": "path"}``."""
    if isinstance(root, StoreConfig):
        if options:
            raise TypeError("pass options inside the StoreConfig")
        return Store(root)
    return Store(StoreConfig.from_mapping({"root": root, **options}))
