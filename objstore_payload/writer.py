"""The writer: one request's arrays become one blob and a handful of segments.

Positions follow the data model: routing rows are end-anchored (the last sampled token
is never forwarded, so ``rows`` rows cover ``[prompt_len + completion_len - 1 - rows,
prompt_len + completion_len - 1)``, which stays right when a P/D decode instance emits
rows only from its first forward); mask row i (and its logprobs) sits at
``prompt_len + i``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from objstore_payload.errors import InvalidPayloadError
from objstore_payload.layout import (
    EncodedBlob,
    FixedRegion,
    RaggedRegion,
    RegionEntry,
    encode_blob,
)
from objstore_payload.segment import MAX_POSITION, Segment
from objstore_payload.store.store import Store

__all__ = ["PayloadWriter", "RequestArrays", "WrittenBlob", "compact_routing", "routing_start"]


def compact_routing(rows: np.ndarray, num_experts: int | None = None) -> np.ndarray:
    """Routing ids as uint8 (<= 256 experts) or uint16, C-contiguous.

    With ``num_experts`` the dtype follows the model, so every request of a run gets
    the same dtype; without it, it follows this request's largest id.
    """
    if rows.ndim != 3:
        raise InvalidPayloadError(
            f"routed_experts must be [rows, layers, top_k], got shape {rows.shape}"
        )
    if rows.dtype.kind not in "iu":
        raise InvalidPayloadError(f"routed_experts must hold integer ids, got {rows.dtype}")
    if rows.size:
        low, high = int(rows.min()), int(rows.max())
        if low < 0 or high > np.iinfo(np.uint16).max:
            raise InvalidPayloadError(
                f"routed_experts ids must lie in [0, 65535], got [{low}, {high}]"
            )
        if num_experts is not None and high >= num_experts:
            raise InvalidPayloadError(f"routed_experts id {high} >= num_experts {num_experts}")
    else:
        high = 0
    limit = num_experts if num_experts is not None else high + 1
    dtype = np.uint8 if limit <= 256 else np.uint16
    return np.ascontiguousarray(rows, dtype=dtype)


def routing_start(prompt_len: int, completion_len: int, rows: int) -> int:
    """Position of the first of ``rows`` end-anchored routing rows."""
    start = prompt_len + completion_len - 1 - rows
    if start < 0:
        raise InvalidPayloadError(
            f"{rows} routing rows do not fit a sequence of {prompt_len} + {completion_len} "
            "tokens (at most one row per forwarded token)"
        )
    return start


@dataclass(frozen=True, kw_only=True)
class RequestArrays:
    """What one finished request (one choice) produced.

    Arrays are taken as they come from the producer: no per-token Python objects.
    """

    prompt_len: int
    completion_len: int
    routed_experts: np.ndarray | None = None
    """``[rows, layers, top_k]`` integer expert ids, end-anchored."""
    routed_expert_weights: np.ndarray | None = None
    """``[rows, layers, top_k]`` float32 router weights, same rows as the routing."""
    sampling_mask: tuple[np.ndarray, np.ndarray] | None = None
    """CSR ``(counts, ids)``: one count per completion token, the kept ids concatenated."""
    sampling_mask_logprobs: np.ndarray | None = None
    """float32 logprob of each kept id, parallel to the mask's ids."""
    num_experts: int | None = None
    """Experts per layer, to fix the routing dtype (uint8 up to 256, else uint16)."""

    def __post_init__(self) -> None:
        for name in ("prompt_len", "completion_len"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= MAX_POSITION:
                raise InvalidPayloadError(f"{name} must be a non-negative int, got {value!r}")
        if self.prompt_len + self.completion_len > MAX_POSITION:
            raise InvalidPayloadError("sequence is longer than the largest token position")

    def regions(self) -> list[FixedRegion | RaggedRegion]:
        """The blob regions of these arrays, in layout order."""
        regions: list[FixedRegion | RaggedRegion] = []
        routing_rows: int | None = None
        if self.routed_experts is not None:
            rows = compact_routing(np.asarray(self.routed_experts), self.num_experts)
            routing_rows = rows.shape[0]
            start = routing_start(self.prompt_len, self.completion_len, routing_rows)
            regions.append(FixedRegion("routed_experts", start, rows))
        if self.routed_expert_weights is not None:
            weights = np.asarray(self.routed_expert_weights)
            if weights.ndim != 3:
                raise InvalidPayloadError(
                    f"routed_expert_weights must be [rows, layers, top_k], got {weights.shape}"
                )
            if weights.dtype != np.float32:
                raise InvalidPayloadError(
                    f"routed_expert_weights must be float32, got {weights.dtype}"
                )
            if routing_rows is not None and weights.shape[0] != routing_rows:
                raise InvalidPayloadError(
                    f"routed_expert_weights has {weights.shape[0]} rows, routing has {routing_rows}"
                )
            start = routing_start(self.prompt_len, self.completion_len, weights.shape[0])
            regions.append(FixedRegion("routed_expert_weights", start, weights))
        counts: np.ndarray | None = None
        if self.sampling_mask is not None:
            counts, ids = (np.asarray(a) for a in self.sampling_mask)
            if counts.ndim != 1 or counts.shape[0] != self.completion_len:
                raise InvalidPayloadError(
                    f"sampling_mask needs one count per completion token ({self.completion_len}), "
                    f"got counts of shape {counts.shape}"
                )
            regions.append(RaggedRegion("sampling_mask", self.prompt_len, counts, ids))
        if self.sampling_mask_logprobs is not None:
            if counts is None:
                raise InvalidPayloadError(
                    "sampling_mask_logprobs needs the sampling_mask it is parallel to"
                )
            logprobs = np.asarray(self.sampling_mask_logprobs)
            regions.append(
                RaggedRegion("sampling_mask_logprobs", self.prompt_len, counts, logprobs)
            )
        return regions


@dataclass(frozen=True, slots=True)
class WrittenBlob:
    """A durable blob: where it is, its size, its trailer entries and its segments."""

    uri: str
    size: int
    regions: tuple[RegionEntry, ...]
    segments: list[Segment]

    def region_bytes(self) -> dict[str, int]:
        """Bytes per field (a ragged field's offset words and values together)."""
        return {r.field: r.nbytes for r in self.regions}


class PayloadWriter:
    """Writes each request's arrays as one blob under a destination of ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def encode(self, arrays: RequestArrays) -> EncodedBlob | None:
        """The blob for ``arrays``, or None when there is nothing to write."""
        regions = arrays.regions()
        return encode_blob(regions) if regions else None

    def write_blob(self, destination: str, arrays: RequestArrays) -> WrittenBlob | None:
        """Write one blob under ``destination`` (a URI prefix under the store's root, e.g.
        ``s3://bucket/run/payloads/v7``); None when there is nothing to write. Returns once
        the blob is durable."""
        uri = self.store.new_blob_uri(destination)
        blob = self.encode(arrays)
        if blob is None:
            return None
        segments = blob.segments(uri)  # validated before anything is written
        self.store.put(uri, blob.parts, blob.size)
        return WrittenBlob(uri, blob.size, blob.regions, segments)

    async def awrite_blob(self, destination: str, arrays: RequestArrays) -> WrittenBlob | None:
        """Async `write_blob`: encoding and the upload both run off the event loop."""
        uri = self.store.new_blob_uri(destination)
        blob = await asyncio.to_thread(self.encode, arrays)
        if blob is None:
            return None
        segments = blob.segments(uri)  # validated before anything is written
        await self.store.aput(uri, blob.parts, blob.size)
        return WrittenBlob(uri, blob.size, blob.regions, segments)

    def write(self, destination: str, arrays: RequestArrays) -> list[Segment]:
        """`write_blob`, returning just the segments (empty when nothing was written)."""
        written = self.write_blob(destination, arrays)
        return written.segments if written is not None else []

    async def awrite(self, destination: str, arrays: RequestArrays) -> list[Segment]:
        """Async `write`."""
        written = await self.awrite_blob(destination, arrays)
        return written.segments if written is not None else []
