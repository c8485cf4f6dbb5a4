"""Smoke run of the benchmark harness at tiny scale: it runs and its numbers are sane (the
goals are the benchmark's business, not the tests')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from objstore_payload.cli.main import main


def test_bench_read_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    assert main(["bench", "read", "--scale", "0.125", "--repeats", "1", "--out", str(out)]) == 0
    data = json.loads((out / "read.json").read_text())
    assert data["tokens"] == 4000
    assert data["blobs"] == 4
    assert len(data["window_seconds"]) == 4  # 4 CP ranks x 1 repeat
    assert data["ratio_to_raw"] > 0
    assert 1 <= data["gets_per_blob"] <= 4
    assert data["bytes_per_window"] > 4000 / 4 * 384  # at least its share of the routing
    assert "GETs per distinct blob" in capsys.readouterr().out


def test_bench_gc_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    assert main(["bench", "gc", "--scale", "0.01", "--out", str(out)]) == 0  # embedded S3
    data = json.loads((out / "gc.json").read_text())
    assert data["blobs"] == 150
    assert data["deleted"] == 150
    assert data["delete_requests"] == 1  # one DeleteObjects for up to 1,000 keys
    assert data["caller_blocked_s"] <= data["background_s"]
    assert "delete requests: 1 for 150 keys" in capsys.readouterr().out
