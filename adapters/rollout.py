"""Rollout samples and micro batches: the wire messages, and the packing that carries
their per-token payload through truncation, packing, padding and the DP split.

Every field of a sample travels one of two ways: inline (packed arrays, position-aligned
from the sample's first token) or as segments (handles into blobs). Packing never reads a
blob: truncation clips segments, packing shifts them by the sample's offset, padding adds
nothing (uncovered positions read as the field's fill), and dummy micro batches keep
routing and drop masks. The inline path does the same to the arrays, so that both give
the same trainer tensors bit for bit.

Wire rules: structs are msgpack arrays; new attributes are appended with defaults and
never reordered (``segments`` is last), so an older decoder keeps working.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec
import numpy as np

from objstore_payload.codec import PackedArray, decode_array, encode_array
from objstore_payload.errors import InvalidPayloadError
from objstore_payload.fields import FIELDS, get_field
from objstore_payload.segment import Segment, clip_segments

__all__ = [
    "MicroBatch",
    "PackedCsr",
    "Sample",
    "decode_micro_batch",
    "decode_sample",
    "encode_message",
    "make_dummy",
    "make_sample",
    "pack",
    "pad",
    "prepare_batch",
    "split_for_dp",
    "truncate",
]

log = logging.getLogger(__name__)

FIXED_FIELDS: Final = tuple(name for name, spec in FIELDS.items() if not spec.ragged)
RAGGED_FIELDS: Final = tuple(name for name, spec in FIELDS.items() if spec.ragged)
_ROUTING_FIELDS: Final = frozenset({"routed_experts", "routed_expert_weights"})


class PackedCsr(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """An inline ragged field: ``counts`` (int32, one per token) and the values of all rows
    concatenated (``values``, the field's value dtype)."""

    counts: PackedArray
    values: PackedArray


class Sample(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One training sample: a token sequence and its per-token payload.

    Inline fields are position-aligned from the first token (fixed-width: ``[n, ...]``;
    ragged: one count per token). Segment positions are relative to the first token.
    """

    token_ids: PackedArray
    """int32 ``[n]``."""
    loss_mask: PackedArray
    """uint8 ``[n]``: 1 where the token is trained on."""
    multimodal: bool = False
    """Multimodal samples are read whole: the model may defer context parallelism."""
    routed_experts: PackedArray | None = None
    routed_expert_weights: PackedArray | None = None
    sampling_mask: PackedCsr | None = None
    sampling_mask_logprobs: PackedCsr | None = None
    segments: tuple[Segment, ...] = ()
    """By-segment fields (appended last: older decoders ignore it)."""

    @property
    def num_tokens(self) -> int:
        """Sequence length."""
        return int(self.token_ids.shape[0])


class MicroBatch(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Samples packed into one sequence, padded to a multiple of the CP degree."""

    input_ids: PackedArray
    loss_mask: PackedArray
    position_ids: PackedArray
    """int32: each sample's positions restart at 0, and so do the padding's."""
    sample_lengths: tuple[int, ...]
    multimodal: bool = False
    dummy: bool = False
    """A filler that evens out DP ranks: fully loss-masked, routing kept, masks dropped."""
    routed_experts: PackedArray | None = None
    routed_expert_weights: PackedArray | None = None
    sampling_mask: PackedCsr | None = None
    sampling_mask_logprobs: PackedCsr | None = None
    segments: tuple[Segment, ...] = ()
    """By-segment fields, positions relative to ``input_ids`` (appended last)."""

    @property
    def num_tokens(self) -> int:
        """Sequence length, padding included."""
        return int(self.input_ids.shape[0])

    @property
    def transport(self) -> str:
        """``segments``, ``inline`` or ``none``: how this micro batch carries its payload."""
        return _transport(self)


_SAMPLE_DECODER: Final = msgspec.msgpack.Decoder(Sample)
_MICRO_BATCH_DECODER: Final = msgspec.msgpack.Decoder(MicroBatch)
_ENCODER: Final = msgspec.msgpack.Encoder()


def encode_message(message: Sample | MicroBatch) -> bytes:
    """A sample or micro batch as msgpack."""
    return _ENCODER.encode(message)


def decode_sample(data: bytes) -> Sample:
    """Inverse of `encode_message` for samples; malformed input raises
    `InvalidPayloadError`."""
    try:
        sample = _SAMPLE_DECODER.decode(data)
    except (msgspec.MsgspecError, ValueError, TypeError) as exc:
        raise InvalidPayloadError(f"invalid sample message: {exc}") from exc
    check_sample(sample)
    return sample


def decode_micro_batch(data: bytes) -> MicroBatch:
    """Inverse of `encode_message` for micro batches."""
    try:
        micro_batch = _MICRO_BATCH_DECODER.decode(data)
    except (msgspec.MsgspecError, ValueError, TypeError) as exc:
        raise InvalidPayloadError(f"invalid micro batch message: {exc}") from exc
    check_sample(micro_batch)
    return micro_batch


# -- arrays ---------------------------------------------------------------------------
def _array(packed: PackedArray, name: str) -> np.ndarray:
    try:
        return decode_array(packed, name=name)
    except ValueError as exc:
        raise InvalidPayloadError(str(exc)) from exc


def _csr(packed: PackedCsr, field: str) -> tuple[np.ndarray, np.ndarray]:
    counts = _array(packed.counts, f"{field}.counts")
    values = _array(packed.values, f"{field}.values")
    if counts.ndim != 1 or counts.dtype != np.int32:
        raise InvalidPayloadError(f"{field}.counts must be 1-D int32")
    if values.ndim != 1 or values.dtype.name != get_field(field).value_dtype:
        raise InvalidPayloadError(f"{field}.values must be 1-D {get_field(field).value_dtype}")
    if counts.size and int(counts.min()) < 0:
        raise InvalidPayloadError(f"{field}.counts must be non-negative")
    if int(counts.sum(dtype=np.int64)) != values.size:
        raise InvalidPayloadError(f"{field}: counts do not add up to the number of values")
    return counts, values


def _pack_csr(counts: np.ndarray, values: np.ndarray) -> PackedCsr:
    return PackedCsr(
        counts=encode_array(np.ascontiguousarray(counts, dtype=np.int32)),
        values=encode_array(values),
    )


def make_sample(
    token_ids: np.ndarray,
    loss_mask: np.ndarray,
    *,
    routed_experts: np.ndarray | None = None,
    routed_expert_weights: np.ndarray | None = None,
    sampling_mask: tuple[np.ndarray, np.ndarray] | None = None,
    sampling_mask_logprobs: tuple[np.ndarray, np.ndarray] | None = None,
    segments: Iterable[Segment] = (),
    multimodal: bool = False,
) -> Sample:
    """A checked `Sample` from numpy arrays (ragged fields as ``(counts, values)``)."""
    sample = Sample(
        token_ids=encode_array(np.ascontiguousarray(token_ids, dtype=np.int32)),
        loss_mask=encode_array(np.ascontiguousarray(loss_mask, dtype=np.uint8)),
        multimodal=multimodal,
        routed_experts=None if routed_experts is None else encode_array(routed_experts),
        routed_expert_weights=(
            None if routed_expert_weights is None else encode_array(routed_expert_weights)
        ),
        sampling_mask=None if sampling_mask is None else _pack_csr(*sampling_mask),
        sampling_mask_logprobs=(
            None if sampling_mask_logprobs is None else _pack_csr(*sampling_mask_logprobs)
        ),
        segments=tuple(segments),
    )
    check_sample(sample)
    return sample


def check_sample(sample: Sample | MicroBatch) -> None:
    """Raise `InvalidPayloadError` unless every inline array and segment fits the sequence."""
    ids = sample.token_ids if isinstance(sample, Sample) else sample.input_ids
    n = int(ids.shape[0]) if len(ids.shape) == 1 else -1
    if n < 0 or _array(ids, "token_ids").dtype != np.int32:
        raise InvalidPayloadError("token ids must be a 1-D int32 array")
    if sample.loss_mask.shape != (n,) or _array(sample.loss_mask, "loss_mask").dtype != np.uint8:
        raise InvalidPayloadError(f"loss_mask must be uint8 [{n}]")
    if isinstance(sample, MicroBatch):
        if sample.position_ids.shape != (n,):
            raise InvalidPayloadError(f"position_ids must be [{n}]")
        if sum(sample.sample_lengths) > n or min(sample.sample_lengths, default=0) < 0:
            raise InvalidPayloadError("sample_lengths do not fit the micro batch")
    for name in FIXED_FIELDS:
        packed: PackedArray | None = getattr(sample, name)
        if packed is None:
            continue
        rows = _array(packed, name)
        spec = get_field(name)
        if rows.ndim != 1 + spec.row_ndim or rows.shape[0] != n:
            raise InvalidPayloadError(f"inline {name} must have one row per token ({n})")
        if rows.dtype.name not in spec.stored_dtypes:
            raise InvalidPayloadError(f"inline {name} must be one of {sorted(spec.stored_dtypes)}")
    for name in RAGGED_FIELDS:
        csr: PackedCsr | None = getattr(sample, name)
        if csr is not None and _csr(csr, name)[0].size != n:
            raise InvalidPayloadError(f"inline {name} must have one count per token ({n})")
    if sample.segments and any(getattr(sample, name) is not None for name in FIELDS):
        # Packing, padding and the trainer read a sample's payload one way; a sample that
        # carried some fields inline and others by segments would lose one kind.
        raise InvalidPayloadError(
            "a sample carries its payload inline or by segments, not both (inline: "
            f"{[n for n in FIELDS if getattr(sample, n) is not None]}, segments: "
            f"{sorted({s.field for s in sample.segments})})"
        )
    for seg in sample.segments:
        get_field(seg.field)
        if seg.end > n:
            raise InvalidPayloadError(
                f"{seg.field} segment covers [{seg.pos}, {seg.end}) past the {n} tokens"
            )


def _transport(sample: Sample | MicroBatch) -> str:
    if sample.segments:
        return "segments"
    if any(getattr(sample, name) is not None for name in FIELDS):
        return "inline"
    return "none"


def _has(sample: Sample | MicroBatch, field: str) -> bool:
    return getattr(sample, field) is not None or any(s.field == field for s in sample.segments)


# -- truncation -----------------------------------------------------------------------
def truncate(sample: Sample, seq_len: int) -> Sample:
    """The sample cut to its first ``seq_len`` tokens.

    Segments are clipped. A ragged field whose every row is cut keeps a zero-row
    placeholder segment, so the trainer still gets its all-fill, width-1 tensor, as the
    inline path (all counts zero) gives.
    """
    n = sample.num_tokens
    if n <= seq_len:
        return sample
    changes: dict[str, object] = {
        "token_ids": encode_array(_array(sample.token_ids, "token_ids")[:seq_len]),
        "loss_mask": encode_array(_array(sample.loss_mask, "loss_mask")[:seq_len]),
    }
    for name in FIXED_FIELDS:
        packed: PackedArray | None = getattr(sample, name)
        if packed is not None:
            changes[name] = encode_array(_array(packed, name)[:seq_len])
    for name in RAGGED_FIELDS:
        csr: PackedCsr | None = getattr(sample, name)
        if csr is not None:
            counts, values = _csr(csr, name)
            kept = counts[:seq_len]
            changes[name] = _pack_csr(kept, values[: int(kept.sum(dtype=np.int64))])
    if sample.segments:
        clipped = clip_segments(sample.segments, 0, seq_len)
        present = {s.field for s in clipped}
        for seg in sample.segments:
            if seg.field not in present:
                present.add(seg.field)
                clipped.append(msgspec.structs.replace(seg, pos=0, rows=0))
        changes["segments"] = tuple(clipped)
    return msgspec.structs.replace(sample, **changes)


# -- packing --------------------------------------------------------------------------
def _bin_key(sample: Sample) -> tuple[object, ...]:
    # A micro batch never mixes samples with and without routing (the forward pass
    # replays routing for all or none), nor inline with by-segment payload.
    return (
        _transport(sample),
        sample.multimodal,
        tuple(_has(sample, name) for name in sorted(_ROUTING_FIELDS)),
    )


@dataclass
class _Bin:
    key: tuple[object, ...]
    samples: list[Sample]
    tokens: int


def pack(samples: Sequence[Sample], seq_len: int) -> list[MicroBatch]:
    """Truncate each sample to ``seq_len`` and pack them first-fit into micro batches of
    at most ``seq_len`` tokens (unpadded), in the order the bins were opened."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    bins: list[_Bin] = []
    for sample in samples:
        cut = truncate(sample, seq_len)
        key = _bin_key(cut)
        for candidate in bins:
            if candidate.key == key and candidate.tokens + cut.num_tokens <= seq_len:
                candidate.samples.append(cut)
                candidate.tokens += cut.num_tokens
                break
        else:
            bins.append(_Bin(key, [cut], cut.num_tokens))
    return [_materialize(b.samples) for b in bins]


def _materialize(samples: Sequence[Sample]) -> MicroBatch:
    lengths = [s.num_tokens for s in samples]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    changes: dict[str, object] = {}
    for name in FIXED_FIELDS:
        parts = [getattr(s, name) for s in samples]
        if all(p is not None for p in parts):
            changes[name] = encode_array(np.concatenate([_array(p, name) for p in parts]))
    for name in RAGGED_FIELDS:
        if not any(getattr(s, name) is not None for s in samples):
            continue
        counts_parts, value_parts = [], []
        for s in samples:
            csr: PackedCsr | None = getattr(s, name)
            if csr is None:  # no such field in this sample: no values at its positions
                counts_parts.append(np.zeros(s.num_tokens, np.int32))
                continue
            counts, values = _csr(csr, name)
            counts_parts.append(counts)
            value_parts.append(values)
        value_dtype = np.dtype(get_field(name).value_dtype)
        values_all = np.concatenate(value_parts) if value_parts else np.zeros(0, value_dtype)
        changes[name] = _pack_csr(np.concatenate(counts_parts), values_all)
    segments = tuple(
        seg.shift(int(offset))
        for s, offset in zip(samples, offsets, strict=False)
        for seg in s.segments
    )
    return MicroBatch(
        input_ids=encode_array(np.concatenate([_array(s.token_ids, "token_ids") for s in samples])),
        loss_mask=encode_array(np.concatenate([_array(s.loss_mask, "loss_mask") for s in samples])),
        position_ids=encode_array(np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])),
        sample_lengths=tuple(lengths),
        multimodal=any(s.multimodal for s in samples),
        segments=segments,
        **changes,  # type: ignore[arg-type]
    )


def pad(micro_batch: MicroBatch, multiple: int) -> MicroBatch:
    """Pad to a multiple of ``multiple`` tokens (the CP degree). Padding is loss-masked;
    inline fixed rows are zeros and inline ragged rows empty; segments are untouched, so
    padded positions read as each field's fill."""
    if multiple < 1:
        raise ValueError(f"pad multiple must be positive, got {multiple}")
    n = micro_batch.num_tokens
    extra = -n % multiple
    if not extra:
        return micro_batch
    changes: dict[str, object] = {
        "input_ids": encode_array(
            np.concatenate([_array(micro_batch.input_ids, "input_ids"), np.zeros(extra, np.int32)])
        ),
        "loss_mask": encode_array(
            np.concatenate([_array(micro_batch.loss_mask, "loss_mask"), np.zeros(extra, np.uint8)])
        ),
        "position_ids": encode_array(
            np.concatenate(
                [
                    _array(micro_batch.position_ids, "position_ids"),
                    np.arange(extra, dtype=np.int32),
                ]
            )
        ),
    }
    for name in FIXED_FIELDS:
        packed: PackedArray | None = getattr(micro_batch, name)
        if packed is not None:
            rows = _array(packed, name)
            filler = np.zeros((extra, *rows.shape[1:]), rows.dtype)
            changes[name] = encode_array(np.concatenate([rows, filler]))
    for name in RAGGED_FIELDS:
        csr: PackedCsr | None = getattr(micro_batch, name)
        if csr is not None:
            counts, values = _csr(csr, name)
            changes[name] = _pack_csr(np.concatenate([counts, np.zeros(extra, np.int32)]), values)
    return msgspec.structs.replace(micro_batch, **changes)


def make_dummy(micro_batch: MicroBatch) -> MicroBatch:
    """A filler for a DP rank with fewer micro batches: the same shapes, fully
    loss-masked; routing is kept (the forward pass needs it), masks are dropped."""
    loss_mask = np.zeros(micro_batch.num_tokens, np.uint8)
    changes: dict[str, object] = {
        "loss_mask": encode_array(loss_mask),
        "dummy": True,
        "segments": tuple(s for s in micro_batch.segments if s.field in _ROUTING_FIELDS),
    }
    for name in RAGGED_FIELDS:
        changes[name] = None
    return msgspec.structs.replace(micro_batch, **changes)


def split_for_dp(micro_batches: Sequence[MicroBatch], dp_size: int) -> list[list[MicroBatch]]:
    """Deal micro batches to ``dp_size`` ranks, each getting the same number; short ranks
    get dummies made from the batch's first micro batch."""
    if dp_size < 1:
        raise ValueError(f"dp_size must be positive, got {dp_size}")
    batches = list(micro_batches)
    if batches and len(batches) % dp_size:
        batches += [make_dummy(batches[0])] * (dp_size - len(batches) % dp_size)
    return [batches[rank::dp_size] for rank in range(dp_size)]


def prepare_batch(
    samples: Sequence[Sample], *, seq_len: int, dp_size: int, pad_to_multiple_of: int = 1
) -> list[list[MicroBatch]]:
    """Samples to per-DP-rank micro batches: truncate, pack, pad, split."""
    micro_batches = [pad(mb, pad_to_multiple_of) for mb in pack(samples, seq_len)]
    return split_for_dp(micro_batches, dp_size)
