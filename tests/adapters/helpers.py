"""Twins of the same samples: inline arrays, and segments into blobs written to a store."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from objstore_payload import Segment, Store
from objstore_payload.adapters.rollout import Sample, make_sample
from objstore_payload.layout import FixedRegion, RaggedRegion, encode_blob


@dataclass(frozen=True)
class SampleArrays:
    """One sample's arrays, position-aligned from its first token."""

    token_ids: np.ndarray
    loss_mask: np.ndarray
    routing: np.ndarray | None  # [n, layers, top_k]
    counts: np.ndarray | None  # [n] int32
    ids: np.ndarray | None  # int32
    logprobs: np.ndarray | None  # float32, parallel to ids
    routing_cut: int  # by segments, routing is split across two blobs here
    mask_cuts: tuple[int, ...]  # by segments, mask rows are split into segments here

    def inline(self) -> Sample:
        return make_sample(
            self.token_ids,
            self.loss_mask,
            routed_experts=self.routing,
            sampling_mask=None if self.counts is None else (self.counts, self.ids),  # type: ignore[arg-type]
            sampling_mask_logprobs=(
                None if self.logprobs is None else (self.counts, self.logprobs)  # type: ignore[arg-type]
            ),
        )

    def by_segments(self, store: Store, destination: str) -> Sample:
        segments: list[Segment] = []
        if self.routing is not None:
            n = self.routing.shape[0]
            for lo, hi in ((0, self.routing_cut), (self.routing_cut, n)):
                if hi > lo:
                    segments += write(
                        store, destination, [FixedRegion("routed_experts", lo, self.routing[lo:hi])]
                    )
        if self.counts is not None:
            assert self.ids is not None
            # As a server writes them: mask rows start at the first completion token.
            first = int(np.argmax(self.loss_mask)) if self.loss_mask.any() else self.counts.size
            assert not self.counts[:first].any()
            cuts = [c for c in self.mask_cuts if first < c < self.counts.size]
            bounds = (first, *cuts, self.counts.size)
            starts = np.concatenate([[0], np.cumsum(self.counts)])
            for lo, hi in itertools.pairwise(bounds):
                if hi <= lo:
                    continue
                counts = self.counts[lo:hi]
                regions: list[FixedRegion | RaggedRegion] = [
                    RaggedRegion("sampling_mask", lo, counts, self.ids[starts[lo] : starts[hi]])
                ]
                if self.logprobs is not None:
                    regions.append(
                        RaggedRegion(
                            "sampling_mask_logprobs",
                            lo,
                            counts,
                            self.logprobs[starts[lo] : starts[hi]],
                        )
                    )
                segments += write(store, destination, regions)
        return make_sample(self.token_ids, self.loss_mask, segments=segments)


def write(
    store: Store, destination: str, regions: list[FixedRegion | RaggedRegion]
) -> list[Segment]:
    """One blob holding ``regions`` (at their own positions); its segments."""
    blob = encode_blob(regions)
    uri = store.new_blob_uri(destination)
    store.put(uri, blob.parts, blob.size)
    return blob.segments(uri)
