"""The demo's trainer half (needs torch): the same requests as rollout samples, packed into
micro batches for 2 DP ranks, read per CP rank through the prefetching loader, and
compared with the inline path's tensors."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from objstore_payload.adapters.loader import PrefetchLoader
from objstore_payload.adapters.rollout import MicroBatch, prepare_batch
from objstore_payload.adapters.torch_tensors import micro_batch_tensors, window_for_rank
from objstore_payload.adapters.traces import Turn, trace_to_samples
from objstore_payload.cli.demo import SyntheticRequest
from objstore_payload.reader import PayloadReader
from objstore_payload.segment import Segment
from objstore_payload.store.store import Store

__all__ = ["TrainerResult", "run_trainer_path"]


@dataclass
class TrainerResult:
    """What the trainer half measured."""

    samples: int = 0
    micro_batches: int = 0
    dp_size: int = 0
    cp_size: int = 0
    rank_windows: int = 0
    rank_windows_equal: int = 0
    bytes_read_per_rank: float = 0.0
    payload_bytes_per_micro_batch: float = 0.0
    seconds: float = 0.0

    @property
    def parity_ok(self) -> bool:
        """Every rank window equals the inline tensors bit for bit."""
        return self.rank_windows > 0 and self.rank_windows == self.rank_windows_equal


def _turn(request: SyntheticRequest, segments: Sequence[Segment] | None) -> Turn:
    tokens = request.token_ids()
    prompt, completion = tokens[: request.prompt_len], tokens[request.prompt_len :]
    if segments is not None:
        return Turn(prompt, completion, segments=tuple(segments))
    return Turn(
        prompt,
        completion,
        routed_experts=request.routing,
        sampling_mask=(request.mask_counts, request.mask_ids),
        sampling_mask_logprobs=request.mask_logprobs,
    )


def _micro_batch_payload_bytes(micro_batch: MicroBatch) -> int:
    return sum(
        seg.nbytes if seg.field in ("routed_experts", "routed_expert_weights") else 0
        for seg in micro_batch.segments
    )


def run_trainer_path(
    store: Store,
    requests: Sequence[SyntheticRequest],
    segments: Sequence[Sequence[Segment]],
    *,
    seq_len: int = 8192,
    dp_size: int = 2,
    cp_size: int = 4,
) -> TrainerResult:
    """Pack, read per rank, compare with inline; returns the counts."""
    started = time.perf_counter()
    inline = [s for r in requests for s in trace_to_samples([_turn(r, None)])]
    by_segments = [
        s
        for r, segs in zip(requests, segments, strict=True)
        for s in trace_to_samples([_turn(r, segs)])
    ]
    inline_ranks = prepare_batch(
        inline, seq_len=seq_len, dp_size=dp_size, pad_to_multiple_of=cp_size
    )
    segment_ranks = prepare_batch(
        by_segments, seq_len=seq_len, dp_size=dp_size, pad_to_multiple_of=cp_size
    )
    result = TrainerResult(samples=len(inline), dp_size=dp_size, cp_size=cp_size)
    reader = PayloadReader(store)
    read_bytes = payload_bytes = 0
    for inline_mbs, segment_mbs in zip(inline_ranks, segment_ranks, strict=True):
        result.micro_batches += len(segment_mbs)
        payload_bytes += sum(_micro_batch_payload_bytes(mb) for mb in segment_mbs)
        for cp_rank in range(cp_size):
            before = store.stats.bytes_requested
            with PrefetchLoader(segment_mbs, reader, cp_rank=cp_rank, cp_size=cp_size) as loader:
                for (_mb, got), want_mb in zip(loader, inline_mbs, strict=True):
                    want = window_for_rank(micro_batch_tensors(want_mb), cp_rank, cp_size)
                    result.rank_windows += 1
                    if all(
                        _matches(w, g)
                        for w, g in zip(
                            want.as_dict().values(), got.as_dict().values(), strict=True
                        )
                    ):
                        result.rank_windows_equal += 1
            read_bytes += store.stats.bytes_requested - before
    result.bytes_read_per_rank = read_bytes / max(result.rank_windows, 1)
    result.payload_bytes_per_micro_batch = payload_bytes / max(result.micro_batches, 1)
    result.seconds = time.perf_counter() - started
    return result


def _matches(want: torch.Tensor | None, got: torch.Tensor | None) -> bool:
    """Same dtype, shape and bytes (or both absent)."""
    if want is None or got is None:
        return want is None and got is None
    return (
        want.dtype == got.dtype
        and want.shape == got.shape
        and (want.numpy().tobytes() == got.numpy().tobytes())
    )


def format_trainer(result: TrainerResult) -> str:
    """The trainer half's summary lines."""
    share = result.bytes_read_per_rank / max(result.payload_bytes_per_micro_batch, 1)
    return "\n".join(
        [
            f"trainer path (torch): {result.samples} samples -> {result.micro_batches} micro "
            f"batches over {result.dp_size} DP ranks x CP {result.cp_size}, {result.seconds:.2f} s",
            f"  per rank window: {result.bytes_read_per_rank / 1e6:.2f} MB read of "
            f"{result.payload_bytes_per_micro_batch / 1e6:.2f} MB of routing per micro batch "
            f"({share:.0%}, mask offsets and values included)",
            f"  parity with the inline path: {'OK' if result.parity_ok else 'MISMATCH'} "
            f"({result.rank_windows_equal}/{result.rank_windows} rank windows bitwise equal)",
        ]
    )
