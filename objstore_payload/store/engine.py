"""The small interface every storage engine implements.

An engine moves bytes for engine-level paths that the `Store` has already checked
against its root. It does not validate, merge ranges, retry or count: the store does
that once for every engine. Engines return per-block outcomes instead of raising, so
that one bad block does not discard a whole pass and only failed blocks are retried.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from objstore_payload.store.coalesce import Block

__all__ = [
    "DeleteOutcome",
    "Engine",
    "EngineWrapper",
    "InterruptedBody",
    "ReadOutcome",
    "RequestFailed",
    "interrupted",
    "scatter",
]

ReadOutcome = bytes | bytearray | memoryview | BaseException
"""The bytes of one block, or the exception that reading it raised."""


class InterruptedBody(OSError):
    """A response whose body stopped before its end (a connection cut mid-stream).

    HTTP clients retry failed requests (botocore's one retry layer), but not a body that
    breaks off after the response began; the store retries these, and short bodies, and
    nothing else, so a failure is never retried by two layers."""


class RequestFailed(OSError):
    """A whole request failed after the HTTP client's own retries (a DeleteObjects that
    kept answering 503, timing out...). Callers report it instead of sending it again:
    only errors the client cannot see (per-key errors inside a 200 answer) are worth a
    retry of their own."""


def request_failed(what: str, exc: BaseException) -> RequestFailed:
    """``exc`` wrapped as `RequestFailed`, cause kept."""
    error = RequestFailed(f"{what}: {exc!r}")
    error.__cause__ = exc
    return error


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause chain) is a response body cut off mid-stream, as
    aiohttp, urllib3, http.client and botocore report it."""
    # Only errors raised while reading a body: a connection that fails before the
    # response (reset, refused, timed out) is the HTTP client's to retry.
    names = {
        "ClientPayloadError",  # aiohttp: the payload broke off
        "ContentLengthError",  # aiohttp: fewer bytes than Content-Length
        "IncompleteReadError",  # botocore: the same, for a streaming body
        "ResponseStreamingError",  # botocore: the connection broke while streaming
        "AioReadTimeoutError",  # aiobotocore: the body stalled (a timeout before the
        # response comes as a plain ReadTimeoutError, which botocore retries)
    }
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, InterruptedBody) or type(seen).__name__ in names:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(slots=True)
class DeleteOutcome:
    """What a batched delete did: requests sent and the paths it could not delete."""

    requests: int = 0
    failed: list[tuple[str, BaseException]] = field(default_factory=list)


def scatter(outcome: ReadOutcome, targets: Sequence[memoryview] | None) -> ReadOutcome | int:
    """Scatter ``outcome`` over ``targets``; the bytes copied (or ``outcome`` untouched)."""
    if targets is None or isinstance(outcome, BaseException):
        return outcome
    data = memoryview(outcome)
    cursor = 0
    for view in targets:
        count = min(view.nbytes, data.nbytes - cursor)
        if count <= 0:
            break
        view[:count] = data[cursor : cursor + count]
        cursor += count
    return data.nbytes


class Engine(ABC):
    """Bytes in and out of one storage system, by engine-level path."""

    name: ClassVar[str]
    """Short name, shown in benchmarks and errors."""
    default_coalesce_gap: ClassVar[int]
    """Largest gap (bytes) worth fetching to save a request on this engine."""
    writes_whole: bool = False
    """Whether a `put` lands whole or not at all with nothing in between that could cut
    it short (local files: rename; memory): then the store skips its size check."""
    parallel_reads: ClassVar[bool] = True
    """Whether a read pass runs requests concurrently (used for capacity reporting)."""

    @abstractmethod
    def read_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        """Read every block in one pass; one outcome per block, in order. A block past
        the end of its object yields the bytes that exist (the store checks lengths)."""

    async def aread_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        """Async `read_blocks`. The default runs it in a worker thread."""
        return await asyncio.to_thread(self.read_blocks, blocks)

    def read_blocks_into(
        self, blocks: Sequence[Block], targets: Sequence[Sequence[memoryview] | None]
    ) -> list[ReadOutcome | int]:
        """Like `read_blocks`, but a block with targets has its bytes scattered over those
        views (their sizes add up to the block's) and yields the number of bytes read.

        The default reads and copies; engines that can read straight into memory
        (``preadv``) override it to save the copy.
        """
        return [scatter(o, t) for o, t in zip(self.read_blocks(blocks), targets, strict=True)]

    async def aread_blocks_into(
        self, blocks: Sequence[Block], targets: Sequence[Sequence[memoryview] | None]
    ) -> list[ReadOutcome | int]:
        """Async `read_blocks_into`."""
        outcomes = await self.aread_blocks(blocks)
        return [scatter(o, t) for o, t in zip(outcomes, targets, strict=True)]

    @abstractmethod
    def put(self, path: str, parts: Sequence[memoryview], size: int) -> None:
        """Write an object made of ``parts`` (``size`` bytes in all). When this returns the
        object is durable and complete; no reader ever sees part of it."""

    async def aput(self, path: str, parts: Sequence[memoryview], size: int) -> None:
        """Async `put`. The default runs it in a worker thread (off the event loop)."""
        await asyncio.to_thread(self.put, path, parts, size)

    @abstractmethod
    def delete(self, paths: Sequence[str]) -> DeleteOutcome:
        """Delete objects in as few requests as the system allows. A path that does not
        exist counts as deleted."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Paths of every object under the engine-level ``prefix`` (recursive)."""

    @abstractmethod
    def size(self, path: str) -> int:
        """Size of an object in bytes; `FileNotFoundError` when it does not exist."""

    def retryable(self, exc: BaseException) -> bool:
        """Whether the store should read a block again after ``exc``: by default only a
        body that broke off (`interrupted`), since HTTP clients retry everything else."""
        return interrupted(exc)

    def close(self) -> None:  # noqa: B027 - engines without resources need no close
        """Release connections, threads and descriptors."""


class EngineWrapper(Engine):
    """An engine that forwards everything to ``inner``; a subclass overrides only what it
    changes (the latency benchmark's delay, a test's injected faults). Reads forward
    through `read_blocks`, so overriding it alone changes every read."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    def read_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        # docstring inherited
        return self.inner.read_blocks(blocks)

    def put(self, path: str, parts: Sequence[memoryview], size: int) -> None:
        # docstring inherited
        self.inner.put(path, parts, size)

    def delete(self, paths: Sequence[str]) -> DeleteOutcome:
        # docstring inherited
        return self.inner.delete(paths)

    def list(self, prefix: str) -> list[str]:
        # docstring inherited
        return self.inner.list(prefix)

    def size(self, path: str) -> int:
        # docstring inherited
        return self.inner.size(path)

    def retryable(self, exc: BaseException) -> bool:
        # docstring inherited
        return self.inner.retryable(exc)

    def close(self) -> None:
        # docstring inherited
        self.inner.close()
