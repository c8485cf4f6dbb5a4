"""The blob layout, byte for byte, and its trailer checks."""

from __future__ import annotations

import struct

import msgspec
import numpy as np
import pytest

from objstore_payload import BlobFormatError, BlobTooLargeError, InvalidPayloadError, layout
from objstore_payload.layout import FixedRegion, RaggedRegion, encode_blob


def test_regions_back_to_back_with_absolute_csr_offsets() -> None:
    routing = np.arange(24, dtype=np.uint8).reshape(4, 2, 3)
    blob = encode_blob(
        [
            FixedRegion("routed_experts", 2, routing),
            RaggedRegion("sampling_mask", 4, np.array([1, 3, 0]), np.array([7, 8, 9, 10])),
        ]
    )
    data = blob.to_bytes()
    assert data[:24] == routing.tobytes()
    # 4 offset words (3 rows + 1), absolute: values start at 24 + 16 = 40.
    assert np.frombuffer(data[24:40], "<u4").tolist() == [40, 44, 56, 56]
    assert np.frombuffer(data[40:56], "<i4").tolist() == [7, 8, 9, 10]
    trailer_len, trailer_crc, magic = struct.unpack("<II8s", data[-16:])
    assert magic == layout.MAGIC
    assert len(data) == 56 + trailer_len + 16 == blob.size
    trailer = msgspec.msgpack.decode(data[56 : 56 + trailer_len], type=layout.Trailer)
    assert trailer.format_version == layout.FORMAT_VERSION
    assert [
        (r.field, r.offset, r.nbytes, r.pos, r.rows, r.dtype, r.shape, r.value_dtype)
        for r in trailer.regions
    ] == [
        ("routed_experts", 0, 24, 2, 4, "uint8", (2, 3), None),
        ("sampling_mask", 24, 32, 4, 3, "uint32", (), "int32"),
    ]
    assert trailer.regions[0].crc32c == layout.crc32c(data[:24])
    assert trailer.regions[1].crc32c == layout.crc32c(data[24:56])
    assert trailer_crc == layout.crc32c(data[56 : 56 + trailer_len])
    assert [s.byte_range for s in blob.segments("memory://x/a.bin")] == [(0, 24), (24, 36)]


def test_crc32c_is_castagnoli() -> None:
    assert layout.crc32c(b"123456789") == 0xE3069283
    assert layout.crc32c(b"6789", layout.crc32c(b"12345")) == 0xE3069283


def test_fixed_rows_are_written_little_endian() -> None:
    weights = np.arange(6, dtype=">f4").reshape(1, 2, 3)
    blob = encode_blob([FixedRegion("routed_expert_weights", 0, weights)])
    assert blob.to_bytes()[:24] == weights.astype("<f4").tobytes()


@pytest.mark.parametrize(
    ("region", "message"),
    [
        (FixedRegion("routed_experts", 0, np.zeros((2, 3), np.uint8)), "3 dimensions"),
        (FixedRegion("routed_experts", 0, np.zeros((2, 3, 1), np.int32)), "uint16"),
        (FixedRegion("sampling_mask", 0, np.zeros((2, 3, 1), np.int32)), "ragged"),
        (RaggedRegion("routed_experts", 0, np.array([1]), np.array([1])), "not ragged"),
        (RaggedRegion("sampling_mask", 0, np.array([2]), np.array([1])), "add up to 2"),
        (RaggedRegion("sampling_mask", 0, np.array([-1, 2]), np.array([1])), "non-negative"),
        (RaggedRegion("sampling_mask", 0, np.array([1.0]), np.array([1])), "integer"),
        (RaggedRegion("sampling_mask", 0, np.array([1]), np.array([2**40])), "do not fit int32"),
        (RaggedRegion("sampling_mask", 0, np.array([1]), np.array([0.5])), "int32"),
        (RaggedRegion("sampling_mask_logprobs", 0, np.array([1]), np.array([1])), "float32"),
    ],
)
def test_bad_regions_are_refused(region: FixedRegion | RaggedRegion, message: str) -> None:
    with pytest.raises(InvalidPayloadError, match=message):
        encode_blob([region])


def test_blobs_past_4_gib_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real limit needs 4 GiB of RAM to reach; the same checks run against a small one.
    monkeypatch.setattr(layout, "MAX_BLOB_BYTES", 64)
    with pytest.raises(BlobTooLargeError, match="4 GiB"):
        encode_blob([RaggedRegion("sampling_mask", 0, np.array([20]), np.arange(20))])
    with pytest.raises(BlobTooLargeError, match="4 GiB"):
        encode_blob([FixedRegion("routed_experts", 0, np.zeros((10, 2, 4), np.uint8))])


def footer_and_trailer(data: bytes) -> tuple[bytes, bytes]:
    footer = data[-layout.FOOTER_SIZE :]
    start, length = layout.parse_footer(footer, len(data), "memory://x")
    return footer, data[start : start + length]


def test_trailer_parses_back() -> None:
    blob = encode_blob([FixedRegion("routed_experts", 0, np.ones((3, 1, 1), np.uint8))])
    footer, trailer = footer_and_trailer(blob.to_bytes())
    assert layout.parse_trailer(trailer, footer, "memory://x").regions == blob.regions


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[:-1] + b"\x02", "bad magic"),
        (lambda d: d[:-16] + struct.pack("<I", 10**6) + d[-12:], "does not fit"),
        (lambda d: d[:5], "too small"),
    ],
)
def test_corrupt_footers_are_typed_errors(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = mutate(
        encode_blob([FixedRegion("routed_experts", 0, np.ones((3, 1, 1), np.uint8))]).to_bytes()
    )
    with pytest.raises(BlobFormatError, match=message):
        layout.parse_footer(data[-layout.FOOTER_SIZE :], len(data), "memory://x")


def test_corrupt_trailer_fails_its_crc() -> None:
    data = bytearray(
        encode_blob([FixedRegion("routed_experts", 0, np.ones((3, 1, 1), np.uint8))]).to_bytes()
    )
    data[-20] ^= 0xFF
    footer, trailer = footer_and_trailer(bytes(data))
    with pytest.raises(BlobFormatError, match="CRC32C"):
        layout.parse_trailer(trailer, footer, "memory://x")


def test_unknown_format_version_is_refused() -> None:
    trailer = msgspec.msgpack.encode(layout.Trailer(format_version=99, regions=()))
    footer = struct.pack("<II8s", len(trailer), layout.crc32c(trailer), layout.MAGIC)
    with pytest.raises(BlobFormatError, match="version 99"):
        layout.parse_trailer(trailer, footer, "memory://x")
