"""Any fsspec filesystem (s3fs for S3, memory, gcsfs, adlfs...): the universal engine.

Async filesystems (s3fs) run every request on the filesystem's own event loop thread
(fsspec's ``fsspecIO``), up to ``max_concurrency`` at once; the sync API blocks on that
loop and the async API awaits it from any other loop (vLLM's, a trainer's), so s3fs's
aiohttp sessions never cross loops. Sync filesystems (memory) are read in a loop in the
calling thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

import fsspec.asyn

from objstore_payload.store.coalesce import Block
from objstore_payload.store.engine import DeleteOutcome, Engine, ReadOutcome, request_failed

__all__ = ["FsspecEngine", "S3FsspecEngine"]

_T = TypeVar("_T")
DELETE_BATCH = 1000
"""S3 DeleteObjects takes at most 1,000 keys per request."""


class FsspecEngine(Engine):
    """An engine over one fsspec filesystem instance."""

    name: ClassVar[str] = "fsspec"
    default_coalesce_gap: ClassVar[int] = 256 << 10

    def __init__(self, fs: Any, *, max_concurrency: int = 64) -> None:
        self.fs = fs
        self._max_concurrency = max_concurrency
        self._async = bool(getattr(fs, "async_impl", False))
        self._in_memory = _is_in_memory(fs)
        self.writes_whole = self._in_memory  # no upload to cut short
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- running coroutines on the filesystem's loop -------------------------------
    def _sync(self, coro: Coroutine[Any, Any, _T]) -> _T:
        result: _T = fsspec.asyn.sync(self.fs.loop, lambda: coro)
        return result

    async def _on_fs_loop(self, coro: Coroutine[Any, Any, _T]) -> _T:
        future = asyncio.run_coroutine_threadsafe(coro, self.fs.loop)
        return await asyncio.wrap_future(future)

    async def _gather_reads(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        semaphore = asyncio.Semaphore(self._max_concurrency)

        async def one(block: Block) -> ReadOutcome:
            async with semaphore:
                try:
                    data: bytes = await self.fs._cat_file(
                        block.path, start=block.start, end=block.end
                    )
                    return data
                except Exception as exc:
                    return b"" if _is_invalid_range(exc) else exc

        return list(await asyncio.gather(*(one(b) for b in blocks)))

    # -- Engine --------------------------------------------------------------------
    def read_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        # docstring inherited
        if not blocks:
            return []
        if self._async:
            return self._sync(self._gather_reads(blocks))
        if self._in_memory or len(blocks) == 1:
            return [self._read_one(block) for block in blocks]
        # Other sync filesystems (sftp, hdfs...) wait on the network per read.
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self._max_concurrency, thread_name_prefix="payload-fsspec"
                )
        return list(self._pool.map(self._read_one, blocks))

    def _read_one(self, block: Block) -> ReadOutcome:
        try:
            data: bytes = self.fs.cat_file(block.path, start=block.start, end=block.end)
            return data
        except Exception as exc:
            return exc

    async def aread_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        # docstring inherited
        if not blocks:
            return []
        if self._async:
            return await self._on_fs_loop(self._gather_reads(blocks))
        if self._in_memory:
            return self.read_blocks(blocks)
        return await super().aread_blocks(blocks)

    def put(self, path: str, parts: Sequence[memoryview], size: int) -> None:
        # docstring inherited
        data = b"".join(parts)
        if self._async:
            self._sync(self.fs._pipe_file(path, data))
        else:
            self.fs.pipe_file(path, data)

    async def aput(self, path: str, parts: Sequence[memoryview], size: int) -> None:
        # docstring inherited
        if self._async:
            data = await asyncio.to_thread(b"".join, parts)
            await self._on_fs_loop(self.fs._pipe_file(path, data))
        else:
            await super().aput(path, parts, size)

    def delete(self, paths: Sequence[str]) -> DeleteOutcome:
        # docstring inherited
        outcome = DeleteOutcome()
        for path in paths:
            outcome.requests += 1
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass
            except Exception as exc:
                outcome.failed.append((path, exc))
        return outcome

    def list(self, prefix: str) -> list[str]:
        # docstring inherited
        try:
            found: list[str] = self.fs.find(prefix)
        except FileNotFoundError:
            return []
        return sorted(found)

    def size(self, path: str) -> int:
        # docstring inherited
        return int(self.fs.size(path))

    def close(self) -> None:
        # docstring inherited
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        creator = getattr(self.fs, "_s3creator", None)
        if self._async and creator is not None:
            # s3fs keeps an aiohttp session per instance; close it on its own loop.
            with contextlib.suppress(Exception):
                fsspec.asyn.sync(self.fs.loop, creator.__aexit__, None, None, None, timeout=5)
            self.fs._s3 = None
            self.fs._s3creator = None


def _is_in_memory(fs: Any) -> bool:
    return "memory" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def delete_batches(paths: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """``(bucket, keys)`` per DeleteObjects request: engine paths (``bucket/key``) grouped
    by bucket, at most `DELETE_BATCH` keys each (shared by every S3 engine)."""
    by_bucket: dict[str, list[str]] = {}
    for path in paths:
        bucket, _, key = path.partition("/")
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
        for i in range(0, len(keys), DELETE_BATCH):
            yield bucket, keys[i : i + DELETE_BATCH]


def per_key_delete_errors(bucket: str, response: Mapping[str, Any]) -> list[tuple[str, OSError]]:
    """The keys a DeleteObjects answer refused one by one (its ``Errors``), as failures."""
    return [
        (f"{bucket}/{error.get('Key')}", OSError(f"{error.get('Code')}: {error.get('Message')}"))
        for error in response.get("Errors", [])
    ]


def _key_prefix(prefix: str) -> str:
    """A ListObjectsV2 prefix for a folder-like ``prefix`` ("" lists the whole bucket)."""
    return prefix.rstrip("/") + "/" if prefix.strip("/") else ""


def _is_invalid_range(exc: BaseException) -> bool:
    """Whether an S3 error says the range starts past the end of the object (416); the
    store then sees a short read and reports it with byte counts."""
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "InvalidRange" or status == 416:
                return True
        seen = seen.__cause__
    return False


class S3FsspecEngine(FsspecEngine):
    """s3fs, with deletes batched through DeleteObjects and every per-key error checked
    (s3fs's own bulk delete sends ``Quiet`` and ignores the errors it reports), and
    listings through ListObjectsV2 alone (s3fs's ``find`` sends a HEAD when a prefix is
    empty, which a collector allowed only to list and delete is refused)."""

    name: ClassVar[str] = "s3fs"

    async def _list(self, prefix: str) -> list[str]:
        bucket, _, key_prefix = prefix.partition("/")
        found: list[str] = []
        token: str | None = None
        while True:
            kwargs = {"Bucket": bucket, "Prefix": _key_prefix(key_prefix)}
            if token:
                kwargs["ContinuationToken"] = token
            page = await self.fs._call_s3("list_objects_v2", **kwargs)
            found.extend(f"{bucket}/{item['Key']}" for item in page.get("Contents", []))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return sorted(found)

    def list(self, prefix: str) -> list[str]:
        # docstring inherited
        return self._sync(self._list(prefix))

    def delete(self, paths: Sequence[str]) -> DeleteOutcome:
        # docstring inherited
        return self._sync(self._delete(paths))

    async def _delete(self, paths: Sequence[str]) -> DeleteOutcome:
        outcome = DeleteOutcome()
        for bucket, batch in delete_batches(paths):
            outcome.requests += 1
            try:
                response = await self.fs._call_s3(
                    "delete_objects",
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except Exception as exc:
                error = request_failed(f"DeleteObjects on {bucket}", exc)
                outcome.failed.extend((f"{bucket}/{k}", error) for k in batch)
                continue
            outcome.failed.extend(per_key_delete_errors(bucket, response))
        self.fs.invalidate_cache()
        return outcome
