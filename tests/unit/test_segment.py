"""Segments: validation of every attribute, clip/shift arithmetic, wire forms."""

from __future__ import annotations

import msgspec
import pytest

from objstore_payload import InvalidSegmentError, Segment, clip_segments, shift_segments
from objstore_payload.segment import (
    decode_segments_json,
    decode_segments_msgpack,
    encode_segments_json,
    encode_segments_msgpack,
    segments_from_builtins,
    segments_to_builtins,
)

URI = "s3://bucket/run/v3/abc.bin"


def routing(pos: int = 2, rows: int = 4, offset: int = 0) -> Segment:
    return Segment("routed_experts", URI, offset, pos, rows, "uint8", (2, 3))


def test_byte_range_is_rows_times_row_bytes() -> None:
    seg = Segment("routed_expert_weights", URI, 100, 0, 5, "float32", (48, 8))
    assert seg.row_bytes == 4 * 48 * 8
    assert seg.byte_range == (100, 100 + 5 * 4 * 48 * 8)
    assert seg.end == 5


def test_clip_moves_offset_by_whole_rows() -> None:
    seg = routing(pos=2, rows=4, offset=10)
    clipped = seg.clip(3, 5)
    assert clipped == Segment("routed_experts", URI, 10 + 6, 3, 2, "uint8", (2, 3))
    assert seg.clip(0, 100) is seg
    assert seg.clip(6, 9) is None
    assert seg.clip(0, 2) is None
    assert seg.clip(4, 4) is None


def test_clip_of_ragged_offsets_is_arithmetic_on_words() -> None:
    mask = Segment("sampling_mask", URI, 64, 4, 3, "uint32", ())
    assert mask.clip(5, 7) == Segment("sampling_mask", URI, 68, 5, 2, "uint32", ())


def test_shift_moves_positions_only() -> None:
    seg = routing()
    assert seg.shift(10) == Segment("routed_experts", URI, 0, 12, 4, "uint8", (2, 3))
    assert seg.shift(0) is seg
    with pytest.raises(InvalidSegmentError, match="pos"):
        seg.shift(-3)


def test_list_helpers_keep_order_and_drop_empty() -> None:
    a, b = routing(pos=0, rows=2), routing(pos=5, rows=2)
    assert clip_segments([b, a], 1, 6) == [b.clip(1, 6), a.clip(1, 6)]
    assert clip_segments([a], 3, 4) == []
    assert shift_segments([a, b], 1) == [a.shift(1), b.shift(1)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"field": "Routed"}, "field"),
        ({"field": ""}, "field"),
        ({"uri": ""}, "uri"),
        ({"uri": "x" * 5000}, "uri"),
        ({"offset": -1}, "offset"),
        ({"pos": -1}, "pos"),
        ({"rows": -1}, "rows"),
        ({"offset": 1.5}, "offset"),
        ({"rows": True}, "rows"),
        ({"pos": 2**31}, "positions"),
        ({"dtype": "object"}, "dtype"),
        ({"dtype": ">u2"}, "dtype"),
        ({"dtype": "uint64"}, "dtype"),
        ({"shape": (0, 3)}, "shape"),
        ({"shape": (-1,)}, "shape"),
        ({"shape": (1, 1, 1, 1, 1)}, "shape"),
        ({"shape": (2**21,)}, "shape"),
        ({"shape": [2, 3]}, "shape"),
        ({"offset": 2**32 - 5, "rows": 1}, "4 GiB"),
        ({"rows": 2**30, "shape": (64, 64)}, "4 GiB"),
    ],
)
def test_every_attribute_is_validated(kwargs: dict[str, object], message: str) -> None:
    values: dict[str, object] = {
        "field": "routed_experts",
        "uri": URI,
        "offset": 0,
        "pos": 0,
        "rows": 1,
        "dtype": "uint8",
        "shape": (2, 3),
    }
    values.update(kwargs)
    with pytest.raises(InvalidSegmentError, match=message):
        Segment(**values)  # type: ignore[arg-type]


def test_msgpack_is_positional_and_round_trips() -> None:
    segs = [routing(), Segment("sampling_mask", URI, 64, 4, 3, "uint32", ())]
    data = encode_segments_msgpack(segs)
    assert msgspec.msgpack.decode(data)[0] == ["routed_experts", URI, 0, 2, 4, "uint8", [2, 3]]
    assert decode_segments_msgpack(data) == segs


def test_json_has_named_keys_and_round_trips() -> None:
    segs = [routing()]
    data = encode_segments_json(segs)
    assert msgspec.json.decode(data) == [
        {
            "field": "routed_experts",
            "uri": URI,
            "offset": 0,
            "pos": 2,
            "rows": 4,
            "dtype": "uint8",
            "shape": [2, 3],
        }
    ]
    assert decode_segments_json(data) == segs
    assert segments_from_builtins(segments_to_builtins(segs)) == segs


def test_json_segments_ignore_keys_appended_by_newer_writers() -> None:
    data = b'[{"field":"routed_experts","uri":"u","offset":0,"pos":0,"rows":1,"dtype":"uint8","shape":[2],"etag":"x"}]'
    assert decode_segments_json(data) == [Segment("routed_experts", "u", 0, 0, 1, "uint8", (2,))]


def test_non_bytes_input_is_a_typed_error() -> None:
    with pytest.raises(InvalidSegmentError):
        decode_segments_msgpack(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidSegmentError):
        decode_segments_json(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "payload",
    [
        b'[{"field":"routed_experts","uri":"u","offset":-1,"pos":0,"rows":1,"dtype":"uint8","shape":[]}]',
        b'[{"field":"routed_experts","uri":"u","offset":0,"pos":0,"rows":1,"dtype":"complex64","shape":[]}]',
        b'[{"field":"routed_experts","uri":"u","offset":0,"pos":0,"rows":1,"dtype":"uint8"}]',
        b'[{"field":"routed_experts","uri":"u","offset":"0","pos":0,"rows":1,"dtype":"uint8","shape":[]}]',
        b'[{"field":"routed_experts","uri":"u","offset":18446744073709551616,"pos":0,"rows":1,"dtype":"uint8","shape":[]}]',
        b"{}",
        b"not json",
    ],
)
def test_malformed_json_segments_raise_the_typed_error(payload: bytes) -> None:
    with pytest.raises(InvalidSegmentError):
        decode_segments_json(payload)


@pytest.mark.parametrize(
    "items",
    [
        [["routed_experts", URI, -5, 0, 1, "uint8", [2]]],
        [["routed_experts", URI, 0, 0, 1, "uint8"]],
        [["routed_experts", URI, 0, 0, 1, "float128", [2]]],
        [["routed_experts", URI, 2**32, 0, 1, "uint8", [2]]],
        [["routed_experts", 7, 0, 0, 1, "uint8", [2]]],
    ],
)
def test_malformed_msgpack_segments_raise_the_typed_error(items: list[object]) -> None:
    with pytest.raises(InvalidSegmentError):
        decode_segments_msgpack(msgspec.msgpack.encode(items))
    with pytest.raises(InvalidSegmentError):
        decode_segments_msgpack(b"\xc1garbage")
