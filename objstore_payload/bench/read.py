"""``bench read``: one rank's window reads of a realistic micro batch against the local
I/O limit, and the same reads on S3 servers with each S3 engine.

The micro batch (`READ_SHAPE`: 8 samples of 4 turns, each turn its own blob with 48 x 8
uint8 routing and masks of ~1.7 ids per completion token, 32,000 tokens, CP 4) is written
through the real writer and packed. Every CP rank reads its window as the trainer adapter
plans it (routing on the input window, the mask on the label window, the mask trimmed to
the window's width); the read is timed, then the exact byte ranges the reader requested
are read again with a plain ``os.pread`` loop into reused buffers (the local limit, file
stores only). The local engine's cached descriptors are dropped before each timed window,
so every window pays its opens, as a trainer reading a new micro batch does. Reported:
time per window, throughput, the ratio to raw, GETs per distinct blob, and the
conversion to torch tensors separately.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from objstore_payload.adapters.rollout import MicroBatch
from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Report
from objstore_payload.bench.shape import READ_SHAPE, RunShape
from objstore_payload.bench.workload import by_handle_micro_batches
from objstore_payload.reader import PayloadReader
from objstore_payload.store.config import Engine as EngineName
from objstore_payload.store.config import S3Options, StoreConfig
from objstore_payload.store.local import LocalEngine
from objstore_payload.store.store import RequestRecord, Store
from objstore_payload.windows import MaskWidth

__all__ = ["ReadFigures", "measure_read", "run"]


@dataclass
class ReadFigures:
    """One store's (and engine's) read figures."""

    label: str
    store: str
    engine: str
    window_s: list[float] = field(default_factory=list)
    tensor_s: list[float] = field(default_factory=list)
    raw_s: list[float] = field(default_factory=list)
    gets: int = 0
    blobs: int = 0
    bytes: int = 0
    windows: int = 0

    @property
    def median_window_s(self) -> float:
        """Median time of one rank window's read."""
        return statistics.median(self.window_s)

    @property
    def ratio_to_raw(self) -> float | None:
        """Reader throughput over raw pread throughput (file stores)."""
        return statistics.median(self.raw_s) / self.median_window_s if self.raw_s else None

    @property
    def gets_per_blob(self) -> float:
        """GETs per distinct blob a window touches."""
        return self.gets / max(self.blobs, 1)

    def as_json(self) -> dict[str, Any]:
        """Figures and derived values."""
        return {
            "label": self.label,
            "store": self.store,
            "engine": self.engine,
            "median_window_s": self.median_window_s,
            "median_tensor_s": statistics.median(self.tensor_s) if self.tensor_s else None,
            "median_raw_s": statistics.median(self.raw_s) if self.raw_s else None,
            "ratio_to_raw": self.ratio_to_raw,
            "gets_per_window": self.gets / max(self.windows, 1),
            "blobs_per_window": self.blobs / max(self.windows, 1),
            "bytes_per_window": self.bytes / max(self.windows, 1),
            "gets_per_blob": self.gets_per_blob,
            "window_s": self.window_s,
            "raw_s": self.raw_s,
        }


def _raw_pread(blocks: list[tuple[str, int, int]], buffers: dict[int, memoryview]) -> None:
    fds: dict[str, int] = {}
    try:
        for path, start, end in blocks:
            fd = fds.get(path)
            if fd is None:
                fd = fds[path] = os.open(path, os.O_RDONLY)
            os.preadv(fd, [buffers[end - start]], start)
    finally:
        for fd in fds.values():
            os.close(fd)


def measure_read(
    store: Store,
    shape: RunShape,
    *,
    repeats: int,
    label: str,
    ctx: BenchContext,
    mask_width: MaskWidth = "micro_batch",
    micro_batches: list[MicroBatch] | None = None,
    verify: bool = False,
) -> ReadFigures:
    """Write ``shape``'s batch to ``store``, then time every CP rank's window reads."""
    from objstore_payload.adapters.torch_tensors import micro_batch_tensors, plan_window

    figures = ReadFigures(label, store.root.url, store.engine.name)
    if micro_batches is None:
        with ctx.progress(f"read [{label}]: write", shape.samples * shape.turns):
            micro_batches = [mb for rank in by_handle_micro_batches(store, shape) for mb in rank]
    reader = PayloadReader(store, verify=verify)
    engine = store.engine
    local = engine if isinstance(engine, LocalEngine) else None
    if store.requests is None:
        raise ValueError("measure_read needs a store opened with record_requests=True")
    for micro_batch in micro_batches:  # warm-up: page cache, connections, imports
        for cp_rank in range(shape.cp):
            micro_batch_tensors(
                micro_batch,
                cp_rank=cp_rank,
                cp_size=shape.cp,
                reader=reader,
                mask_width=mask_width,
            )
    total = repeats * len(micro_batches) * shape.cp
    with ctx.progress(f"read [{label}]: windows", total) as progress:
        for _ in range(repeats):
            for micro_batch in micro_batches:
                for cp_rank in range(shape.cp):
                    windows = plan_window(micro_batch, cp_rank, shape.cp, mask_width)
                    if local is not None:
                        local.drop_open_files()
                    log: list[RequestRecord] = store.requests or []
                    store.requests = None  # the timed read runs without the request log
                    before_gets, before_bytes = (
                        store.stats.get_requests,
                        store.stats.bytes_fetched,
                    )
                    started = time.perf_counter()
                    reader.read_window(micro_batch.segments, windows)
                    figures.window_s.append(time.perf_counter() - started)
                    figures.windows += 1
                    figures.gets += store.stats.get_requests - before_gets
                    figures.bytes += store.stats.bytes_fetched - before_bytes
                    # The same read again, logged: the exact ranges for the raw baseline.
                    log.clear()
                    store.requests = log
                    reader.read_window(micro_batch.segments, windows)
                    blocks = [(r.path, r.start, r.end) for r in log if r.op == "get"]
                    figures.blobs += len({path for path, _, _ in blocks})
                    if local is not None:
                        sizes = {end - start for _, start, end in blocks}
                        buffers = {size: memoryview(bytearray(size)) for size in sizes}
                        _raw_pread(blocks, buffers)  # warm
                        started = time.perf_counter()
                        _raw_pread(blocks, buffers)
                        figures.raw_s.append(time.perf_counter() - started)
                        local.drop_open_files()
                    started = time.perf_counter()
                    micro_batch_tensors(
                        micro_batch,
                        cp_rank=cp_rank,
                        cp_size=shape.cp,
                        reader=reader,
                        mask_width=mask_width,
                    )
                    figures.tensor_s.append(time.perf_counter() - started)
                    progress.update()
    return figures


def _s3_engines() -> list[EngineName]:
    """The S3 engines installed here: s3fs and boto3 always, obstore with its extra."""
    import importlib.util

    engines: list[EngineName] = ["fsspec", "boto3"]
    if importlib.util.find_spec("obstore") is not None:
        engines.append("obstore")
    return engines


def _s3_targets(ctx: BenchContext) -> list[tuple[str, Any]]:
    """The S3 servers to measure on: the embedded one, and Ceph RGW when it can run."""
    from objstore_payload.testing.ceph_rgw import CephRgw, rgw_available
    from objstore_payload.testing.embedded_s3 import EmbeddedS3

    targets: list[tuple[str, Any]] = [
        ("embedded S3 (moto server)", EmbeddedS3("bench-read", separate_process=True))
    ]
    script = ctx.rgw_script
    if script is not None and script.is_file() and rgw_available() is None:
        scratch = Path(tempfile.mkdtemp(prefix="objstore-payload-bench-rgw-"))
        targets.append(("Ceph RGW", CephRgw(script, scratch, bucket="bench-read")))
    return targets


def run(ctx: BenchContext) -> Report:
    """The read scenario."""
    shape = READ_SHAPE.scaled(ctx.scale)
    all_figures: list[ReadFigures] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="objstore-payload-bench-") as scratch:
        root = ctx.store or Path(scratch, "store").as_uri()
        config = StoreConfig.from_env(root=root, engine=ctx.engine, s3=ctx.s3)
        with Store(config, record_requests=True) as store:
            try:
                label = "file" if store.root.protocol == "file" else "store"
                with ctx.progress(f"read [{label}]: write", shape.samples * shape.turns):
                    micro_batches = [
                        mb for rank in by_handle_micro_batches(store, shape) for mb in rank
                    ]
                widths: tuple[MaskWidth, ...] = ("micro_batch", "window")
                all_figures.extend(
                    measure_read(
                        store,
                        shape,
                        repeats=ctx.repeats,
                        label=label if width == "micro_batch" else f"{label}, window width",
                        ctx=ctx,
                        mask_width=width,
                        micro_batches=micro_batches,
                    )
                    for width in widths
                )
                verified = measure_read(
                    store,
                    shape,
                    repeats=max(1, ctx.repeats // 2),
                    label=f"{label}, verifying",
                    ctx=ctx,
                    micro_batches=micro_batches,
                    verify=True,
                )
                verified.raw_s.clear()  # its raw baseline is not comparable
                all_figures.append(verified)
            finally:
                if ctx.store:
                    leftovers = store.list(store.version_prefix(0))
                    if leftovers:
                        store.delete(leftovers)
    if ctx.with_s3 and ctx.store is None:
        for label, server in _s3_targets(ctx):
            try:
                server.start()
            except Exception as exc:  # a server that cannot start here is reported, not fatal
                notes.append(f"{label} did not start: {exc}")
                continue
            try:
                for engine in _s3_engines():
                    options: S3Options = server.s3_options()
                    config = StoreConfig(
                        root=f"s3://{server.bucket}/{engine}", engine=engine, s3=options
                    )
                    with Store(config, record_requests=True) as store:
                        all_figures.append(
                            measure_read(
                                store,
                                shape,
                                repeats=max(1, ctx.repeats // 2),
                                label=f"{label}, {engine}",
                                ctx=ctx,
                            )
                        )
            finally:
                server.stop()
                if isinstance(getattr(server, "directory", None), Path):
                    shutil.rmtree(server.directory, ignore_errors=True)
        if not any("RGW" in f.label for f in all_figures):
            notes.append("Ceph RGW not measured: not installed here or no scripts/ceph-rgw.sh")
    return _report(shape, all_figures, notes)


def _report(shape: RunShape, all_figures: list[ReadFigures], notes: list[str]) -> Report:
    first = all_figures[0]
    local = [f for f in all_figures if f.raw_s]
    tokens = shape.micro_batch_len
    report = Report(
        "read",
        f"one rank's window of a {tokens:,}-token micro batch of "
        f"{shape.samples * shape.turns} blobs, CP {shape.cp}",
        data={"shape": shape.describe(), "stores": [f.as_json() for f in all_figures]},
        notes=notes,
    )
    for figures in local or [first]:
        mb = figures.bytes / max(figures.windows, 1) / 1e6
        report.add(
            f"{figures.label}: per window",
            f"{figures.median_window_s * 1e3:.2f} ms, {mb:.2f} MB "
            f"({mb / figures.median_window_s / 1e3:.2f} GB/s)",
        )
        if figures.tensor_s:
            report.add(
                f"{figures.label}: as torch tensors",
                f"{statistics.median(figures.tensor_s) * 1e3:.2f} ms (routing widened to int32)",
            )
        ratio = figures.ratio_to_raw
        if ratio is not None:
            report.add(
                f"{figures.label}: raw os.pread, same ranges",
                f"{statistics.median(figures.raw_s) * 1e3:.2f} ms",
            )
            report.add(
                f"{figures.label}: reader / raw throughput",
                f"{ratio:.2f}",
                ">= 0.5",
                ratio >= 0.5,
            )
    for figures in all_figures:
        if figures.label.endswith("verifying"):
            continue
        report.add(
            f"{figures.label}: GETs per distinct blob",
            f"{figures.gets_per_blob:.2f} ({figures.gets / max(figures.windows, 1):.1f} GETs "
            f"over {figures.blobs / max(figures.windows, 1):.1f} blobs per window)",
            "<= 2",
            figures.gets_per_blob <= 2,
        )
    for figures in all_figures:
        if figures.label.endswith("verifying"):
            slower = figures.median_window_s / first.median_window_s
            report.add(
                f"{figures.label}: per window (verify=True)",
                f"{figures.median_window_s * 1e3:.2f} ms ({slower:.1f}x the plain read)",
            )
        elif figures not in local and figures is not first:
            report.add(f"{figures.label}: per window", f"{figures.median_window_s * 1e3:.2f} ms")
    return report
