"""``bench load``: many concurrent writers and readers against one S3 server.

64 writer tasks each write blobs (routing and masks of 200-2,000 tokens, derived from a
per-blob seed so any reader can tell what the bytes must be) and hand their segments to
8 reader tasks, which read every blob back by windows and compare with what the seed
says, all through one store's async API on one event loop, as an inference server and a
trainer rank do. The run stops after ``duration_s`` or ``max_writes`` blobs, whichever
comes first, then every blob not read yet is read. Reported: blobs written, read,
lost (written but not readable) and corrupt (read but different), request rates, the
process's RSS before, at its peak and after, and open descriptors before and after
closing the store (they must be equal: no leaked sockets or files).
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Report
from objstore_payload.errors import PayloadError
from objstore_payload.reader import FieldWindow, PayloadReader
from objstore_payload.segment import Segment
from objstore_payload.store.config import StoreConfig
from objstore_payload.store.store import Store
from objstore_payload.writer import PayloadWriter, RequestArrays

__all__ = ["LoadResult", "run", "run_load"]

LAYERS, TOP_K, EXPERTS = 48, 8, 128


def blob_arrays(seed: int) -> RequestArrays:
    """The arrays of blob ``seed`` (the same for writer and reader)."""
    rng = np.random.default_rng(seed)
    prompt = int(rng.integers(100, 1_500))
    completion = int(rng.integers(100, 500))
    counts = (1 + rng.poisson(0.7, completion)).astype(np.int32)
    return RequestArrays(
        prompt_len=prompt,
        completion_len=completion,
        routed_experts=rng.integers(0, EXPERTS, (prompt + completion - 1, LAYERS, TOP_K), np.uint8),
        sampling_mask=(counts, rng.integers(0, 150_000, int(counts.sum()), dtype=np.int32)),
        num_experts=EXPERTS,
    )


def _matches(arrays: RequestArrays, routing: np.ndarray | None, mask: np.ndarray | None) -> bool:
    counts, ids = arrays.sampling_mask  # type: ignore[misc]
    if routing is None or mask is None:
        return False
    if not np.array_equal(routing, np.asarray(arrays.routed_experts)):
        return False
    return bool(
        np.array_equal((mask >= 0).sum(axis=1), counts) and np.array_equal(mask[mask >= 0], ids)
    )


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def open_descriptors() -> dict[str, str]:
    """Descriptors this process holds and what they point at (empty without /proc)."""
    found = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return {}
    for name in names:
        try:
            found[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (the listing's own descriptor, for one)
            continue
    return found


@dataclass
class LoadResult:
    """What a load run measured."""

    writers: int
    readers: int
    written: int = 0
    read: int = 0
    lost: int = 0
    corrupt: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bytes_written: int = 0
    rss_before: int = 0
    rss_peak: int = 0
    rss_after: int = 0
    fds_before: int = 0
    fds_after: int = 0
    fds_leaked: list[str] = field(default_factory=list)
    """Descriptors open after the run that were not open before it (what they point at)."""
    write_latency_s: list[float] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """Everything but the per-write latencies, plus their median and max."""
        data = asdict(self)
        latencies = data.pop("write_latency_s")
        data["write_latency_median_s"] = statistics.median(latencies) if latencies else None
        data["write_latency_max_s"] = max(latencies) if latencies else None
        return data


async def _load(store: Store, result: LoadResult, duration_s: float, max_writes: int) -> None:
    writer, reader = PayloadWriter(store), PayloadReader(store)
    # Bounded: writers wait for readers, so memory and the final drain stay bounded.
    queue: asyncio.Queue[tuple[int, list[Segment]] | None] = asyncio.Queue(8 * result.readers)
    deadline = time.monotonic() + duration_s
    seeds = iter(range(max_writes))
    peak = [result.rss_before]

    async def write_loop() -> None:
        for seed in seeds:
            if time.monotonic() > deadline:
                return
            arrays = await asyncio.to_thread(blob_arrays, seed)
            started = time.perf_counter()
            try:
                segments = await writer.awrite(store.version_prefix(seed % 4), arrays)
            except PayloadError as exc:
                result.errors.append(f"write {seed}: {exc}")
                continue
            result.write_latency_s.append(time.perf_counter() - started)
            result.written += 1
            result.bytes_written += sum(s.nbytes for s in segments)
            await queue.put((seed, segments))
            peak[0] = max(peak[0], _rss_bytes())

    async def read_loop() -> None:
        while (item := await queue.get()) is not None:
            seed, segments = item
            arrays = await asyncio.to_thread(blob_arrays, seed)
            n = arrays.prompt_len + arrays.completion_len
            try:
                routing, mask = await reader.aread_window(
                    segments,
                    [
                        FieldWindow("routed_experts", 0, n - 1),
                        FieldWindow("sampling_mask", arrays.prompt_len, n),
                    ],
                )
            except PayloadError as exc:
                result.lost += 1
                result.errors.append(f"read {seed}: {exc}")
                continue
            result.read += 1
            if not _matches(arrays, routing, mask):
                result.corrupt += 1

    readers = [asyncio.create_task(read_loop()) for _ in range(result.readers)]
    await asyncio.gather(*(write_loop() for _ in range(result.writers)))
    for _ in readers:
        await queue.put(None)
    await asyncio.gather(*readers)
    result.rss_peak = max(peak[0], _rss_bytes())


def run_load(
    config: StoreConfig,
    *,
    writers: int = 64,
    readers: int = 8,
    duration_s: float = 60.0,
    max_writes: int = 20_000,
) -> LoadResult:
    """One load run on a fresh store of ``config``; the store is closed before the
    descriptors are counted again."""
    import fsspec.asyn

    # fsspec's IO loop is process-wide (an epoll and a socket pair, made once per process
    # and kept): start it before counting, so that only what this run leaves counts.
    fsspec.asyn.get_loop()
    gc.collect()
    result = LoadResult(writers=writers, readers=readers)
    result.rss_before = _rss_bytes()
    before = open_descriptors()
    result.fds_before = len(before)
    started = time.perf_counter()
    store = Store(config)
    try:
        asyncio.run(_load(store, result, duration_s, max_writes))
        leftovers = store.list()
        if leftovers:
            store.delete(leftovers)
    finally:
        store.close()
    result.seconds = time.perf_counter() - started
    gc.collect()
    result.rss_after = _rss_bytes()
    after = open_descriptors()
    result.fds_after = len(after)
    # Compared as a set: in a shared process (a test run) descriptors of unrelated
    # objects may close meanwhile; only ones this run opened and left open count.
    result.fds_leaked = sorted(target for fd, target in after.items() if before.get(fd) != target)
    return result


def run(ctx: BenchContext) -> Report:
    """The load scenario: 64 writers and 8 readers for up to 60 s on the embedded S3
    server (or ``ctx.store``)."""
    from objstore_payload.testing.embedded_s3 import EmbeddedS3

    embedded = None
    if ctx.store is None:
        # In its own process: moto keeps every object in memory, which must not count as
        # the client's RSS, and its Python must not share the client's GIL.
        embedded = EmbeddedS3(bucket="bench-load", separate_process=True).start()
        config = StoreConfig(root="s3://bench-load/run", s3=embedded.s3_options())
    else:
        config = StoreConfig.from_env(root=ctx.store, engine=ctx.engine, s3=ctx.s3)
    try:
        with ctx.progress("load: 64 writers, 8 readers", 1):
            result = run_load(
                config,
                duration_s=max(5.0, 60.0 * ctx.scale),
                max_writes=max(200, round(20_000 * ctx.scale)),
            )
    finally:
        if embedded is not None:
            embedded.stop()
    report = Report(
        "load",
        f"{result.writers} writers, {result.readers} readers, {result.seconds:.0f} s on "
        f"{'embedded S3 (moto server)' if embedded else ctx.store}",
        data=result.as_json(),
    )
    report.add(
        "blobs written / read back",
        f"{result.written:,} / {result.read:,} ({result.written / result.seconds:.0f} writes/s, "
        f"{result.bytes_written / result.seconds / 1e6:.1f} MB/s)",
    )
    report.add(
        "lost or corrupt",
        f"{result.lost} / {result.corrupt}",
        "0",
        result.lost + result.corrupt == 0,
    )
    mib = 1 << 20
    report.add(
        "RSS before / peak / after",
        f"{result.rss_before / mib:.0f} / {result.rss_peak / mib:.0f} / "
        f"{result.rss_after / mib:.0f} MiB",
    )
    report.add(
        "open descriptors before / after (left open by the run)",
        f"{result.fds_before} / {result.fds_after} ({len(result.fds_leaked)})",
        "none left open",
        not result.fds_leaked,
    )
    if result.write_latency_s:
        report.add(
            "write latency",
            f"{statistics.median(result.write_latency_s) * 1e3:.0f} ms median, "
            f"{max(result.write_latency_s) * 1e3:.0f} ms max",
        )
    return report
