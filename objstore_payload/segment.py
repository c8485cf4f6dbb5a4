"""Segments: small handles to rows of one field stored in a blob.

A `Segment` says: ``rows`` consecutive rows of ``field``, for token positions
``[pos, pos + rows)``, lie C-contiguous at byte ``offset`` of the object at ``uri``,
each row of dtype ``dtype`` and shape ``shape``. Clipping to a window and shifting
by a packing offset are pure arithmetic on the handle: no I/O and no knowledge of
row widths (a ragged field's rows are its uint32 offset words, see `layout`).

Wire rules (msgspec schema evolution): fields are only ever appended, with defaults,
never reordered. On msgpack a segment is a positional array (compact: the URI is
most of it); in JSON it is an object with named keys (`segments_to_json`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from objstore_payload.dtypes import DTYPE_NAMES, dtype_from_name
from objstore_payload.errors import InvalidSegmentError

__all__ = [
    "MAX_BLOB_BYTES",
    "MAX_POSITION",
    "Segment",
    "clip_segments",
    "decode_segments_json",
    "decode_segments_msgpack",
    "encode_segments_json",
    "encode_segments_msgpack",
    "segments_from_builtins",
    "segments_to_builtins",
    "shift_segments",
]

MAX_BLOB_BYTES: Final = 1 << 32
"""Blobs address their bytes with uint32 CSR offsets, so every byte range ends at or
below 4 GiB."""

MAX_POSITION: Final = (1 << 31) - 1
"""Token positions fit an int32 (sequence lengths are far below this)."""

MAX_ROW_DIMS: Final = 4
MAX_DIM: Final = 1 << 20
MAX_URI_LENGTH: Final = 2048

_FIELD_NAME = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")


class Segment(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """``rows`` rows of ``field`` at token positions ``[pos, pos + rows)``, stored at
    byte ``offset`` of ``uri``.

    Every attribute is validated on construction and on decode; a bad one raises
    `InvalidSegmentError` (wrapped in `msgspec.ValidationError` when it comes from
    ``msgspec.*.decode``; the ``decode_segments_*`` helpers unwrap it).
    """

    field: str
    """Field name (see `objstore_payload.fields`)."""
    uri: str
    """Object URI, e.g. ``s3://bucket/run/payloads/v7/<uuid>.bin``. Checked against the
    store's root before any I/O, never here."""
    offset: int
    """Byte offset of the first row in the object."""
    pos: int
    """Token position of the first row, relative to the sequence that holds the segment
    (request, sample, micro batch)."""
    rows: int
    """Number of consecutive rows."""
    dtype: str
    """Element dtype name of a row (``uint32`` for a ragged field's offset words)."""
    shape: tuple[int, ...]
    """Shape of one row (``()`` for a ragged field's offset words)."""

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def end(self) -> int:
        """One past the last token position."""
        return self.pos + self.rows

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return dtype_from_name(self.dtype).itemsize * math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of all rows."""
        return self.rows * self.row_bytes

    @property
    def byte_range(self) -> tuple[int, int]:
        """``[start, end)`` byte range of the rows in the object."""
        return self.offset, self.offset + self.nbytes

    def clip(self, lo: int, hi: int) -> Segment | None:
        """The part of this segment inside positions ``[lo, hi)``, or None if empty.

        Positions stay absolute; only ``offset``, ``pos`` and ``rows`` change.
        """
        start = max(self.pos, lo)
        end = min(self.end, hi)
        if start >= end:
            return None
        if start == self.pos and end == self.end:
            return self
        return msgspec.structs.replace(
            self,
            offset=self.offset + (start - self.pos) * self.row_bytes,
            pos=start,
            rows=end - start,
        )

    def shift(self, delta: int) -> Segment:
        """This segment moved by ``delta`` token positions (packing into a micro batch)."""
        if delta == 0:
            return self
        return msgspec.structs.replace(self, pos=self.pos + delta)


def _validate(seg: Segment) -> None:
    # Checked one by one so that the message names the attribute that is wrong.
    if type(seg.field) is not str or not _FIELD_NAME.match(seg.field):
        raise InvalidSegmentError(f"segment field {seg.field!r} is not a valid field name")
    if type(seg.uri) is not str or not 0 < len(seg.uri) <= MAX_URI_LENGTH:
        raise InvalidSegmentError(
            f"segment uri must be a non-empty string of at most {MAX_URI_LENGTH} characters"
        )
    for name in ("offset", "pos", "rows"):
        value = getattr(seg, name)
        if type(value) is not int or value < 0:
            raise InvalidSegmentError(f"segment {name} must be a non-negative int, got {value!r}")
    if seg.pos + seg.rows > MAX_POSITION:
        raise InvalidSegmentError(
            f"segment positions [{seg.pos}, {seg.pos + seg.rows}) exceed {MAX_POSITION}"
        )
    if seg.dtype not in DTYPE_NAMES:
        raise InvalidSegmentError(
            f"segment dtype {seg.dtype!r} is not allowed; expected one of {sorted(DTYPE_NAMES)}"
        )
    if type(seg.shape) is not tuple or len(seg.shape) > MAX_ROW_DIMS:
        raise InvalidSegmentError(
            f"segment shape must have at most {MAX_ROW_DIMS} dimensions, got {seg.shape!r}"
        )
    for dim in seg.shape:
        if type(dim) is not int or not 1 <= dim <= MAX_DIM:
            raise InvalidSegmentError(
                f"segment shape dimensions must be ints in [1, {MAX_DIM}], got {seg.shape!r}"
            )
    end = seg.offset + seg.rows * dtype_from_name(seg.dtype).itemsize * math.prod(seg.shape)
    if end > MAX_BLOB_BYTES:
        raise InvalidSegmentError(
            f"segment byte range [{seg.offset}, {end}) of {seg.uri} ends past the 4 GiB blob limit"
        )


def clip_segments(segments: Iterable[Segment], lo: int, hi: int) -> list[Segment]:
    """Every segment clipped to positions ``[lo, hi)``; empty ones dropped, order kept."""
    out = []
    for seg in segments:
        clipped = seg.clip(lo, hi)
        if clipped is not None:
            out.append(clipped)
    return out


def shift_segments(segments: Iterable[Segment], delta: int) -> list[Segment]:
    """Every segment moved by ``delta`` positions (raises if a position turns negative)."""
    return [seg.shift(delta) for seg in segments]


class _SegmentObject(msgspec.Struct, frozen=True):
    """The JSON form of a segment: the same attributes, as named keys. Unknown keys are
    ignored, so a newer writer's appended attributes do not break an older reader."""

    field: str
    uri: str
    offset: int
    pos: int
    rows: int
    dtype: str
    shape: tuple[int, ...]


_MSGPACK_ENCODER: Final = msgspec.msgpack.Encoder()
_MSGPACK_DECODER: Final = msgspec.msgpack.Decoder(list[Segment])
_JSON_ENCODER: Final = msgspec.json.Encoder()
_JSON_DECODER: Final = msgspec.json.Decoder(list[_SegmentObject])


def _from_objects(objects: Sequence[_SegmentObject]) -> list[Segment]:
    return [Segment(o.field, o.uri, o.offset, o.pos, o.rows, o.dtype, o.shape) for o in objects]


def encode_segments_msgpack(segments: Sequence[Segment]) -> bytes:
    """Segments as a msgpack array of positional arrays."""
    return _MSGPACK_ENCODER.encode(segments)


def decode_segments_msgpack(data: bytes) -> list[Segment]:
    """Inverse of `encode_segments_msgpack`; any malformed input raises `InvalidSegmentError`."""
    try:
        return _MSGPACK_DECODER.decode(data)
    except (msgspec.MsgspecError, TypeError) as exc:
        raise InvalidSegmentError(f"invalid segments: {exc}") from exc


def segments_to_builtins(segments: Sequence[Segment]) -> list[dict[str, Any]]:
    """Segments as JSON-ready dicts with named keys (for HTTP responses and humans)."""
    return [
        {
            "field": s.field,
            "uri": s.uri,
            "offset": s.offset,
            "pos": s.pos,
            "rows": s.rows,
            "dtype": s.dtype,
            "shape": list(s.shape),
        }
        for s in segments
    ]


def segments_from_builtins(obj: object) -> list[Segment]:
    """Segments from parsed JSON (a list of dicts); malformed input raises
    `InvalidSegmentError`."""
    try:
        objects = msgspec.convert(obj, list[_SegmentObject])
        return _from_objects(objects)
    except msgspec.ValidationError as exc:
        raise InvalidSegmentError(f"invalid segments: {exc}") from exc


def encode_segments_json(segments: Sequence[Segment]) -> bytes:
    """Segments as a JSON array of objects with named keys."""
    return _JSON_ENCODER.encode(segments_to_builtins(segments))


def decode_segments_json(data: bytes | str) -> list[Segment]:
    """Inverse of `encode_segments_json`; malformed input raises `InvalidSegmentError`."""
    try:
        return _from_objects(_JSON_DECODER.decode(data))
    except (msgspec.MsgspecError, InvalidSegmentError, TypeError) as exc:
        raise InvalidSegmentError(f"invalid segments: {exc}") from exc
