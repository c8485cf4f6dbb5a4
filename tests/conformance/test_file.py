"""The conformance suite on local files (the pread engine), plus what only files have."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from objstore_payload import (
    PayloadNotFoundError,
    PayloadReader,
    PayloadWriter,
    Store,
    StoreConfig,
    StoreConfigError,
    UriNotAllowedError,
)
from objstore_payload.store import ReadOptions
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
