"""The command line: demo against file:// and the embedded S3, inspect and verify."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from objstore_payload import PayloadWriter, RequestArrays, Store, StoreConfig
from objstore_payload.cli.main import main


def test_demo_on_a_file_store_keeps_its_blobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = (tmp_path / "payloads").as_uri()
    assert main(["demo", "--store", root, "--requests", "3", "--cp", "2"]) == 0
    out = capsys.readouterr().out
    assert "parity with inline codec: OK (6/6 windows bitwise equal)" in out
    # torch is part of the test environment, so the trainer half runs too
    assert "parity with the inline path: OK" in out
    assert "trainer path (torch): 3 samples" in out
    routing_line = next(line for line in out.splitlines() if line.startswith("routed_experts"))
    assert float(routing_line.split()[2]) == pytest.approx(384.0, rel=0.01)  # 48 x 8 uint8
    assert len(list((tmp_path / "payloads" / "v0").iterdir())) == 3


def test_demo_on_the_embedded_s3_as_a_user_runs_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "objstore_payload.cli.main", "demo", "--requests", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "embedded S3 at http://127.0.0.1:" in result.stdout
    assert "parity with inline codec: OK (8/8 windows bitwise equal)" in result.stdout
    assert "parity with the inline path: OK" in result.stdout
    assert "GET /" not in result.stdout + result.stderr  # no request log noise


def write_blob(tmp_path: Path) -> tuple[str, Path]:
    root = (tmp_path / "p").as_uri()
    with Store(StoreConfig(root=root)) as store:
        written = PayloadWriter(store).write_blob(
            store.version_prefix(2),
            RequestArrays(
                prompt_len=4,
                completion_len=3,
                routed_experts=np.arange(24).reshape(4, 2, 3),
                sampling_mask=(np.array([1, 3, 0]), np.array([7, 8, 9, 10])),
            ),
        )
    assert written is not None
    return written.uri, tmp_path / "p" / "v2" / written.uri.rsplit("/", 1)[1]


def test_inspect_prints_the_field_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri, _ = write_blob(tmp_path)
    assert main(["inspect", uri, "--verify"]) == 0
    out = capsys.readouterr().out
    assert "routed_experts" in out
    assert "sampling_mask" in out
    assert "[2, 3]" in out
    assert "verify: all regions match" in out


def test_inspect_verify_catches_a_flipped_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, path = write_blob(tmp_path)
    data = bytearray(path.read_bytes())
    data[30] ^= 0x01  # inside the mask's CSR region
    path.write_bytes(bytes(data))
    assert main(["inspect", uri]) == 0  # the trailer alone is intact
    assert main(["inspect", uri, "--verify"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out
    assert "corrupt" in captured.err


@pytest.mark.parametrize("target", ["missing.bin", "not-a-blob.bin"])
def test_inspect_reports_bad_targets_as_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    (tmp_path / "not-a-blob.bin").write_bytes(b"hello world, not a payload blob")
    assert main(["inspect", (tmp_path / target).as_uri()]) == 2
    assert capsys.readouterr().err.startswith("error: ")
