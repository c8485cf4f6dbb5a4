"""Faults at the filesystem level for local stores: a blob cut short, a blob deleted by a
racing collector, a write that fails halfway (disk full), a version folder that is a file.

Each raises the package's typed error naming the blob (and, for reads, offset and byte
counts) and leaves nothing half-written visible; none yields a wrong value.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from objstore_payload import (
    PayloadNotFoundError,
    PayloadWriter,
    ShortReadError,
    Store,
    StoreConfig,
    StoreIOError,
)
from tests.faults.test_fault_matrix import arrays, read_back


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(StoreConfig(root=(tmp_path / "p").as_uri()))


def test_a_blob_cut_short_is_a_short_read_with_counts(store: Store, tmp_path: Path) -> None:
    segments = PayloadWriter(store).write(store.version_prefix(1), arrays())
    (path,) = (tmp_path / "p" / "v1").iterdir()
    size = path.stat().st_size
    os.truncate(path, size // 2)
    with pytest.raises(ShortReadError, match=r"at offset \d+: expected \d+ bytes, received \d+"):
        read_back(store, segments)


def test_a_blob_deleted_by_a_racing_collector_is_not_found(store: Store, tmp_path: Path) -> None:
    segments = PayloadWriter(store).write(store.version_prefix(1), arrays())
    for path in (tmp_path / "p" / "v1").iterdir():
        path.unlink()
    with pytest.raises(PayloadNotFoundError, match=segments[0].uri):
        read_back(store, segments)


def test_a_write_that_fails_halfway_leaves_nothing(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    written = {"bytes": 0}

    def disk_full(fd: int, data: bytes | memoryview) -> int:
        if written["bytes"] > 1000:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_write(fd, data[:1000])
        written["bytes"] += n
        return n

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(StoreIOError, match=r"writing .*v1/.*\.bin \(\d+ bytes\) failed"):
        PayloadWriter(store).write(store.version_prefix(1), arrays())
    monkeypatch.undo()
    assert store.list() == []
    assert list((tmp_path / "p" / "v1").iterdir()) == []  # no temporary file either


def test_a_version_folder_that_is_a_file_is_a_typed_error(store: Store, tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "v1").write_text("not a folder")
    with pytest.raises(StoreIOError, match="v1"):
        PayloadWriter(store).write(store.version_prefix(1), arrays())
