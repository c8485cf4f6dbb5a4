"""The conformance suite on local files (the pread engine), plus what only files have."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from objstore_payload import (
    PayloadNotFoundError,
    PayloadReader,
    PayloadWriter,
    ShortReadError,
    Store,
    StoreConfig,
    StoreConfigError,
    UriNotAllowedError,
)
from objstore_payload.store import ReadOptions
from objstore_payload.store.local import LocalEngine
from tests.conformance.base import FAST_RETRY, StoreConformance, worked_example


class TestFileStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        config = StoreConfig(root=(tmp_path / "payloads").as_uri(), retry=FAST_RETRY)
        with Store(config, record_requests=True) as store:
            yield store

    def test_write_leaves_no_temporary_file(self, store: Store, tmp_path: Path) -> None:
        PayloadWriter(store).write(store.version_prefix(1), worked_example())
        names = os.listdir(tmp_path / "payloads" / "v1")
        assert len(names) == 1
        assert names[0].endswith(".bin")

    def test_symlink_out_of_the_root_is_not_followed(self, store: Store, tmp_path: Path) -> None:
        secret = tmp_path / "secret.bin"
        secret.write_bytes(b"s" * 64)
        (tmp_path / "payloads").mkdir(exist_ok=True)
        (tmp_path / "payloads" / "link.bin").symlink_to(secret)
        with pytest.raises(UriNotAllowedError, match=r"symbolic link|outside the storage root"):
            store.read_ranges([(f"{store.root.url}/link.bin", 0, 8)])
        assert store.stats.get_requests == 1  # refused, not retried

    def test_symlinked_directory_out_of_the_root_is_refused(
        self, store: Store, tmp_path: Path
    ) -> None:
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "x.bin").write_bytes(b"s" * 64)
        (tmp_path / "payloads").mkdir(exist_ok=True)
        (tmp_path / "payloads" / "v9").symlink_to(outside)
        with pytest.raises(UriNotAllowedError, match="outside the storage root"):
            store.read_ranges([(f"{store.root.url}/v9/x.bin", 0, 8)])

    def test_fifo_under_the_root_is_refused_without_hanging(
        self, store: Store, tmp_path: Path
    ) -> None:
        (tmp_path / "payloads").mkdir(exist_ok=True)
        os.mkfifo(tmp_path / "payloads" / "pipe.bin")
        with pytest.raises(UriNotAllowedError, match="not a regular file"):
            store.read_ranges([(f"{store.root.url}/pipe.bin", 0, 8)])

    def test_write_through_a_symlinked_directory_is_refused(
        self, store: Store, tmp_path: Path
    ) -> None:
        outside = tmp_path / "outside"
        outside.mkdir()
        (tmp_path / "payloads").mkdir(exist_ok=True)
        (tmp_path / "payloads" / "v7").symlink_to(outside)
        with pytest.raises(UriNotAllowedError, match="outside the storage root"):
            PayloadWriter(store).write(store.version_prefix(7), worked_example())
        assert list(outside.iterdir()) == []


def test_fsspec_engine_is_refused_for_file_roots(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="local engine"):
        _ = Store(StoreConfig(root=tmp_path.as_uri(), engine="fsspec")).engine


def test_threaded_local_reads_match_the_loop(tmp_path: Path) -> None:
    root = (tmp_path / "p").as_uri()
    with (
        Store(StoreConfig(root=root)) as plain,
        Store(StoreConfig(root=root, read=ReadOptions(local_threads=4))) as threaded,
    ):
        writer = PayloadWriter(plain)
        segments = [s for _ in range(6) for s in writer.write(root, worked_example())]
        a = PayloadReader(plain).read_field(segments, "sampling_mask", 0, 8)
        b = PayloadReader(threaded).read_field(segments, "sampling_mask", 0, 8)
        assert a is not None
        assert b is not None
        np.testing.assert_array_equal(a, b)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("open_files", [0, 3, 64])
def test_cached_descriptors_are_bounded_and_dropped_on_delete(
    tmp_path: Path, open_files: int
) -> None:
    root = (tmp_path / "p").as_uri()
    config = StoreConfig(root=root, read=ReadOptions(local_open_files=open_files))
    before = _open_descriptors()
    with Store(config) as store:
        writer = PayloadWriter(store)
        segments = [s for _ in range(8) for s in writer.write(root, worked_example())]
        reader = PayloadReader(store)
        masks = [s for s in segments if s.field == "sampling_mask"]
        for seg in masks:  # eight blobs, read twice each
            for _ in range(2):
                got = reader.read_field([seg], "sampling_mask", seg.pos, seg.end)
                assert got is not None
        assert _open_descriptors() - before <= min(open_files, 8)
        # A blob this process deleted is gone for its reads too, cached descriptor or not.
        store.delete([masks[-1].uri])
        with pytest.raises(PayloadNotFoundError):
            reader.read_field([masks[-1]], "sampling_mask", masks[-1].pos, masks[-1].end)
    assert _open_descriptors() == before  # close() closes the cached descriptors


def test_negative_open_files_is_a_config_error() -> None:
    with pytest.raises(StoreConfigError):
        ReadOptions(local_open_files=-1)


def test_a_directory_made_again_is_looked_up_again(tmp_path: Path) -> None:
    # A fresh run wipes the root and writes v0/ again; a reader that kept v0/'s old
    # descriptor must still find the new blobs.
    root = tmp_path / "p"
    with Store(StoreConfig(root=root.as_uri())) as store:
        writer, reader = PayloadWriter(store), PayloadReader(store)
        (first, *_) = writer.write(store.version_prefix(0), worked_example())
        assert reader.read_field([first], first.field, first.pos, first.end) is not None
        shutil.rmtree(root / "v0")
        (second, *_) = writer.write(store.version_prefix(0), worked_example())
        got = reader.read_field([second], second.field, second.pos, second.end)
        assert got is not None
        # The removed blob is gone once its cached descriptor is (blobs are immutable,
        # so a descriptor still cached would read its very bytes, never other ones).
        engine = store.engine
        assert isinstance(engine, LocalEngine)
        engine.drop_open_files()
        with pytest.raises(PayloadNotFoundError):
            reader.read_field([first], first.field, first.pos, first.end)


def test_a_directory_swapped_for_a_symlink_after_a_read_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "p", tmp_path / "outside"
    with Store(StoreConfig(root=root.as_uri())) as store:
        writer, reader = PayloadWriter(store), PayloadReader(store)
        (seg, *_) = writer.write(store.version_prefix(3), worked_example())
        assert reader.read_field([seg], seg.field, seg.pos, seg.end) is not None
        # Move the directory out of the root and leave a symlink to it in its place.
        (root / "v3").rename(outside)
        (root / "v3").symlink_to(outside, target_is_directory=True)
        engine = store.engine
        assert isinstance(engine, LocalEngine)
        engine.drop_open_files()  # the blob's descriptor is not cached either
        with pytest.raises(UriNotAllowedError):
            reader.read_field([seg], seg.field, seg.pos, seg.end)


def test_a_put_over_a_name_is_read_fresh(tmp_path: Path) -> None:
    root = (tmp_path / "p").as_uri()
    with Store(StoreConfig(root=root)) as store:
        uri = store.new_blob_uri(root)
        store.put(uri, [b"AAAA"])
        assert bytes(store.read(uri, 0, 4)) == b"AAAA"  # its descriptor is cached now
        store.put(uri, [b"BBBB"])
        assert bytes(store.read(uri, 0, 4)) == b"BBBB"
        store.put(uri, [b"CC"])
        with pytest.raises(ShortReadError):
            store.read(uri, 0, 4)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_forked_child_closes_the_descriptors_it_inherited(tmp_path: Path) -> None:
    import multiprocessing

    root = (tmp_path / "p").as_uri()
    store = Store(StoreConfig(root=root))
    uris = [store.new_blob_uri(root) for _ in range(5)]
    for uri in uris:
        store.put(uri, [b"x" * 64])
        store.read(uri, 0, 64)  # five cached descriptors in the parent

    def child(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
        before = _open_descriptors()
        store.read(uris[0], 0, 64)  # rebuilds the engine in the child
        queue.put((before, _open_descriptors()))

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    before, after = queue.get(timeout=30)
    process.join(timeout=30)
    # The five inherited blob descriptors are closed; one new one is cached.
    assert after <= before - 5 + 1
    store.close()
