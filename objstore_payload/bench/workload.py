"""Synthetic rollouts of a `RunShape`: blobs written through the real writer, and the
same rows as inline samples.

Routing bytes come from ``Generator.bytes`` masked to the expert range (random ids at
memory speed: a full-scale batch has 800 MB of routing). Each turn's last position has no
routing row (a server writes ``n - 1`` rows for ``n`` forwarded tokens); the inline copy
holds zeros there, which is what a by-handle read gives for an uncovered position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from objstore_payload.adapters.rollout import MicroBatch, Sample, make_sample, prepare_batch
from objstore_payload.bench.shape import RunShape
from objstore_payload.segment import Segment
from objstore_payload.store.store import Store
from objstore_payload.writer import PayloadWriter, RequestArrays

__all__ = ["SampleRows", "by_handle_micro_batches", "sample_rows", "write_sample"]

VOCAB = 151_936


@dataclass(frozen=True)
class SampleRows:
    """One sample's arrays."""

    token_ids: np.ndarray
    loss_mask: np.ndarray
    routing: np.ndarray
    """``[n, layers, top_k]``, zero on each turn's last position."""
    mask_counts: np.ndarray
    """One count per token (zero on prompt tokens)."""
    mask_ids: np.ndarray
    turns: tuple[tuple[int, int, int], ...]
    """``(start, prompt, completion)`` of each turn."""


def sample_rows(shape: RunShape, rng: np.random.Generator) -> SampleRows:
    """Random arrays for one sample of ``shape``."""
    n = shape.tokens_per_sample
    row = (shape.layers, shape.top_k)
    raw = np.frombuffer(rng.bytes(n * shape.routing_row_bytes), dtype=shape.routing_dtype)
    routing = (raw % shape.experts).astype(shape.routing_dtype).reshape(n, *row)
    counts = np.zeros(n, np.int32)
    loss_mask = np.zeros(n, np.uint8)
    turns, start = [], 0
    for prompt, completion in shape.turn_lengths():
        end = start + prompt + completion
        routing[end - 1] = 0
        counts[start + prompt : end] = shape.mask_counts(rng, completion)
        loss_mask[start + prompt : end] = 1
        turns.append((start, prompt, completion))
        start = end
    ids = rng.integers(0, VOCAB, int(counts.sum()), dtype=np.int32)
    return SampleRows(
        token_ids=rng.integers(0, VOCAB, n, dtype=np.int32),
        loss_mask=loss_mask,
        routing=routing,
        mask_counts=counts,
        mask_ids=ids,
        turns=tuple(turns),
    )


def write_sample(store: Store, destination: str, shape: RunShape, rows: SampleRows) -> Sample:
    """Write each turn of ``rows`` as its own blob; the sample with segments."""
    writer = PayloadWriter(store)
    segments: list[Segment] = []
    id_starts = np.concatenate([[0], np.cumsum(rows.mask_counts, dtype=np.int64)])
    for start, prompt, completion in rows.turns:
        end = start + prompt + completion
        arrays = RequestArrays(
            prompt_len=prompt,
            completion_len=completion,
            routed_experts=rows.routing[start : end - 1],
            sampling_mask=(
                rows.mask_counts[start + prompt : end],
                rows.mask_ids[id_starts[start + prompt] : id_starts[end]],
            ),
            num_experts=shape.experts,
        )
        segments += [s.shift(start) for s in writer.write(destination, arrays)]
    return make_sample(rows.token_ids, rows.loss_mask, segments=segments)


def inline_sample(rows: SampleRows) -> Sample:
    """The same rows carried inline."""
    return make_sample(
        rows.token_ids,
        rows.loss_mask,
        routed_experts=rows.routing,
        sampling_mask=(rows.mask_counts, rows.mask_ids),
    )


def samples_of(
    shape: RunShape, seed: int, make: Callable[[SampleRows], Sample]
) -> Iterator[Sample]:
    """``make`` applied to each sample's rows (generated one at a time)."""
    rng = np.random.default_rng(seed)
    for _ in range(shape.samples):
        yield make(sample_rows(shape, rng))


def by_handle_micro_batches(
    store: Store, shape: RunShape, *, seed: int = 0, version: int = 0
) -> list[list[MicroBatch]]:
    """Write a batch of ``shape`` and pack it: micro batches per DP rank."""
    destination = store.version_prefix(version)
    samples = list(
        samples_of(shape, seed, lambda rows: write_sample(store, destination, shape, rows))
    )
    return prepare_batch(
        samples, seq_len=shape.micro_batch_len, dp_size=shape.dp, pad_to_multiple_of=shape.cp
    )
