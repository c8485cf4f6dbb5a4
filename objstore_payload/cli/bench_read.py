"""``objstore-payload bench read``: one rank's window reads against the local I/O limit.

A realistic micro batch (samples of several turns, each turn its own blob with 48 x 8 uint8
routing and masks of ~1.7 ids per completion token) is written to the store, packed, and
read by every CP rank: the window read itself (`PayloadReader.read_window` over the rank's
field windows, both passes) is timed, and separately the trainer adapter's conversion to
torch tensors (routing widened to int32). The same byte ranges the reader requested (after
merging) are then read with a plain ``os.pread`` loop into reused buffers (the local limit;
file stores only). Reported: time per rank window, throughput, the ratio to raw, and GETs
per distinct blob.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from objstore_payload.reader import PayloadReader
from objstore_payload.store.store import Store
from objstore_payload.writer import PayloadWriter, RequestArrays

__all__ = ["ReadResult", "format_read", "run_read"]

LAYERS, TOP_K, EXPERTS = 48, 8, 128


@dataclass
class ReadResult:
    """Figures of one read benchmark run (medians over repeats)."""

    store: str
    tokens: int
    blobs: int
    cp_size: int
    repeats: int
    window_seconds: list[float] = field(default_factory=list)
    tensor_seconds: list[float] = field(default_factory=list)
    raw_seconds: list[float] = field(default_factory=list)
    bytes_per_window: float = 0.0
    gets_per_window: float = 0.0
    blobs_per_window: float = 0.0

    @property
    def median_window_s(self) -> float:
        """Median time to read one rank window."""
        return statistics.median(self.window_seconds)

    @property
    def median_raw_s(self) -> float | None:
        """Median time of the raw pread loop over the same ranges (file stores)."""
        return statistics.median(self.raw_seconds) if self.raw_seconds else None

    @property
    def ratio_to_raw(self) -> float | None:
        """Reader throughput over raw pread throughput (goal >= 0.5)."""
        raw = self.median_raw_s
        return raw / self.median_window_s if raw else None

    @property
    def gets_per_blob(self) -> float:
        """GETs per distinct blob a window touches (goal <= 2)."""
        return self.gets_per_window / max(self.blobs_per_window, 1)


def _write_micro_batch(store: Store, scale: float, seed: int = 0) -> tuple[list, int, int]:  # type: ignore[type-arg]
    from objstore_payload.adapters.rollout import make_sample, prepare_batch

    rng = np.random.default_rng(seed)
    samples, turns_per_sample = max(1, round(8 * scale)), 4
    writer = PayloadWriter(store)
    built, blobs = [], 0
    for _ in range(samples):
        segments, offset = [], 0
        tokens = []
        for _turn in range(turns_per_sample):
            prompt, completion = 600, 400  # each turn: its own request and blob
            counts = rng.poisson(1.7, completion).astype(np.int32)
            arrays = RequestArrays(
                prompt_len=prompt,
                completion_len=completion,
                routed_experts=rng.integers(
                    0, EXPERTS, (prompt + completion - 1, LAYERS, TOP_K), dtype=np.uint8
                ),
                sampling_mask=(counts, rng.integers(0, 150_000, int(counts.sum()), dtype=np.int32)),
                num_experts=EXPERTS,
            )
            segments += [s.shift(offset) for s in writer.write(store.version_prefix(0), arrays)]
            offset += prompt + completion
            tokens.append(rng.integers(0, 150_000, prompt + completion, dtype=np.int32))
            blobs += 1
        ids = np.concatenate(tokens)
        built.append(make_sample(ids, np.ones(ids.size, np.uint8), segments=segments))
    (micro_batches,) = prepare_batch(
        built, seq_len=offset * samples, dp_size=1, pad_to_multiple_of=8
    )
    return micro_batches, offset * samples, blobs


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


def run_read(store: Store, *, scale: float = 1.0, cp_size: int = 4, repeats: int = 5) -> ReadResult:
    """Write, then read every CP rank's window ``repeats`` times (after one warm-up)."""
    from objstore_payload.adapters.torch_tensors import micro_batch_tensors, plan_window

    micro_batches, tokens, blobs = _write_micro_batch(store, scale)
    result = ReadResult(
        store=store.root.url, tokens=tokens, blobs=blobs, cp_size=cp_size, repeats=repeats
    )
    reader = PayloadReader(store)
    recorder = store.requests is not None
    for micro_batch in micro_batches:
        for cp_rank in range(cp_size):  # warm-up (page cache, engine, imports)
            micro_batch_tensors(micro_batch, cp_rank=cp_rank, cp_size=cp_size, reader=reader)
    blocks: list[tuple[str, int, int]] = []
    windows = 0
    for _ in range(repeats):
        for micro_batch in micro_batches:
            for cp_rank in range(cp_size):
                before_gets, before_bytes = store.stats.get_requests, store.stats.bytes_fetched
                if recorder:
                    assert store.requests is not None
                    store.requests.clear()
                windows_of_rank = plan_window(micro_batch, cp_rank, cp_size)
                started = time.perf_counter()
                reader.read_window(micro_batch.segments, windows_of_rank)
                result.window_seconds.append(time.perf_counter() - started)
                windows += 1
                result.gets_per_window += store.stats.get_requests - before_gets
                result.bytes_per_window += store.stats.bytes_fetched - before_bytes
                if recorder:
                    assert store.requests is not None
                    window_blocks = [
                        (r.path, r.start, r.end) for r in store.requests if r.op == "get"
                    ]
                    result.blobs_per_window += len({path for path, _, _ in window_blocks})
                    blocks = window_blocks
                    if store.root.protocol == "file":
                        sizes = {end - start for _, start, end in window_blocks}
                        buffers = {size: memoryview(bytearray(size)) for size in sizes}
                        _raw_pread(window_blocks, buffers)  # warm
                        started = time.perf_counter()
                        _raw_pread(window_blocks, buffers)
                        result.raw_seconds.append(time.perf_counter() - started)
                started = time.perf_counter()
                micro_batch_tensors(micro_batch, cp_rank=cp_rank, cp_size=cp_size, reader=reader)
                result.tensor_seconds.append(time.perf_counter() - started)
    result.gets_per_window /= max(windows, 1)
    result.bytes_per_window /= max(windows, 1)
    result.blobs_per_window /= max(windows, 1)
    del blocks
    return result


def format_read(result: ReadResult) -> str:
    """The read scenario's table."""
    mb = result.bytes_per_window / 1e6
    lines = [
        f"read: {result.tokens:,}-token micro batch of {result.blobs} blobs, CP {result.cp_size}, "
        f"{result.repeats} repeats, store {result.store}",
        f"  per rank window: {result.median_window_s * 1e3:.2f} ms median, {mb:.2f} MB, "
        f"{mb / result.median_window_s / 1e3:.2f} GB/s (read); "
        f"{statistics.median(result.tensor_seconds) * 1e3:.2f} ms as torch tensors "
        "(read + routing widened to int32)",
        f"  GETs per window {result.gets_per_window:.1f} over {result.blobs_per_window:.1f} blobs: "
        f"{result.gets_per_blob:.2f} GETs per distinct blob (goal <= 2)",
    ]
    if result.ratio_to_raw is not None:
        assert result.median_raw_s is not None
        lines.append(
            f"  raw os.pread of the same ranges: {result.median_raw_s * 1e3:.2f} ms; reader "
            f"throughput / raw = {result.ratio_to_raw:.2f} (goal >= 0.5)"
        )
    return "\n".join(lines)


def write_json(result: ReadResult, out: Path) -> Path:
    """Save the figures (and derived ratios) as JSON under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "read.json"
    data = asdict(result) | {
        "median_window_s": result.median_window_s,
        "median_raw_s": result.median_raw_s,
        "ratio_to_raw": result.ratio_to_raw,
        "gets_per_blob": result.gets_per_blob,
    }
    path.write_text(json.dumps(data, indent=2))
    return path
