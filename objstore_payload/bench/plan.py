"""``objstore-payload plan`` (and ``bench plan``): a capacity model of one run, per step.

Not a measurement. From a run's shape it derives what the data plane will ask of the
object store each step: PUTs (one blob per request), GETs after coalescing, bytes written
and read, the peak bytes stored, request rates per key prefix against S3's published
per-prefix limits, and the request and storage cost at S3 Standard list prices.

The reads are not estimated from formulas: the model lays the blobs out as the writer
does (routing rows, then the CSR mask: 4 B per row + 4 B per id, then the trailer),
builds the segments the orchestrator would ship, packs samples into micro batches as
`prepare_batch` does (first fit, CP padding, DP dummies that keep routing), and runs the
reader's own planner (`WindowPlan`) and range merging (`coalesce`) for every CP rank's
window, with mask offsets synthesized at the shape's mean ids per token. So its GET count
is what the reader issues for the same shape, and its bytes differ from a real run only
by the randomness of the mask lengths.

Assumptions: every sample has the same shape; a blob lives from its write until the
batch that carries it is consumed and collected, with up to ``max_off_policy_steps``
steps of rollouts generated ahead, so at most ``max_off_policy_steps + 2`` steps of blobs
are stored at once; all of a step's PUTs land in one version prefix ``v<k>/`` spread
over the step, and all of its GETs within ``read_window_s`` at the start of the step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import msgspec
import numpy as np

from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Report
from objstore_payload.bench.shape import BATCH_SHAPE, READ_SHAPE, RunShape
from objstore_payload.layout import FOOTER_SIZE, RegionEntry, Trailer
from objstore_payload.reader import WindowPlan
from objstore_payload.segment import Segment
from objstore_payload.store.coalesce import CoalescePolicy, coalesce
from objstore_payload.windows import MaskWidth, rank_windows

__all__ = ["PRICES", "S3_LIMITS", "PlanInputs", "PlanResult", "plan", "run", "window_reads"]

S3_LIMITS = {"put_per_s": 3_500, "get_per_s": 5_500}
"""Requests per second per partitioned prefix that S3 documents as sustained."""

PRICES = {
    "put_per_1000": 0.005,
    "get_per_1000": 0.0004,
    "list_per_1000": 0.005,
    "delete_per_1000": 0.0,
    "storage_per_gb_month": 0.023,
}
"""S3 Standard list prices, US East (N. Virginia), in USD: PUT/COPY/POST/LIST $0.005 and
GET $0.0004 per 1,000 requests, DELETE free, storage $0.023 per GB-month (first 50 TB).
Unchanged since December 2016; check the current price page before budgeting."""

HOURS_PER_MONTH = 730.0
S3_COALESCE_GAP = 256 << 10
S3_MAX_BLOCK = 16 << 20


@dataclass(frozen=True)
class PlanInputs:
    """A run's shape plus what the model needs beyond it."""

    shape: RunShape = BATCH_SHAPE
    servers: int = 8
    """Inference servers writing blobs."""
    steps_per_hour: float = 30.0
    max_off_policy_steps: int = 2
    read_window_s: float = 10.0
    """All of a step's GETs are assumed to land within this many seconds."""
    coalesce_gap: int = S3_COALESCE_GAP
    max_block: int = S3_MAX_BLOCK
    mask_width: MaskWidth = "micro_batch"


@dataclass
class WindowReads:
    """What the reader requests for one micro batch, per CP rank."""

    gets: list[int]
    """GETs per CP rank, both passes together."""
    passes: list[list[int]]
    bytes_requested: list[int]
    bytes_fetched: list[int]
    """Requested plus the merged gaps."""
    blobs: list[int]


@dataclass
class PlanResult:
    """Per-step figures of a plan."""

    inputs: PlanInputs
    puts: int
    blob_bytes_mean: float
    bytes_written: int
    micro_batches: int
    dummies: int
    gets: int
    bytes_read: int
    gets_per_window: float
    bytes_per_window: float
    peak_stored_bytes: int
    put_rate_per_prefix: float
    get_rate_per_prefix: float
    needs_hash_prefix: bool
    cost_requests: float
    cost_storage: float
    step_s: float
    per_window: WindowReads

    @property
    def cost_per_step(self) -> float:
        """Requests and storage, USD."""
        return self.cost_requests + self.cost_storage

    @property
    def cost_per_day(self) -> float:
        """USD per day at ``steps_per_hour``."""
        return self.cost_per_step * self.inputs.steps_per_hour * 24

    def as_json(self) -> dict[str, Any]:
        """Everything, as builtins."""
        data = asdict(self)
        data["cost_per_step"] = self.cost_per_step
        data["cost_per_day"] = self.cost_per_day
        return data


def _spread_counts(rows: int, mean: float) -> np.ndarray:
    """``rows`` id counts adding up to ``round(rows * mean)``, as evenly as possible."""
    edges = np.floor(np.arange(rows + 1) * mean + 0.5).astype(np.int64)
    return np.diff(edges)


@dataclass(frozen=True)
class _Turn:
    start: int
    prompt: int
    completion: int

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion


def _turns(shape: RunShape) -> list[_Turn]:
    out, start = [], 0
    for prompt, completion in shape.turn_lengths():
        out.append(_Turn(start, prompt, completion))
        start += prompt + completion
    return out


def _blob_bytes(shape: RunShape, turn: _Turn) -> int:
    """A turn's blob: routing rows, CSR mask, trailer and footer (the writer's layout)."""
    routing = (turn.tokens - 1) * shape.routing_row_bytes
    ids = int(_spread_counts(turn.completion, shape.mean_mask_ids).sum())
    mask = 4 * (turn.completion + 1) + 4 * ids
    entries = (
        RegionEntry(
            field="routed_experts", offset=0, nbytes=routing, pos=0, rows=turn.tokens - 1,
            dtype=shape.routing_dtype.name, shape=(shape.layers, shape.top_k), crc32c=2**32 - 1,
        ),
        RegionEntry(
            field="sampling_mask", offset=routing, nbytes=mask, pos=turn.prompt,
            rows=turn.completion, dtype="uint32", shape=(), value_dtype="int32",
            crc32c=2**32 - 1,
        ),
    )  # fmt: skip
    trailer = msgspec.msgpack.encode(Trailer(format_version=1, regions=entries))
    return routing + mask + len(trailer) + FOOTER_SIZE


def _sample_segments(shape: RunShape, sample: int, shift: int) -> list[Segment]:
    """The segments of one sample (positions shifted by its place in the micro batch)."""
    segments = []
    for index, turn in enumerate(_turns(shape)):
        uri = f"s3://plan/run/v0/{sample:06d}-{index:04d}.bin"
        rows = turn.tokens - 1
        segments.append(
            Segment(
                "routed_experts", uri, 0, shift + turn.start, rows,
                shape.routing_dtype.name, (shape.layers, shape.top_k),
            )
        )  # fmt: skip
        segments.append(
            Segment(
                "sampling_mask", uri, rows * shape.routing_row_bytes,
                shift + turn.start + turn.prompt, turn.completion, "uint32", (),
            )
        )  # fmt: skip
    return segments


def _synthetic_offsets(
    plan: WindowPlan, ranges: Sequence[tuple[str, int, int]], mean: float
) -> list[memoryview]:
    """Offset words a real blob would hold, at ``mean`` ids per row."""
    out = []
    for _uri, start, end in ranges:
        rows = (end - start) // 4 - 1
        words = (
            start
            + 4 * (rows + 1)
            + 4 * np.concatenate([[0], np.cumsum(_spread_counts(rows, mean))])
        )
        out.append(memoryview(words.astype("<u4").tobytes()))
    return out


def window_reads(
    segments: Sequence[Segment],
    num_tokens: int,
    shape: RunShape,
    policy: CoalescePolicy,
    mask_width: MaskWidth = "micro_batch",
) -> WindowReads:
    """GETs and bytes of every CP rank's window of one micro batch, by the reader's own
    planner and merging."""
    reads = WindowReads([], [], [], [], [])
    present = {s.field for s in segments}
    for cp_rank in range(shape.cp):
        windows = rank_windows(num_tokens, present, cp_rank, shape.cp, mask_width=mask_width)
        plan = WindowPlan(segments, windows)
        passes, requested, fetched, blobs = [], 0, 0, set()
        offset_ranges = plan.offset_ranges()
        if offset_ranges:
            blocks, _ = coalesce(offset_ranges, policy)
            passes.append(len(blocks))
            requested += sum(end - start for _, start, end in offset_ranges)
            fetched += sum(b.size for b in blocks)
            blobs |= {b.path for b in blocks}
            plan.take_offsets(_synthetic_offsets(plan, offset_ranges, shape.mean_mask_ids))
        value_ranges = plan.value_ranges()
        if value_ranges:
            blocks, _ = coalesce(value_ranges, policy)
            passes.append(len(blocks))
            requested += sum(end - start for _, start, end in value_ranges)
            fetched += sum(b.size for b in blocks)
            blobs |= {b.path for b in blocks}
        reads.passes.append(passes)
        reads.gets.append(sum(passes))
        reads.bytes_requested.append(requested)
        reads.bytes_fetched.append(fetched)
        reads.blobs.append(len(blobs))
    return reads


def _micro_batch(
    shape: RunShape, samples: int, first: int, *, dummy: bool = False
) -> tuple[list[Segment], int]:
    segments = []
    for i in range(samples):
        segments += _sample_segments(shape, first + i, i * shape.tokens_per_sample)
    if dummy:  # dummies keep routing, drop masks
        segments = [s for s in segments if s.field == "routed_experts"]
    n = samples * shape.tokens_per_sample
    return segments, -(-n // shape.cp) * shape.cp


def plan(inputs: PlanInputs) -> PlanResult:
    """The per-step capacity model of ``inputs``."""
    shape = inputs.shape
    policy = CoalescePolicy(inputs.coalesce_gap, inputs.max_block)
    per_mb = max(1, shape.micro_batch_len // shape.tokens_per_sample)
    full, rest = divmod(shape.samples, per_mb)
    micro_batches = full + (1 if rest else 0)
    dummies = (-micro_batches) % shape.dp
    groups: list[tuple[int, int, bool]] = []  # (count, samples in it, dummy)
    if full:
        groups.append((full, per_mb, False))
    if rest:
        groups.append((1, rest, False))
    if dummies:
        groups.append((dummies, per_mb if full else rest, True))
    gets = bytes_read = windows = 0
    first_reads: WindowReads | None = None
    for count, samples, dummy in groups:
        segments, n = _micro_batch(shape, samples, 0, dummy=dummy)
        reads = window_reads(segments, n, shape, policy, inputs.mask_width)
        first_reads = first_reads or reads
        gets += count * sum(reads.gets)
        bytes_read += count * sum(reads.bytes_fetched)
        windows += count * shape.cp
    assert first_reads is not None
    turns = _turns(shape)
    puts = shape.samples * len(turns)
    written = shape.samples * sum(_blob_bytes(shape, t) for t in turns)
    step_s = 3600.0 / inputs.steps_per_hour
    peak = written * (inputs.max_off_policy_steps + 2)
    put_rate = puts / step_s
    get_rate = gets / min(inputs.read_window_s, step_s)
    lists = math.ceil(puts / 1000)  # the backstop lists a version prefix, 1,000 keys a page
    cost_requests = (
        puts / 1000 * PRICES["put_per_1000"]
        + gets / 1000 * PRICES["get_per_1000"]
        + lists / 1000 * PRICES["list_per_1000"]
    )
    stored_gb = peak / 1e9
    cost_storage = stored_gb * PRICES["storage_per_gb_month"] * (step_s / 3600) / HOURS_PER_MONTH
    return PlanResult(
        inputs=inputs,
        puts=puts,
        blob_bytes_mean=written / puts,
        bytes_written=written,
        micro_batches=micro_batches,
        dummies=dummies,
        gets=gets,
        bytes_read=bytes_read,
        gets_per_window=gets / windows,
        bytes_per_window=bytes_read / windows,
        peak_stored_bytes=peak,
        put_rate_per_prefix=put_rate,
        get_rate_per_prefix=get_rate,
        needs_hash_prefix=put_rate > S3_LIMITS["put_per_s"] or get_rate > S3_LIMITS["get_per_s"],
        cost_requests=cost_requests,
        cost_storage=cost_storage,
        step_s=step_s,
        per_window=first_reads,
    )


def format_plan(result: PlanResult) -> Report:
    """The plan as a report (table rows)."""
    i, shape = result.inputs, result.inputs.shape
    report = Report(
        "plan",
        f"capacity model: {shape.samples} samples x {shape.tokens_per_sample:,} tokens, "
        f"{shape.turns} turns, {shape.layers} x {shape.top_k} routing, DP {shape.dp} x CP "
        f"{shape.cp}, {i.steps_per_hour:g} steps/h",
        data=result.as_json(),
        notes=[
            "S3 Standard list prices, US East (N. Virginia): PUT $0.005 and GET $0.0004 per "
            "1,000, DELETE free, $0.023 per GB-month (as last changed in 2016-12)",
        ],
    )
    report.add("PUTs per step (one blob per request)", f"{result.puts:,}")
    report.add("bytes written per step", f"{result.bytes_written / 1e9:,.2f} GB "
               f"({result.blob_bytes_mean / 1e6:.2f} MB per blob)")  # fmt: skip
    report.add(
        f"per inference server ({i.servers})",
        f"{result.puts / i.servers:,.0f} PUTs, "
        f"{result.bytes_written / i.servers / result.step_s / 1e6:,.2f} MB/s written on average",
    )
    report.add(
        "GETs per step after coalescing",
        f"{result.gets:,} ({result.gets_per_window:.1f} per rank window, "
        f"{result.micro_batches} micro batches + {result.dummies} dummies x CP {shape.cp})",
    )
    report.add("bytes read per step", f"{result.bytes_read / 1e9:,.2f} GB "
               f"({result.bytes_per_window / 1e6:.2f} MB per rank window)")  # fmt: skip
    report.add(
        "peak bytes stored",
        f"{result.peak_stored_bytes / 1e9:,.1f} GB ({i.max_off_policy_steps} + 2 steps of blobs)",
    )
    report.add(
        "PUT rate per version prefix",
        f"{result.put_rate_per_prefix:,.1f}/s (limit {S3_LIMITS['put_per_s']:,}/s)",
    )
    report.add(
        f"GET rate per prefix, reads within {i.read_window_s:g} s",
        f"{result.get_rate_per_prefix:,.0f}/s (limit {S3_LIMITS['get_per_s']:,}/s)",
    )
    report.add(
        "keys need a hash prefix",
        "yes: spread keys over several prefixes" if result.needs_hash_prefix else "no",
    )
    report.add(
        "cost per step (requests + storage)",
        f"${result.cost_per_step:.4f} (${result.cost_requests:.4f} + ${result.cost_storage:.4f})",
    )
    report.add("cost per day", f"${result.cost_per_day:,.2f}")
    return report


def run(ctx: BenchContext) -> Report:
    """``bench plan``: the model for the batch scenario's shape (scaled like it), and for
    the read scenario's micro batch on a file store, whose GETs the read scenario measures."""
    result = plan(PlanInputs(shape=BATCH_SHAPE.scaled(ctx.scale)))
    report = format_plan(result)
    read = plan(
        PlanInputs(shape=READ_SHAPE.scaled(ctx.scale), coalesce_gap=4 << 10, max_block=16 << 20)
    )
    report.add(
        "read scenario's micro batch (file store): per window",
        f"{read.gets_per_window:.1f} GETs, {read.bytes_per_window / 1e6:.2f} MB",
    )
    report.data["read_shape"] = read.as_json()
    return report


def inputs_from_args(values: dict[str, Any]) -> PlanInputs:
    """`PlanInputs` from command-line values (None: keep the default); a bad value raises
    `ValueError`."""
    shape_fields = {
        k: v for k, v in values.items() if k in RunShape.__dataclass_fields__ and v is not None
    }
    plan_fields = {
        k: v
        for k, v in values.items()
        if k in PlanInputs.__dataclass_fields__ and v is not None and k != "shape"
    }
    return PlanInputs(shape=replace(BATCH_SHAPE, **shape_fields), **plan_fields)
