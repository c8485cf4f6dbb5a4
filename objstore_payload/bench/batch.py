"""``bench batch``: the seed's inline-versus-by-handle table for one huge batch.

`BATCH_SHAPE` (64 samples of 32k tokens, 48 x 8 uint8 routing, 30 turns each, masks of
up to 64 ids on 20 % of tokens, 8 DP ranks x CP 4) is generated once; every sample is
carried both ways on the same rows: inline (routing and mask arrays in the sample) and by
handle (each turn written as a blob to the store, the sample holding segments). For each
way, on the orchestrator:

- **resident**: the samples as the orchestrator holds them, decoded from their wire
  messages (tracemalloc counts numpy buffers and bytes objects alike);
- **peak during pack + encode**: traced peak while `prepare_batch` packs the samples for
  8 DP ranks and every micro batch is encoded for the wire, resident samples included;
- **wire**: bytes of all encoded micro batches (all DP ranks), of their segments alone,
  and the egress when each DP rank's messages go to its 4 CP ranks;
- **pack + encode time**, timed separately without tracing;

and on the trainer, **DP rank 0's decode + materialize** for its 4 CP ranks: each CP rank
decodes each of rank 0's micro batch messages and builds its payload tensors (inline:
decode, densify, shift and CP split; by handle: read its window from the store).
"""

from __future__ import annotations

import gc
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from objstore_payload.adapters.rollout import (
    MicroBatch,
    Sample,
    decode_micro_batch,
    decode_sample,
    encode_message,
    prepare_batch,
)
from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Pair, Report
from objstore_payload.bench.shape import BATCH_SHAPE, RunShape
from objstore_payload.bench.workload import inline_sample, sample_rows, write_sample
from objstore_payload.reader import PayloadReader
from objstore_payload.store.config import StoreConfig
from objstore_payload.store.store import Store

__all__ = ["run"]

MIB = 1 << 20


def _pack_and_encode(samples: Sequence[Sample], shape: RunShape) -> list[list[bytes]]:
    ranks = prepare_batch(
        samples, seq_len=shape.micro_batch_len, dp_size=shape.dp, pad_to_multiple_of=shape.cp
    )
    return [[encode_message(mb) for mb in rank] for rank in ranks]


def _traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """``fn()`` under tracemalloc: its result, bytes still held after it, and the peak."""
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, current, peak


def _measure_way(
    name: str, sample_messages: list[bytes], shape: RunShape, reader: PayloadReader | None
) -> dict[str, Any]:
    samples, resident, _ = _traced(lambda: [decode_sample(m) for m in sample_messages])

    def pack_with_samples() -> list[list[bytes]]:
        return _pack_and_encode(samples, shape)

    # Peak while the samples are resident: trace the decode again, then the packing,
    # so the samples count in the peak as they do in the orchestrator.
    def decode_pack() -> list[list[bytes]]:
        held = [decode_sample(m) for m in sample_messages]
        return _pack_and_encode(held, shape)

    _, _, peak = _traced(decode_pack)
    started = time.perf_counter()
    messages = pack_with_samples()
    pack_s = time.perf_counter() - started
    wire = sum(len(m) for rank in messages for m in rank)
    segment_bytes = segment_count = 0
    for rank in messages:
        for message in rank:
            segments = decode_micro_batch(message).segments
            segment_count += len(segments)
            segment_bytes += len(msgspec.msgpack.encode(segments)) if segments else 0
    decode_s = _rank_decode(messages[0], shape, reader)
    return {
        "way": name,
        "resident_bytes": resident,
        "peak_bytes": peak,
        "wire_bytes": wire,
        "segment_bytes": segment_bytes,
        "segments": segment_count,
        "egress_bytes": wire * shape.cp,
        "pack_encode_s": pack_s,
        "rank0_decode_s": decode_s,
        "micro_batches": sum(len(rank) for rank in messages),
    }


def _rank_decode(messages: list[bytes], shape: RunShape, reader: PayloadReader | None) -> float:
    """DP rank 0's decode + materialize for all of its CP ranks (seconds)."""
    from objstore_payload.adapters.torch_tensors import micro_batch_tensors, window_for_rank

    for cp_rank in range(shape.cp):  # warm-up on the first message: first-use costs
        micro_batch_tensors(
            decode_micro_batch(messages[0]), cp_rank=cp_rank, cp_size=shape.cp, reader=reader
        )
    started = time.perf_counter()
    for cp_rank in range(shape.cp):
        for message in messages:
            micro_batch: MicroBatch = decode_micro_batch(message)
            tensors = micro_batch_tensors(
                micro_batch, cp_rank=cp_rank, cp_size=shape.cp, reader=reader
            )
            if not tensors.cp_windowed:
                tensors = window_for_rank(tensors, cp_rank, shape.cp)
    return time.perf_counter() - started


def run(ctx: BenchContext) -> Report:
    """The batch scenario."""
    # Imported before any timing: importing torch takes longer than a rank's decode.
    import objstore_payload.adapters.torch_tensors  # noqa: F401

    shape = BATCH_SHAPE.scaled(ctx.scale)
    rng = np.random.default_rng(1)
    inline_messages: list[bytes] = []
    handle_messages: list[bytes] = []
    with tempfile.TemporaryDirectory(prefix="objstore-payload-bench-") as scratch:
        root = ctx.store or Path(scratch, "store").as_uri()
        config = StoreConfig.from_env(root=root, engine=ctx.engine, s3=ctx.s3)
        with Store(config) as store:
            destination = store.version_prefix(0)
            write_started = time.perf_counter()
            with ctx.progress("batch: generate + write samples", shape.samples) as progress:
                for _ in range(shape.samples):
                    rows = sample_rows(shape, rng)
                    inline_messages.append(encode_message(inline_sample(rows)))
                    handle_messages.append(
                        encode_message(write_sample(store, destination, shape, rows))
                    )
                    progress.update()
            write_s = time.perf_counter() - write_started
            with ctx.progress("batch: measure inline", 1):
                inline = _measure_way("inline", inline_messages, shape, None)
            del inline_messages
            gc.collect()
            with ctx.progress("batch: measure by handle", 1):
                handle = _measure_way("by handle", handle_messages, shape, PayloadReader(store))
            if ctx.store:
                leftovers = store.list(destination)
                if leftovers:
                    store.delete(leftovers)
    return _report(shape, inline, handle, write_s, root if ctx.store else "file (temporary)")


def _report(
    shape: RunShape, inline: dict[str, Any], handle: dict[str, Any], write_s: float, where: str
) -> Report:
    report = Report(
        "batch",
        f"{shape.samples} samples x {shape.tokens_per_sample:,} tokens, {shape.turns} turns, "
        f"{shape.dp} DP x CP {shape.cp}, inline vs by handle ({where})",
        data={
            "shape": shape.describe(),
            "inline": inline,
            "by_handle": handle,
            "write_blobs_s": write_s,
        },
    )

    def ratio(key: str) -> float:
        return float(inline[key]) / max(float(handle[key]), 1e-12)

    def mib(value: float) -> str:
        return f"{value / MIB:,.1f} MiB"

    rows = [
        (
            "samples resident",
            "resident_bytes",
            mib,
            ">= 15x smaller",
            ratio("resident_bytes") >= 15,
        ),
        (
            "peak during pack + encode",
            "peak_bytes",
            mib,
            ">= 10x smaller",
            ratio("peak_bytes") >= 10,
        ),
        ("wire, all DP ranks", "wire_bytes", mib, "", None),
        (f"egress (x {shape.cp} CP subscribers)", "egress_bytes", mib, "", None),
    ]
    for label, key, show, goal, met in rows:
        report.add(
            label,
            f"{show(inline[key])} -> {show(handle[key])} ({ratio(key):,.1f}x)",
            goal,
            met,
        )
    report.add(
        "segments on the wire (by handle)",
        f"{handle['segment_bytes'] / 1024:,.1f} KiB in {handle['segments']:,} segments",
    )
    pack = handle["pack_encode_s"] / inline["pack_encode_s"]
    report.add(
        "pack + encode time",
        f"{inline['pack_encode_s']:.2f} s -> {handle['pack_encode_s']:.2f} s ({pack:.2f}x)",
        "<= 0.5x inline",
        pack <= 0.5,
    )
    decode = handle["rank0_decode_s"] / inline["rank0_decode_s"]
    report.add(
        f"DP rank 0 decode + materialize ({shape.cp} CP ranks)",
        f"{inline['rank0_decode_s']:.2f} s -> {handle['rank0_decode_s']:.2f} s ({decode:.2f}x)",
        "<= 0.8x inline",
        decode <= 0.8,
    )
    report.add("writing the blobs (setup, by handle)", f"{write_s:.1f} s")
    report.pairs = [
        Pair(
            "samples resident",
            "MiB",
            inline["resident_bytes"] / MIB,
            handle["resident_bytes"] / MIB,
        ),
        Pair("peak, pack + encode", "MiB", inline["peak_bytes"] / MIB, handle["peak_bytes"] / MIB),
        Pair("wire, all DP ranks", "MiB", inline["wire_bytes"] / MIB, handle["wire_bytes"] / MIB),
        Pair("pack + encode", "s", inline["pack_encode_s"], handle["pack_encode_s"]),
        Pair("rank 0 decode", "s", inline["rank0_decode_s"], handle["rank0_decode_s"]),
    ]
    return report
