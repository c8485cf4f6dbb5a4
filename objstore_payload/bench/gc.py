"""``bench gc``: collecting one step's blobs.

15,000 blobs (at scale 1.0) are written under one version prefix and recorded as one
batch; then `PayloadCollector.on_policy_update` runs. Reported: the delete requests sent
(S3 DeleteObjects takes 1,000 keys; goal <= 15 at full scale), how long the caller was
blocked (goal: returns at once), and how long the deletion took in the background.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Report
from objstore_payload.store.config import StoreConfig
from objstore_payload.store.store import Store

__all__ = ["GcResult", "run", "run_gc"]


@dataclass
class GcResult:
    """Figures of one gc benchmark run."""

    store: str
    blobs: int
    delete_requests: int
    deleted: int
    caller_blocked_s: float
    background_s: float
    write_s: float


def run_gc(store: Store, *, scale: float = 1.0, ctx: BenchContext | None = None) -> GcResult:
    """Write ``15000 * scale`` blobs, record them as batch 1, collect, measure."""
    from objstore_payload.lifecycle import PayloadCollector

    count = max(1, round(15_000 * scale))
    collector = PayloadCollector(store, max_off_policy_steps=8)
    uris = [store.new_blob_uri(store.version_prefix(0)) for _ in range(count)]

    async def write_all() -> None:
        semaphore = asyncio.Semaphore(64)

        async def one(uri: str) -> None:
            async with semaphore:
                await store.aput(uri, [b"payload"])
            progress.update()

        await asyncio.gather(*(one(u) for u in uris))

    started = time.perf_counter()
    with (ctx or BenchContext(quiet=True)).progress("gc: write blobs", count) as progress:
        asyncio.run(write_all())
    write_s = time.perf_counter() - started
    collector.record_batch(1, uris)
    before = collector.stats.delete_requests
    started = time.perf_counter()
    future = collector.on_policy_update(1)
    blocked = time.perf_counter() - started
    future.result()
    background = time.perf_counter() - started
    result = GcResult(
        store=store.root.url,
        blobs=count,
        delete_requests=collector.stats.delete_requests - before,
        deleted=collector.stats.deleted_on_consume,
        caller_blocked_s=blocked,
        background_s=background,
        write_s=write_s,
    )
    collector.close()
    return result


def run(ctx: BenchContext) -> Report:
    """The gc scenario, on the embedded S3 server unless ``ctx.store`` names a store."""
    embedded = None
    root, s3 = ctx.store, ctx.s3
    if root is None:  # S3 semantics (DeleteObjects batches) on the embedded server
        from objstore_payload.testing.embedded_s3 import EmbeddedS3

        embedded = EmbeddedS3(bucket="bench-gc", separate_process=True).start()
        root, s3 = "s3://bench-gc/run", embedded.s3_options()
    try:
        config = StoreConfig.from_env(root=root, engine=ctx.engine, s3=s3)
        with Store(config) as store:
            result = run_gc(store, scale=ctx.scale, ctx=ctx)
    finally:
        if embedded is not None:
            embedded.stop()
    goal = max(1, -(-result.blobs // 1000))
    report = Report(
        "gc",
        f"collect one step's {result.blobs:,} blobs "
        f"({'embedded S3 (moto server)' if embedded else result.store})",
        data=asdict(result),
    )
    report.add(
        "delete requests",
        f"{result.delete_requests} for {result.deleted:,} keys",
        f"<= {goal}",
        result.delete_requests <= goal and result.deleted == result.blobs,
    )
    # "Returns at once": the call only queues the work; 50 ms is far below one delete.
    report.add(
        "caller blocked",
        f"{result.caller_blocked_s * 1e3:.1f} ms",
        "returns at once",
        result.caller_blocked_s < 0.05,
    )
    report.add("deletion, in the background", f"{result.background_s:.2f} s")
    report.add("writing the blobs (setup, 64 concurrent PUTs)", f"{result.write_s:.1f} s")
    return report
