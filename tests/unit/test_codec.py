"""The inline packed codec: round trips, and every disagreement named."""

from __future__ import annotations

import base64

import msgspec
import numpy as np
import pytest

from objstore_payload import InlineDecodeError, InvalidPayloadError, codec


def as_json(value: codec.PackedArray | codec.PackedRouting | codec.PackedMask) -> object:
    """Through real JSON, as a client would see it."""
    return msgspec.json.decode(msgspec.json.encode(codec.to_builtins(value)))


def test_array_round_trip_is_bitwise_and_little_endian() -> None:
    array = np.arange(12, dtype=">u2").reshape(3, 4)
    packed = codec.encode_array(array)
    assert packed.dtype == "uint16"
    assert packed.shape == (3, 4)
    assert packed.data == np.arange(12, dtype="<u2").tobytes()
    decoded = codec.decode_array(as_json(packed))
    np.testing.assert_array_equal(decoded, array)
    assert decoded.dtype == np.dtype("<u2")


def test_routing_round_trip_keeps_start() -> None:
    rows = np.arange(24, dtype=np.uint8).reshape(4, 2, 3)
    decoded, start = codec.decode_routing(as_json(codec.encode_routing(rows, start=2)))
    assert start == 2
    np.testing.assert_array_equal(decoded, rows)


def test_mask_round_trip() -> None:
    counts, ids = np.array([1, 3, 0]), np.array([7, 8, 9, 10])
    got_counts, got_ids = codec.decode_mask(as_json(codec.encode_mask(counts, ids)))
    assert got_counts.dtype == got_ids.dtype == np.int32
    assert got_counts.tolist() == [1, 3, 0]
    assert got_ids.tolist() == [7, 8, 9, 10]


def test_logprobs_round_trip_keeps_inf() -> None:
    values = np.array([-0.5, -9999.0, -np.inf], dtype=np.float32)
    np.testing.assert_array_equal(
        codec.decode_logprobs(as_json(codec.encode_logprobs(values))), values
    )


def packed(data: bytes, shape: list[int], dtype: str, **extra: object) -> dict[str, object]:
    return {"data": base64.b64encode(data).decode(), "shape": shape, "dtype": dtype, **extra}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            packed(b"\x00" * 23, [4, 2, 3], "uint8"),
            r"shape \[4, 2, 3\] of uint8 needs 24 bytes, data has 23",
        ),
        (packed(b"\x00" * 24, [4, 2, 3], "uint16"), "needs 48 bytes"),
        (packed(b"\x00" * 8, [2], "object"), "dtype 'object' is not allowed"),
        (packed(b"\x00" * 8, [-2, -4], "uint8"), "not a valid array shape"),
        ({"data": "!!!not base64", "shape": [1], "dtype": "uint8"}, "base64"),
        ({"data": "AA==", "dtype": "uint8"}, "shape"),
        ({"data": "AA==", "shape": "1", "dtype": "uint8"}, "shape"),
        ([1, 2, 3], "not a packed array"),
        (None, "not a packed array"),
    ],
)
def test_array_disagreements_are_named(obj: object, message: str) -> None:
    with pytest.raises(InlineDecodeError, match=message):
        codec.decode_array(obj)


def test_hostile_dimensions_are_named() -> None:
    with pytest.raises(InlineDecodeError, match="not a valid array shape"):
        codec.decode_array(packed(b"", [2**63, 0], "uint8"))


def test_encoding_refuses_values_that_do_not_fit() -> None:
    with pytest.raises(InvalidPayloadError, match="do not fit int32"):
        codec.encode_mask(np.array([1]), np.array([2**40 + 5]))
    with pytest.raises(InvalidPayloadError, match="not allowed"):
        codec.encode_array(np.zeros(2, np.complex64))


def test_narrowing_checks() -> None:
    with pytest.raises(InlineDecodeError, match="expected 1 dimensions"):
        codec.decode_array(packed(b"\x00" * 4, [2, 2], "uint8"), ndim=1)
    with pytest.raises(InlineDecodeError, match="not allowed"):
        codec.decode_logprobs(packed(b"\x00" * 8, [1], "float64"))


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (packed(b"\x00" * 24, [24], "uint8", start=0), "expected 3 dimensions"),
        (
            packed(b"\x00" * 24, [4, 2, 3], "uint8", start=-1),
            r"start must lie in \[0, 2147483647\], got -1",
        ),
        (packed(b"\x00" * 24, [4, 2, 3], "uint8", start=2**70), "start must lie in"),
        (packed(b"\x00" * 24, [4, 2, 3], "uint8"), "start"),
        (packed(b"\x00" * 24, [1, 2, 3], "float32", start=0), "not allowed"),
        (packed(np.full(6, -1, np.int32).tobytes(), [1, 2, 3], "int32", start=0), "non-negative"),
    ],
)
def test_routing_disagreements_are_named(obj: object, message: str) -> None:
    with pytest.raises(InlineDecodeError, match=message):
        codec.decode_routing(obj)


def test_routing_accepts_wider_vllm_dtypes() -> None:
    rows = np.arange(6, dtype=np.int32).reshape(1, 2, 3)
    decoded, _ = codec.decode_routing(packed(rows.tobytes(), [1, 2, 3], "int32", start=5))
    np.testing.assert_array_equal(decoded, rows)


@pytest.mark.parametrize(
    ("counts", "ids", "message"),
    [
        ([1, 3], [7, 8, 9], "counts add up to 4 but there are 3 ids"),
        ([1, -1], [7, 8, 9], "non-negative"),
    ],
)
def test_mask_disagreements_are_named(counts: list[int], ids: list[int], message: str) -> None:
    obj = {
        "ids": packed(np.array(ids, np.int32).tobytes(), [len(ids)], "int32"),
        "counts": packed(np.array(counts, np.int32).tobytes(), [len(counts)], "int32"),
    }
    with pytest.raises(InlineDecodeError, match=message):
        codec.decode_mask(obj)


def test_mask_ids_must_be_int32() -> None:
    obj = {
        "ids": packed(np.array([1], np.int64).tobytes(), [1], "int64"),
        "counts": packed(np.array([1], np.int32).tobytes(), [1], "int32"),
    }
    with pytest.raises(InlineDecodeError, match=r"sampling_mask\.ids: dtype 'int64'"):
        codec.decode_mask(obj)
