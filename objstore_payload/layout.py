"""The blob layout: one object per request, field regions back to back, then a trailer.

::

    region 0 | region 1 | ... | trailer (msgpack) | footer (16 bytes)

- A fixed-width region is ``rows`` C-contiguous rows of ``shape`` and ``dtype``.
- A ragged region of n rows is CSR: ``n + 1`` little-endian uint32 **absolute** byte
  offsets (where each row's values start in the object; the last one is where the last
  row ends), then the values. Segments address the offset words, so clipping a ragged
  segment stays pure arithmetic.
- The trailer records each region (field, offset, rows, dtype, shape, value dtype, and
  the CRC32C of the region's bytes) and the format version. Readers of windows never
  need it; ``inspect``, ``verify`` and humans do.
- The footer is ``<uint32 trailer length><uint32 CRC32C of the trailer><8-byte magic>``.

Everything is little-endian. A blob must stay below 4 GiB (uint32 offsets).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import google_crc32c
import msgspec
import numpy as np

from objstore_payload.buffers import byte_view
from objstore_payload.dtypes import dtype_from_name, name_of_dtype
from objstore_payload.errors import BlobFormatError, BlobTooLargeError, InvalidPayloadError
from objstore_payload.fields import get_field
from objstore_payload.segment import MAX_BLOB_BYTES, MAX_DIM, Segment

__all__ = [
    "FOOTER_SIZE",
    "FORMAT_VERSION",
    "MAGIC",
    "EncodedBlob",
    "FixedRegion",
    "RaggedRegion",
    "RegionEntry",
    "Trailer",
    "crc32c",
    "encode_blob",
    "parse_footer",
    "parse_trailer",
]

MAGIC: Final = b"OSPBLOB\x01"
FORMAT_VERSION: Final = 1
_FOOTER: Final = struct.Struct("<II8s")
FOOTER_SIZE: Final = _FOOTER.size
MAX_TRAILER_BYTES: Final = 16 << 20
_OFFSET_DTYPE: Final = np.dtype("<u4")


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``crc``."""
    # google_crc32c accepts numpy arrays but not memoryviews; frombuffer is zero-copy.
    return int(google_crc32c.extend(crc, np.frombuffer(data, dtype=np.uint8)))


class RegionEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One field region as recorded in a blob's trailer."""

    field: str
    offset: int
    """Byte offset of the region (of its offset words, for a ragged field)."""
    nbytes: int
    """Bytes of the whole region (offset words and values, for a ragged field)."""
    pos: int
    """Token position of the first row."""
    rows: int
    dtype: str
    """Row dtype (``uint32`` offset words for a ragged field)."""
    shape: tuple[int, ...]
    value_dtype: str | None = None
    """Ragged fields: dtype of the values."""
    crc32c: int
    """CRC32C of the region's ``nbytes`` bytes."""

    def segment(self, uri: str) -> Segment:
        """The segment that covers this region's rows."""
        return Segment(self.field, uri, self.offset, self.pos, self.rows, self.dtype, self.shape)


class Trailer(msgspec.Struct, frozen=True, kw_only=True):
    """The self-describing tail of a blob."""

    format_version: int
    regions: tuple[RegionEntry, ...]


_TRAILER_ENCODER: Final = msgspec.msgpack.Encoder()
_TRAILER_DECODER: Final = msgspec.msgpack.Decoder(Trailer)


@dataclass(frozen=True, slots=True)
class FixedRegion:
    """Rows of a fixed-width field: ``rows`` is ``[n, *row_shape]``."""

    field: str
    pos: int
    rows: np.ndarray


@dataclass(frozen=True, slots=True)
class RaggedRegion:
    """Rows of a ragged field in CSR form: row i holds ``counts[i]`` values."""

    field: str
    pos: int
    counts: np.ndarray
    values: np.ndarray


@dataclass(frozen=True, slots=True)
class EncodedBlob:
    """A blob ready to write: its bytes as parts (written without joining where the
    store can) and the trailer entries that become segments once the URI is known."""

    parts: tuple[memoryview, ...]
    size: int
    regions: tuple[RegionEntry, ...]

    def segments(self, uri: str) -> list[Segment]:
        """One segment per region, pointing into the object at ``uri``."""
        return [entry.segment(uri) for entry in self.regions]

    def to_bytes(self) -> bytes:
        """The whole blob as one bytes object (one copy)."""
        return b"".join(self.parts)


def _byte_view(array: np.ndarray) -> memoryview:
    """The raw little-endian bytes of ``array`` as a flat view (no copy when it is
    already C-contiguous and little-endian)."""
    return byte_view(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")))


def _fixed_region(region: FixedRegion, offset: int) -> tuple[RegionEntry, list[memoryview]]:
    spec = get_field(region.field)
    rows = region.rows
    if spec.ragged:
        raise InvalidPayloadError(f"{region.field} is ragged; pass it as a RaggedRegion")
    if rows.ndim != 1 + spec.row_ndim:
        raise InvalidPayloadError(
            f"{region.field} rows must have {1 + spec.row_ndim} dimensions, got shape {rows.shape}"
        )
    if any(not 1 <= d <= MAX_DIM for d in rows.shape[1:]):
        raise InvalidPayloadError(
            f"{region.field} row dimensions must lie in [1, {MAX_DIM}], got shape {rows.shape}"
        )
    name = name_of_dtype(rows.dtype, error=InvalidPayloadError)
    if name not in spec.stored_dtypes:
        raise InvalidPayloadError(
            f"{region.field} rows must be one of {sorted(spec.stored_dtypes)}, got {name}"
        )
    view = _byte_view(rows)
    entry = RegionEntry(
        field=region.field,
        offset=offset,
        nbytes=view.nbytes,
        pos=region.pos,
        rows=int(rows.shape[0]),
        dtype=name,
        shape=tuple(int(d) for d in rows.shape[1:]),
        crc32c=crc32c(view),
    )
    return entry, [view]


def _ragged_region(region: RaggedRegion, offset: int) -> tuple[RegionEntry, list[memoryview]]:
    spec = get_field(region.field)
    if not spec.ragged:
        raise InvalidPayloadError(f"{region.field} is not ragged; pass it as a FixedRegion")
    counts, values = region.counts, region.values
    if counts.ndim != 1 or counts.dtype.kind not in "iu":
        raise InvalidPayloadError(
            f"{region.field} counts must be a 1-D integer array, got {counts.dtype} {counts.shape}"
        )
    if values.ndim != 1:
        raise InvalidPayloadError(f"{region.field} values must be 1-D, got shape {values.shape}")
    if counts.size and int(counts.min()) < 0:
        raise InvalidPayloadError(f"{region.field} counts must be non-negative")
    total = int(counts.sum(dtype=np.int64))
    if total != values.size:
        raise InvalidPayloadError(
            f"{region.field} counts add up to {total} but there are {values.size} values"
        )
    value_dtype = dtype_from_name(spec.value_dtype)
    if values.dtype.kind != value_dtype.kind and not (
        values.dtype.kind in "iu" and value_dtype.kind in "iu"
    ):
        raise InvalidPayloadError(
            f"{region.field} values must be {spec.value_dtype}, got {values.dtype}"
        )
    cast = values.astype(value_dtype, copy=False)
    if (
        value_dtype.kind in "iu"
        and values.dtype != value_dtype
        and not np.array_equal(cast, values)
    ):
        raise InvalidPayloadError(f"{region.field} values do not fit {spec.value_dtype}")
    n = counts.size
    values_start = offset + _OFFSET_DTYPE.itemsize * (n + 1)
    starts = np.empty(n + 1, dtype=np.int64)
    starts[0] = 0
    np.cumsum(counts, dtype=np.int64, out=starts[1:])
    starts *= value_dtype.itemsize
    starts += values_start
    if starts[-1] > MAX_BLOB_BYTES - 1:
        raise BlobTooLargeError(
            f"{region.field} values would end at byte {int(starts[-1])}, past the 4 GiB blob limit"
        )
    offsets_view = _byte_view(starts.astype(_OFFSET_DTYPE))
    values_view = _byte_view(cast)
    entry = RegionEntry(
        field=region.field,
        offset=offset,
        nbytes=offsets_view.nbytes + values_view.nbytes,
        pos=region.pos,
        rows=n,
        dtype="uint32",
        shape=(),
        value_dtype=spec.value_dtype,
        crc32c=crc32c(values_view, crc32c(offsets_view)),
    )
    return entry, [offsets_view, values_view]


def encode_blob(regions: Sequence[FixedRegion | RaggedRegion]) -> EncodedBlob:
    """Lay out ``regions`` back to back and append the trailer and footer."""
    parts: list[memoryview] = []
    entries: list[RegionEntry] = []
    offset = 0
    for region in regions:
        if isinstance(region, FixedRegion):
            entry, views = _fixed_region(region, offset)
        else:
            entry, views = _ragged_region(region, offset)
        entries.append(entry)
        parts.extend(views)
        offset += entry.nbytes
        if offset >= MAX_BLOB_BYTES:
            raise BlobTooLargeError(f"blob regions take {offset} bytes, past the 4 GiB limit")
    trailer = _TRAILER_ENCODER.encode(
        Trailer(format_version=FORMAT_VERSION, regions=tuple(entries))
    )
    footer = _FOOTER.pack(len(trailer), crc32c(trailer), MAGIC)
    parts.append(memoryview(trailer))
    parts.append(memoryview(footer))
    size = offset + len(trailer) + len(footer)
    if size >= MAX_BLOB_BYTES:
        raise BlobTooLargeError(f"blob would take {size} bytes, past the 4 GiB limit")
    return EncodedBlob(parts=tuple(parts), size=size, regions=tuple(entries))


def parse_footer(footer: bytes, object_size: int, uri: str) -> tuple[int, int]:
    """``(trailer_offset, trailer_length)`` from a blob's last `FOOTER_SIZE` bytes, plus the
    expected CRC as the caller re-reads; raises `BlobFormatError` on anything odd."""
    if len(footer) != FOOTER_SIZE:
        raise BlobFormatError(f"{uri}: object of {object_size} bytes is too small to be a blob")
    length, _crc, magic = _FOOTER.unpack(footer)
    if magic != MAGIC:
        raise BlobFormatError(f"{uri}: not a payload blob (bad magic {magic!r})")
    if length > MAX_TRAILER_BYTES or length > object_size - FOOTER_SIZE:
        raise BlobFormatError(
            f"{uri}: trailer length {length} does not fit an object of {object_size} bytes"
        )
    return object_size - FOOTER_SIZE - length, length


def parse_trailer(trailer: bytes, footer: bytes, uri: str) -> Trailer:
    """Decode and check a trailer read from the offsets `parse_footer` gave."""
    _length, expected_crc, _magic = _FOOTER.unpack(footer)
    if crc32c(trailer) != expected_crc:
        raise BlobFormatError(f"{uri}: trailer CRC32C mismatch")
    try:
        decoded = _TRAILER_DECODER.decode(trailer)
    except msgspec.MsgspecError as exc:
        raise BlobFormatError(f"{uri}: trailer does not decode: {exc}") from exc
    if decoded.format_version != FORMAT_VERSION:
        raise BlobFormatError(
            f"{uri}: blob format version {decoded.format_version} is not supported "
            f"(this build reads version {FORMAT_VERSION})"
        )
    return decoded
