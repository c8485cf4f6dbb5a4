"""``objstore-payload bench gc``: collecting one step's blobs.

15,000 blobs (at scale 1.0) are written under one version prefix and recorded as one
batch; then `PayloadCollector.on_policy_update` runs. Reported: the delete requests sent
(S3 DeleteObjects takes 1,000 keys; goal <= 15 at full scale), how long the caller was
blocked (goal: returns at once), and how long the deletion took in the background.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from objstore_payload.store.store import Store

__all__ = ["GcResult", "format_gc", "run_gc"]


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


def run_gc(store: Store, *, scale: float = 1.0) -> GcResult:
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

        await asyncio.gather(*(one(u) for u in uris))

    started = time.perf_counter()
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


def format_gc(result: GcResult) -> str:
    """The gc scenario's lines."""
    return "\n".join(
        [
            f"gc: {result.blobs:,} blobs of one step on {result.store} (written in "
            f"{result.write_s:.1f} s)",
            f"  delete requests: {result.delete_requests} for {result.deleted:,} keys "
            f"(goal <= {max(1, -(-result.blobs // 1000))})",
            f"  caller blocked {result.caller_blocked_s * 1e3:.2f} ms; deletion took "
            f"{result.background_s:.2f} s in the background",
        ]
    )


def write_json(result: GcResult, out: Path) -> Path:
    """Save the figures as JSON under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gc.json"
    path.write_text(json.dumps(asdict(result), indent=2))
    return path
