"""Integrity: the trailer's CRC32Cs let `inspect --verify` and a verifying read catch one
flipped byte anywhere in a blob's regions; a plain read does not check (and says so)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from objstore_payload import (
    ChecksumMismatchError,
    PayloadReader,
    PayloadWriter,
    Store,
    StoreConfig,
)
from objstore_payload.cli.main import main
from objstore_payload.reader import FieldWindow
from tests.faults.test_fault_matrix import arrays, expected_windows

WINDOWS = [FieldWindow("routed_experts", 0, 799), FieldWindow("sampling_mask", 500, 800)]


@pytest.fixture
def written(tmp_path: Path) -> tuple[Store, list, Path]:  # type: ignore[type-arg]
    store = Store(StoreConfig(root=(tmp_path / "p").as_uri()))
    segments = PayloadWriter(store).write(store.version_prefix(1), arrays())
    (path,) = (tmp_path / "p" / "v1").iterdir()
    return store, segments, path


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["routing", "mask offsets", "mask values"])
def test_a_flipped_byte_is_caught_by_a_verifying_read(
    written: tuple[Store, list, Path],  # type: ignore[type-arg]
    where: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, segments, path = written
    routing_bytes = 799 * 8
    position = {"routing": 1234, "mask offsets": routing_bytes + 8, "mask values": -200}[where]
    info_size = path.stat().st_size
    flip(path, position if position >= 0 else info_size + position - 400)
    verifying = PayloadReader(store, verify=True)
    with pytest.raises(ChecksumMismatchError, match=r"region at byte \d+ .* fails its CRC32C"):
        verifying.read_window(segments, WINDOWS)
    with pytest.raises(ChecksumMismatchError):
        asyncio.run(verifying.aread_window(segments, WINDOWS))
    assert main(["inspect", "--verify", segments[0].uri]) == 1
    assert "MISMATCH" in capsys.readouterr().out.upper()


def test_a_verifying_read_of_a_sound_blob_is_exact(
    written: tuple[Store, list, Path],  # type: ignore[type-arg]
) -> None:
    store, segments, _ = written
    routing, mask = PayloadReader(store, verify=True).read_window(segments, WINDOWS)
    want_routing, want_mask = expected_windows(arrays())
    np.testing.assert_array_equal(routing, want_routing)
    np.testing.assert_array_equal(mask, want_mask)
