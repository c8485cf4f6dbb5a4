"""Hostile input, fuzzed: segments, URIs, inline packed payloads, corrupt trailers.

Every case must raise one of the package's typed errors (`PayloadError` and its
subclasses) or succeed with a consistent result; none may read outside the store's root,
which the store's request log and a planted secret file check. The vLLM plugin's answer
to hostile destinations is fuzzed in ``test_fuzz_plugin.py``.
"""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objstore_payload import (
    PayloadError,
    PayloadReader,
    PayloadWriter,
    RequestArrays,
    Store,
    StoreConfig,
    UriNotAllowedError,
)
from objstore_payload.codec import decode_array, decode_mask, decode_routing
from objstore_payload.segment import decode_segments_json, decode_segments_msgpack
from objstore_payload.verify import verify_blob

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

SCHEMES = ["s3://", "s3a://", "S3://", "file://", "file:///", "http://", "https://",
           "memory://", "gs://", "arn:aws:s3:::", "simplecache::s3://", "", "//", "/"]  # fmt: skip
BUCKETS = ["bucket", "other", "bucket.evil", "bucket:9000", "", "127.0.0.1", "..", "%62ucket"]
PARTS = ["v1", "x.bin", "..", ".", "", "%2e%2e", "%2F", "%00", "a::b", "\x00", "\n", "\r",
         "\x7f", "~", "\\..\\", "v1?x=1", "v1#frag", "ü", " ", "*", "\t", "v" * 300]  # fmt: skip


@st.composite
def hostile_uris(draw: st.DrawFn, root_url: str) -> str:
    """URIs built from dangerous pieces, some starting with the real root."""
    parts = draw(st.lists(st.sampled_from(PARTS), min_size=0, max_size=6))
    path = "/".join(parts)
    kind = draw(st.integers(0, 3))
    if kind == 0:  # the real root, then a hostile path
        return f"{root_url}/{path}"
    if kind == 1:  # another scheme or bucket
        return f"{draw(st.sampled_from(SCHEMES))}{draw(st.sampled_from(BUCKETS))}/{path}"
    if kind == 2:  # the real root spelled with tricks
        trick = draw(st.sampled_from(["/", "//", "/./", "/../", "%2F", "/%2e%2e/", "\\"]))
        return root_url.rstrip("/") + trick + path
    return draw(st.text(max_size=80))


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[Store, Path]]:
    """A file store with one real blob, and a secret file right next to its root."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"S" * 4096)
    (tmp_path / "payloads-evil").mkdir()
    (tmp_path / "payloads-evil" / "x.bin").write_bytes(b"E" * 4096)
    with Store(StoreConfig(root=(tmp_path / "payloads").as_uri()), record_requests=True) as store:
        PayloadWriter(store).write(store.version_prefix(1), _arrays())
        yield store, secret


def _arrays() -> RequestArrays:
    return RequestArrays(
        prompt_len=4,
        completion_len=3,
        routed_experts=np.arange(6 * 2 * 3, dtype=np.uint8).reshape(6, 2, 3),
        sampling_mask=(np.array([1, 3, 0], np.int32), np.array([7, 8, 9, 10], np.int32)),
    )


def _requests_stay_inside(store: Store) -> None:
    assert store.requests is not None
    root = store.root.fs_root.rstrip("/") + "/"
    for record in store.requests:
        assert record.path.startswith(root), record
        assert "/../" not in record.path
        assert "/./" not in record.path


def test_hostile_uris_are_refused_or_stay_under_the_root(
    planted: tuple[Store, Path],
) -> None:
    store, secret = planted

    @FUZZ
    @given(hostile_uris(store.root.url))
    def check(uri: str) -> None:
        try:
            path = store.check_uri(uri)
        except UriNotAllowedError:
            return
        # Accepted only as a plain key under the root.
        assert uri.startswith(store.root.url + "/")
        assert path.startswith(store.root.fs_root.rstrip("/") + "/")
        assert ".." not in path.split("/")
        assert path != str(secret)

    check()


def test_segments_with_hostile_uris_never_read_outside_the_root(
    planted: tuple[Store, Path],
) -> None:
    store, _secret = planted
    reader = PayloadReader(store)

    @FUZZ
    @given(hostile_uris(store.root.url), st.sampled_from(["routed_experts", "sampling_mask"]))
    def check(uri: str, field: str) -> None:
        assert store.requests is not None
        store.requests.clear()
        ragged = field == "sampling_mask"
        raw = [field, uri, 0, 0, 3, "uint32" if ragged else "uint8", [] if ragged else [2, 3]]
        try:
            (segment,) = decode_segments_msgpack(msgspec.msgpack.encode([raw]))
            reader.read_field([segment], field, 0, 3)
        except PayloadError:
            pass
        _requests_stay_inside(store)

    check()


# A JSON/msgpack value of any shape, for the positional segment fields.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=8),
)
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=8)


@st.composite
def hostile_segment_items(draw: st.DrawFn, blob_uri: str) -> list[Any]:
    """Mostly well-typed segments with hostile numbers, sometimes garbage."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.lists(anything, max_size=9))
    big = st.one_of(
        st.integers(-(2**40), 2**40),
        st.sampled_from([-1, 0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]),
    )
    field = draw(st.sampled_from(["routed_experts", "sampling_mask", "sampling_mask_logprobs",
                                  "routed_expert_weights", "nope", ""]))  # fmt: skip
    dtype = draw(st.sampled_from(["uint8", "uint16", "uint32", "int32", "float32", "float64",
                                  "object", "<u4", "bool", ""]))  # fmt: skip
    shape = draw(st.lists(st.one_of(st.integers(-2, 70), st.just(2**40)), max_size=4))
    return [field, blob_uri, draw(big), draw(big), draw(big), dtype, shape]


def test_hostile_segments_are_typed_errors_or_consistent_reads(
    planted: tuple[Store, Path],
) -> None:
    store, _secret = planted
    reader = PayloadReader(store)
    (blob_uri,) = store.list()

    @FUZZ
    @given(hostile_segment_items(blob_uri), st.integers(0, 2**31), st.integers(0, 64))
    def check(items: list[Any], lo: int, length: int) -> None:
        assert store.requests is not None
        store.requests.clear()
        keys = ["field", "uri", "offset", "pos", "rows", "dtype", "shape"]
        try:  # the keyed JSON form must refuse exactly what the positional form does
            keyed = decode_segments_json(
                msgspec.json.encode([dict(zip(keys, items, strict=False))])
            )
        except PayloadError:
            keyed = None
        try:
            segments = decode_segments_msgpack(msgspec.msgpack.encode([items]))
        except PayloadError:
            assert keyed is None or len(items) != len(keys)
            return
        (segment,) = segments
        assert keyed == segments
        try:
            out = reader.read_field(segments, segment.field, lo, lo + length)
        except PayloadError:
            _requests_stay_inside(store)
            return
        # A read that succeeds has one row per position of the window.
        assert out is not None
        assert out.shape[0] == length
        _requests_stay_inside(store)

    check()


@FUZZ
@given(st.binary(max_size=200))
def test_garbage_segment_messages_are_typed_errors(data: bytes) -> None:
    for decode in (decode_segments_msgpack, decode_segments_json):
        try:
            segments = decode(data)
        except PayloadError:
            continue
        assert isinstance(segments, list)


DTYPES = ["uint8", "uint16", "int32", "float32", "int64", "float16", "object", "V8", "", "S3"]


@st.composite
def packed_arrays(draw: st.DrawFn) -> dict[str, Any]:
    """Inline packed arrays whose parts may disagree."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.one_of(st.integers(-3, 9), st.just(2**62)), max_size=4))
    raw = draw(st.binary(max_size=64))
    data: Any = base64.b64encode(raw).decode()
    mangle = draw(st.integers(0, 5))
    if mangle == 0:
        data = data[:-1] + "!"  # not base64
    elif mangle == 1:
        data = draw(anything)
    obj: dict[str, Any] = {"data": data, "dtype": dtype, "shape": shape}
    if draw(st.booleans()):
        obj["start"] = draw(st.one_of(st.integers(-5, 10), anything))
    if draw(st.integers(0, 6)) == 0:
        obj.pop(draw(st.sampled_from(sorted(obj))))
    return obj


@FUZZ
@given(packed_arrays())
def test_hostile_packed_arrays_are_typed_errors_or_consistent(obj: dict[str, Any]) -> None:
    try:
        array = decode_array(obj)
    except PayloadError:
        pass
    else:
        assert array.nbytes == math.prod(array.shape) * array.dtype.itemsize
        assert list(array.shape) == obj["shape"]
    try:
        rows, start = decode_routing(obj)
    except PayloadError:
        pass
    else:
        assert rows.ndim == 3
        assert start >= 0


@FUZZ
@given(packed_arrays(), packed_arrays())
def test_hostile_packed_masks_are_typed_errors_or_consistent(
    counts: dict[str, Any], ids: dict[str, Any]
) -> None:
    try:
        got_counts, got_ids = decode_mask({"counts": counts, "ids": ids})
    except PayloadError:
        return
    assert int(got_counts.sum()) == got_ids.size
    assert (got_counts >= 0).all()


@pytest.fixture
def blob_store() -> Iterator[tuple[Store, str, int]]:
    with Store(StoreConfig(root=f"memory://fuzz-{uuid.uuid4().hex}")) as store:
        written = PayloadWriter(store).write_blob(store.version_prefix(1), _arrays())
        assert written is not None
        yield store, written.uri, written.size


def test_corrupt_trailers_and_footers_are_typed_errors(
    blob_store: tuple[Store, str, int],
) -> None:
    store, uri, size = blob_store
    original = bytes(store.read(uri, 0, size))
    info, _ = verify_blob(store, uri)
    regions_end = max(r.offset + r.nbytes for r in info.trailer.regions)

    @FUZZ
    @given(
        st.integers(regions_end, size - 1),
        st.integers(1, 255),
        st.sampled_from(["flip", "truncate", "extend"]),
    )
    def check(position: int, xor: int, how: str) -> None:
        data = bytearray(original)
        if how == "flip":
            data[position] ^= xor
        elif how == "truncate":
            data = data[:position]
        else:
            data += bytes([xor]) * (position - regions_end + 1)
        store.put(uri, [bytes(data)])
        try:
            _, checks = verify_blob(store, uri)
        except PayloadError:
            return
        # Bytes appended after the footer leave an unreadable footer unless they happen
        # to form one; anything that still parses must describe the original regions.
        assert how != "flip"
        assert all(c.ok for c in checks)

    try:
        check()
    finally:
        store.put(uri, [original])


def test_flipped_region_bytes_fail_their_checksum(blob_store: tuple[Store, str, int]) -> None:
    store, uri, size = blob_store
    original = bytes(store.read(uri, 0, size))
    info, _ = verify_blob(store, uri)
    regions_end = max(r.offset + r.nbytes for r in info.trailer.regions)

    @FUZZ
    @given(st.integers(0, regions_end - 1), st.integers(1, 255))
    def check(position: int, xor: int) -> None:
        data = bytearray(original)
        data[position] ^= xor
        store.put(uri, [bytes(data)])
        _, checks = verify_blob(store, uri)
        assert sum(not c.ok for c in checks) == 1

    try:
        check()
    finally:
        store.put(uri, [original])
