"""``bench latency``: window reads through a store that adds a fixed delay per request.

`DelayedEngine` wraps a local file engine and holds every request for ``delay_s`` (20 ms:
a cross-zone object store's first byte) before serving it, up to ``max_concurrency``
requests at a time, as an S3 engine does; it merges ranges like the S3 engines (256 KiB).
Two figures:

- **window read vs ideal**: each CP rank's window of the `READ_SHAPE` micro batch, timed,
  against ``ceil(GETs / concurrency) x delay``, the issue's ideal. A window with a sampling
  mask needs two dependent round trips (the mask's offsets, then its values), so the ideal
  that respects that dependency, the sum over the passes, is shown too.
- **loader wait**: a training loop takes micro batches from `PrefetchLoader` and spends a
  fixed simulated step on each; reported is how long it waited for data per step, for a
  step shorter and a step longer than one window read.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Report
from objstore_payload.bench.shape import READ_SHAPE
from objstore_payload.bench.workload import by_handle_micro_batches
from objstore_payload.reader import PayloadReader
from objstore_payload.store.coalesce import Block
from objstore_payload.store.config import ReadOptions, StoreConfig
from objstore_payload.store.engine import EngineWrapper, ReadOutcome
from objstore_payload.store.local import LocalEngine
from objstore_payload.store.store import Store

__all__ = ["DelayedEngine", "run"]

DELAY_S = 0.020


class DelayedEngine(EngineWrapper):
    """A local engine behind a fixed per-request delay and a concurrency limit."""

    name: ClassVar[str] = "delayed"
    default_coalesce_gap: ClassVar[int] = 256 << 10

    def __init__(self, inner: LocalEngine, delay_s: float, max_concurrency: int) -> None:
        super().__init__(inner)
        self.delay_s = delay_s
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="delayed")
        self._passes: list[int] = []
        self._lock = threading.Lock()

    def take_passes(self) -> list[int]:
        """Requests of each read pass since the last call."""
        with self._lock:
            passes, self._passes = self._passes, []
        return passes

    def _one(self, block: Block, target: Sequence[memoryview] | None) -> ReadOutcome | int:
        time.sleep(self.delay_s)
        return self.inner.read_blocks_into([block], [target])[0]

    def read_blocks_into(
        self, blocks: Sequence[Block], targets: Sequence[Sequence[memoryview] | None]
    ) -> list[ReadOutcome | int]:
        # docstring inherited
        with self._lock:
            self._passes.append(len(blocks))
        futures = [self._pool.submit(self._one, b, t) for b, t in zip(blocks, targets, strict=True)]
        return [f.result() for f in futures]

    def read_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        # docstring inherited
        outcomes = self.read_blocks_into(blocks, [None] * len(blocks))
        return [o for o in outcomes if not isinstance(o, int)]

    def close(self) -> None:
        # docstring inherited
        self._pool.shutdown(wait=True)
        super().close()


def run(ctx: BenchContext) -> Report:
    """The latency scenario (always on a temporary file store behind the delay)."""
    from objstore_payload.adapters.loader import PrefetchLoader
    from objstore_payload.adapters.torch_tensors import micro_batch_tensors, plan_window

    shape = READ_SHAPE.scaled(ctx.scale)
    concurrency = ReadOptions().max_concurrency
    windows_s: list[float] = []
    ratios: list[float] = []
    pass_ratios: list[float] = []
    gets: list[int] = []
    loader: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="objstore-payload-bench-") as scratch:
        root = Path(scratch, "store")
        config = StoreConfig(root=root.as_uri())
        engine = DelayedEngine(LocalEngine(str(root)), DELAY_S, concurrency)
        with Store(config, engine=engine) as store:
            with ctx.progress("latency: write", shape.samples * shape.turns):
                micro_batches = [
                    mb for rank in by_handle_micro_batches(store, shape) for mb in rank
                ]
            reader = PayloadReader(store)
            (micro_batch,) = micro_batches[:1]
            micro_batch_tensors(micro_batch, cp_rank=0, cp_size=shape.cp, reader=reader)  # warm
            with ctx.progress("latency: windows", ctx.repeats * shape.cp) as progress:
                for _ in range(ctx.repeats):
                    for cp_rank in range(shape.cp):
                        windows = plan_window(micro_batch, cp_rank, shape.cp)
                        engine.take_passes()
                        started = time.perf_counter()
                        reader.read_window(micro_batch.segments, windows)
                        elapsed = time.perf_counter() - started
                        passes = engine.take_passes()
                        ideal = math.ceil(sum(passes) / concurrency) * DELAY_S
                        by_pass = sum(math.ceil(p / concurrency) for p in passes) * DELAY_S
                        windows_s.append(elapsed)
                        ratios.append(elapsed / ideal)
                        pass_ratios.append(elapsed / by_pass)
                        gets.append(sum(passes))
                        progress.update()
            read_s = statistics.median(windows_s)
            steps = max(4, round(16 * ctx.scale))
            for label, step_s in (("short", read_s / 2), ("long", read_s * 2)):
                source = [micro_batch] * steps
                waits = []
                with (
                    ctx.progress(f"latency: loader, {label} step", steps) as progress,
                    PrefetchLoader(source, reader, cp_rank=0, cp_size=shape.cp, depth=2) as it,
                ):
                    iterator = iter(it)
                    for _ in range(steps):
                        started = time.perf_counter()
                        next(iterator)
                        waits.append(time.perf_counter() - started)
                        time.sleep(step_s)  # the simulated training step
                        progress.update()
                # The first item cannot be prefetched: report the steady state after it.
                loader[f"{label}_step_s"] = step_s
                loader[f"{label}_first_wait_s"] = waits[0]
                loader[f"{label}_wait_s"] = statistics.median(waits[1:])
    report = Report(
        "latency",
        f"window reads with {DELAY_S * 1e3:.0f} ms per request, {concurrency} in flight",
        data={
            "shape": shape.describe(),
            "delay_s": DELAY_S,
            "concurrency": concurrency,
            "window_s": windows_s,
            "gets": gets,
            "ratio_to_ideal": ratios,
            "ratio_to_pass_ideal": pass_ratios,
            "loader": loader,
        },
    )
    ratio = statistics.median(ratios)
    report.add(
        "window read",
        f"{read_s * 1e3:.1f} ms, {statistics.median(gets):.0f} GETs",
    )
    report.add(
        "  vs ceil(GETs / concurrency) x 20 ms",
        f"{ratio:.2f}x",
        "<= 2x",
        ratio <= 2,
    )
    report.add(
        "  vs the same per dependent pass",
        f"{statistics.median(pass_ratios):.2f}x",
    )
    for label in ("short", "long"):
        wait, first = loader[f"{label}_wait_s"], loader[f"{label}_first_wait_s"]
        report.add(
            f"loader wait per step, {label} step ({loader[f'{label}_step_s'] * 1e3:.0f} ms)",
            f"{wait * 1e3:.2f} ms (first {first * 1e3:.0f} ms)",
            "near zero" if label == "long" else "",
            loader["long_wait_s"] < 0.05 * read_s if label == "long" else None,
        )
    return report
