"""One conformance suite, subclassed per backend (memory, file, moto in-process, moto server).

A subclass provides a ``store`` fixture: an empty `Store` with ``record_requests=True``
under a root of its own. Every test here must pass unchanged on every backend.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any, Protocol

import numpy as np
import pytest

from objstore_payload import (
    FieldWindow,
    InvalidPayloadError,
    InvalidSegmentError,
    PayloadNotFoundError,
    PayloadReader,
    PayloadWriter,
    RequestArrays,
    Segment,
    ShortReadError,
    Store,
    UnknownFieldError,
    UriNotAllowedError,
)
from objstore_payload.store import RetryPolicy, S3Options, StoreConfig
from objstore_payload.verify import read_blob_info, verify_blob

FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.01)
"""Retries without the production backoff, so failure tests stay fast."""


class S3Server(Protocol):
    """A test S3 server on 127.0.0.1 (moto server, Ceph RGW)."""

    bucket: str

    def s3_options(self, **overrides: Any) -> S3Options: ...


def s3_store(server: S3Server, engine: str, **s3: Any) -> Store:
    """An empty store under a fresh prefix of ``server``'s bucket, recording requests."""
    config = StoreConfig(
        root=f"s3://{server.bucket}/{uuid.uuid4().hex}",
        engine=engine,  # type: ignore[arg-type]
        s3=server.s3_options(**s3),
        retry=FAST_RETRY,
    )
    return Store(config, record_requests=True)


def hostile_uris(store: Store) -> list[str]:
    """URIs a hostile segment might carry, relative to ``store``'s root."""
    root = store.root.url
    scheme, _, rest = root.partition("://")
    return [
        "",
        "v0/x.bin",
        "/etc/passwd",
        "file:///etc/passwd",
        "http://169.254.169.254/latest/meta-data",
        f"{root}/../x.bin",
        f"{root}/v0/../../x.bin",
        f"{root}//x.bin",
        f"{root}/v0//x.bin",
        f"{root}/./x.bin",
        f"{root}/v0/%2e%2e/x.bin",
        f"{root}/v0/x.bin?versionId=1",
        f"{root}/v0/x.bin#frag",
        f"{root}/v0/x\x00.bin",
        f"{root}/v0/x\n.bin",
        f"{root}/v0/.hidden.tmp",
        f"{root}/",
        root,
        f"{root}x/v0/x.bin",
        f"simplecache::{root}/v0/x.bin",
        f"{root}/v0/x.bin::memory://y",
        f"{scheme}://arn:aws:s3:us-east-1:123456789012:accesspoint/ap/{rest}/x.bin",
        f"{scheme.upper()}://{rest}/x.bin",
        f"{root}/v0/\u00e9.bin",
        f"{root}/" + "a/" * 40 + "x.bin",
        f"{root}/" + "a/" * 300 + "x.bin",
        f"{root}/" + "abcdefghi/" * 110 + "x.bin",
    ]


def worked_example() -> RequestArrays:
    """Routing ``arange(24).reshape(4, 2, 3)``, prompt 4, completion 3, mask counts
    ``[1, 3, 0]`` over ids ``[7, 8, 9, 10]``."""
    return RequestArrays(
        prompt_len=4,
        completion_len=3,
        routed_experts=np.arange(24).reshape(4, 2, 3),
        sampling_mask=(np.array([1, 3, 0], dtype=np.int32), np.array([7, 8, 9, 10], np.int32)),
    )


class StoreConformance:
    """Behaviour every backend must have."""

    # -- raw bytes ----------------------------------------------------------------------
    def test_put_then_read_ranges_returns_exact_bytes(self, store: Store) -> None:
        data = bytes(range(256)) * 64
        uri = store.new_blob_uri(store.version_prefix(3))
        assert uri.startswith(store.root.url + "/v3/")
        assert uri.endswith(".bin")
        store.put(uri, [memoryview(data[:1000]), data[1000:]])
        ranges = [(uri, 0, 10), (uri, 5000, 5100), (uri, len(data) - 7, len(data)), (uri, 3, 3)]
        got = store.read_ranges(ranges)
        assert [bytes(g) for g in got] == [data[s:e] for _, s, e in ranges]
        assert store.size(uri) == len(data)

    def test_nearby_ranges_of_one_object_merge_into_one_request(self, store: Store) -> None:
        gap = store.coalesce_policy.max_gap
        data = np.random.default_rng(0).integers(0, 256, 3 * gap + 4096, dtype=np.uint8).tobytes()
        uri = store.new_blob_uri(store.root.url)
        store.put(uri, [data])
        store.stats.reset()
        near = [(uri, 0, 100), (uri, 100 + gap, 200 + gap), (uri, 50, 150)]
        got = store.read_ranges(near)
        assert [bytes(g) for g in got] == [data[s:e] for _, s, e in near]
        assert store.stats.get_requests == 1
        store.stats.reset()
        far = [(uri, 0, 100), (uri, 101 + gap, 200 + gap)]
        assert [bytes(g) for g in store.read_ranges(far)] == [data[s:e] for _, s, e in far]
        assert store.stats.get_requests == 2

    def test_reads_land_in_given_destinations(self, store: Store) -> None:
        data = bytes(range(256)) * 40
        uri = store.new_blob_uri(store.root.url)
        store.put(uri, [data])
        ranges = [(uri, 0, 100), (uri, 150, 300), (uri, 120, 130), (uri, 5000, 5100), (uri, 50, 60)]
        dests = [bytearray(100), None, bytearray(10), bytearray(100), None]
        views = store.read_ranges(ranges, into=[memoryview(d) if d else None for d in dests])
        assert [bytes(v) for v in views] == [data[s:e] for _, s, e in ranges]
        assert bytes(dests[0]) == data[:100]  # type: ignore[arg-type]
        assert bytes(dests[2]) == data[120:130]  # type: ignore[arg-type]
        assert bytes(dests[3]) == data[5000:5100]  # type: ignore[arg-type]
        array = np.zeros((5, 4), dtype=np.uint8)
        store.read_ranges([(uri, 40, 60)], into=[memoryview(array)])
        assert array.tobytes() == data[40:60]

    def test_bad_destinations_are_refused(self, store: Store) -> None:
        uri = store.new_blob_uri(store.root.url)
        store.put(uri, [b"x" * 64])
        with pytest.raises(ValueError, match="destination of 3 bytes"):
            store.read_ranges([(uri, 0, 8)], into=[memoryview(bytearray(3))])
        with pytest.raises(ValueError, match="writable"):
            store.read_ranges([(uri, 0, 8)], into=[memoryview(b"12345678")])
        with pytest.raises(ShortReadError):
            store.read_ranges([(uri, 60, 70)], into=[memoryview(bytearray(10))])

    def test_missing_blob_raises_not_found(self, store: Store) -> None:
        uri = store.new_blob_uri(store.root.url)
        with pytest.raises(PayloadNotFoundError, match="does not exist") as info:
            store.read_ranges([(uri, 0, 10)])
        assert isinstance(info.value, FileNotFoundError)

    def test_range_past_the_end_raises_short_read_with_counts(self, store: Store) -> None:
        uri = store.new_blob_uri(store.root.url)
        store.put(uri, [b"x" * 100])
        with pytest.raises(ShortReadError) as info:
            store.read_ranges([(uri, 60, 160)])
        assert (info.value.uri, info.value.offset, info.value.expected) == (uri, 60, 100)
        assert info.value.received == 40
        assert store.stats.get_requests == FAST_RETRY.max_attempts

    def test_range_starting_past_the_end_is_a_short_read(self, store: Store) -> None:
        uri = store.new_blob_uri(store.root.url)
        store.put(uri, [b"x" * 100])
        with pytest.raises(ShortReadError) as info:
            store.read_ranges([(uri, 150, 160)])
        assert (info.value.expected, info.value.received) == (10, 0)

    def test_rows_with_an_empty_dimension_are_refused_before_writing(self, store: Store) -> None:
        arrays = RequestArrays(
            prompt_len=4, completion_len=3, routed_experts=np.zeros((6, 0, 8), np.uint8)
        )
        with pytest.raises(InvalidPayloadError, match="row dimensions"):
            PayloadWriter(store).write(store.root.url, arrays)
        assert store.list() == []

    @pytest.mark.parametrize("index", range(27))
    def test_hostile_uri_is_refused_before_any_io(self, store: Store, index: int) -> None:
        uri = hostile_uris(store)[index]
        seg = Segment("routed_experts", uri or "x", 0, 0, 1, "uint8", (2, 3))
        with pytest.raises(UriNotAllowedError):
            PayloadReader(store).read_field([seg], "routed_experts", 0, 4)
        with pytest.raises(UriNotAllowedError):
            store.read_ranges([(uri, 0, 1)])
        with pytest.raises(UriNotAllowedError):
            store.delete([uri])
        assert store.requests == []

    @pytest.mark.parametrize(
        ("field", "dtype", "shape", "error"),
        [
            ("routed_experts", "float32", (2, 3), InvalidSegmentError),  # not a routing dtype
            ("routed_experts", "uint8", (6,), InvalidSegmentError),  # rows must be 2-D
            ("sampling_mask", "int32", (), InvalidSegmentError),  # ragged: uint32 words
            ("sampling_mask", "uint32", (4,), InvalidSegmentError),  # ragged: shape []
            ("not_a_field", "uint8", (2, 3), UnknownFieldError),
        ],
    )
    def test_well_formed_but_wrong_segments_are_refused_before_any_io(
        self, store: Store, field: str, dtype: str, shape: tuple[int, ...], error: type[Exception]
    ) -> None:
        uri = store.new_blob_uri(store.root.url)
        seg = Segment(field, uri, 0, 0, 4, dtype, shape)
        with pytest.raises(error):
            PayloadReader(store).read_field([seg], field, 0, 4)
        assert store.requests == []

    def test_destination_outside_the_root_is_refused(self, store: Store) -> None:
        writer = PayloadWriter(store)
        for destination in ("s3://other-bucket/x", f"{store.root.url}/../x", "/tmp/x"):
            with pytest.raises(UriNotAllowedError):
                writer.write(destination, worked_example())
        assert store.requests == []

    # -- housekeeping -------------------------------------------------------------------
    def test_list_and_batched_delete(self, store: Store) -> None:
        uris = [store.new_blob_uri(store.version_prefix(k % 2)) for k in range(5)]
        for uri in uris:
            store.put(uri, [b"payload"])
        assert store.list() == sorted(uris)
        assert store.list(store.version_prefix(1)) == sorted(uris[1::2])
        missing = store.new_blob_uri(store.root.url)
        report = store.delete([*uris, missing])
        assert report.failed == []
        assert report.deleted == 6
        assert store.list() == []

    def test_retention_collects_consumed_discarded_and_stale_blobs(self, store: Store) -> None:
        from objstore_payload.lifecycle import PayloadCollector

        collector = PayloadCollector(store, max_off_policy_steps=1)
        shipped = [store.new_blob_uri(store.version_prefix(3)) for _ in range(3)]
        dropped = store.new_blob_uri(store.version_prefix(3))
        stale = store.new_blob_uri(store.version_prefix(1))
        fresh = store.new_blob_uri(store.version_prefix(3))
        for uri in [*shipped, dropped, stale, fresh]:
            store.put(uri, [b"payload"])
        collector.record_batch(4, shipped)
        collector.discard([dropped]).result()
        collector.on_policy_update(4).result()  # keeps v3 and up
        assert store.list() == [fresh]
        assert (collector.stats.deleted_on_consume, collector.stats.deleted_by_backstop) == (3, 1)
        collector.close()

    # -- writer and reader --------------------------------------------------------------
    def test_worked_example(self, store: Store) -> None:
        segments = PayloadWriter(store).write(store.version_prefix(3), worked_example())
        routing, mask = segments
        assert (routing.field, routing.pos, routing.rows, routing.dtype, routing.shape) == (
            "routed_experts",
            2,
            4,
            "uint8",
            (2, 3),
        )
        assert (mask.field, mask.pos, mask.rows, mask.dtype, mask.shape) == (
            "sampling_mask",
            4,
            3,
            "uint32",
            (),
        )
        reader = PayloadReader(store)
        got_mask = reader.read_field(segments, "sampling_mask", 4, 7)
        assert got_mask is not None
        assert got_mask.tolist() == [[7, -1, -1], [8, 9, 10], [-1, -1, -1]]
        got_routing = reader.read_field(segments, "routed_experts", 0, 8)
        expected = np.zeros((8, 2, 3), np.uint8)
        expected[2:6] = np.arange(24).reshape(4, 2, 3)
        assert got_routing is not None
        np.testing.assert_array_equal(got_routing, expected)
        assert reader.read_field(segments, "routed_expert_weights", 0, 8) is None

    def test_one_window_of_one_blob_takes_two_requests(self, store: Store) -> None:
        segments = PayloadWriter(store).write(store.root.url, worked_example())
        store.stats.reset()
        reader = PayloadReader(store)
        reader.read_window(
            segments, [FieldWindow("routed_experts", 2, 5), FieldWindow("sampling_mask", 3, 6)]
        )
        # pass 1: the mask's offset words; pass 2: routing rows and mask values, merged.
        assert store.stats.get_requests == 2

    def test_ragged_width_is_the_widest_row_of_all_segments(self, store: Store) -> None:
        writer = PayloadWriter(store)
        narrow = writer.write(
            store.root.url,
            RequestArrays(
                prompt_len=2, completion_len=2, sampling_mask=(np.array([1, 1]), np.array([5, 6]))
            ),
        )
        wide = writer.write(
            store.root.url,
            RequestArrays(
                prompt_len=0, completion_len=1, sampling_mask=(np.array([4]), np.arange(4))
            ),
        )
        micro_batch = narrow + [s.shift(10) for s in wide]
        got = PayloadReader(store).read_field(micro_batch, "sampling_mask", 0, 4)
        assert got is not None
        assert got.tolist() == [[-1] * 4, [-1] * 4, [5, -1, -1, -1], [6, -1, -1, -1]]

    def test_zero_row_segment_reads_as_fill_without_io(self, store: Store) -> None:
        # A sample truncated before its first completion token keeps a zero-row mask
        # placeholder: the trainer gets an all -1, width-1 tensor, like the inline path.
        segments = PayloadWriter(store).write(store.root.url, worked_example())
        placeholder = Segment(
            "sampling_mask", segments[1].uri, segments[1].offset, 0, 0, "uint32", ()
        )
        store.stats.reset()
        got = PayloadReader(store).read_field([placeholder], "sampling_mask", 0, 3)
        assert got is not None
        assert got.tolist() == [[-1], [-1], [-1]]
        assert store.stats.get_requests == 0

    def test_async_reads_and_writes_match_sync(self, store: Store) -> None:
        writer, reader = PayloadWriter(store), PayloadReader(store)
        windows = [FieldWindow("routed_experts", 0, 8), FieldWindow("sampling_mask", 4, 8)]

        async def run() -> tuple[list[Segment], list[np.ndarray | None]]:
            segments = await writer.awrite(store.root.url, worked_example())
            return segments, await reader.aread_window(segments, windows)

        segments, got = asyncio.run(run())
        expected = reader.read_window(segments, windows)
        for g, e in zip(got, expected, strict=True):
            assert g is not None
            assert e is not None
            assert g.tobytes() == e.tobytes()

    def test_written_blob_verifies(self, store: Store) -> None:
        arrays = RequestArrays(
            prompt_len=6,
            completion_len=4,
            routed_experts=np.ones((9, 4, 2), np.uint16) * 300,
            routed_expert_weights=np.full((9, 4, 2), 0.5, np.float32),
            sampling_mask=(np.array([2, 0, 1, 3]), np.arange(6)),
            sampling_mask_logprobs=np.linspace(-3, 0, 6, dtype=np.float32),
        )
        written = PayloadWriter(store).write_blob(store.root.url, arrays)
        assert written is not None
        info, checks = verify_blob(store, written.uri)
        assert info.size == written.size == store.size(written.uri)
        assert [c.region.field for c in checks] == [
            "routed_experts",
            "routed_expert_weights",
            "sampling_mask",
            "sampling_mask_logprobs",
        ]
        assert all(c.ok for c in checks)
        assert read_blob_info(store, written.uri).trailer.regions == written.regions
        assert math.prod(written.segments[0].shape) == 8
