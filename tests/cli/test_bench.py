"""Smoke runs of every benchmark scenario at tiny scale: the harness runs and its numbers
are sane. Whether goals are met is the benchmark's business, not the tests'."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from objstore_payload import PayloadReader, Store, StoreConfig
from objstore_payload.bench import BenchContext, run_scenario
from objstore_payload.bench.latency import DelayedEngine
from objstore_payload.bench.plan import PlanInputs, plan
from objstore_payload.bench.read import measure_read
from objstore_payload.bench.report import Figure, Report, format_report, write_results
from objstore_payload.bench.shape import BATCH_SHAPE, READ_SHAPE
from objstore_payload.bench.workload import by_handle_micro_batches
from objstore_payload.cli.main import main
from objstore_payload.store.local import LocalEngine

QUIET = BenchContext(quiet=True)


def bench(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "results"
    assert main(["bench", *args, "--repeats", "1", "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "results.json").read_text())


def figures_of(report: dict[str, Any]) -> dict[str, str]:
    return {f["label"]: f["value"] for f in report["figures"]}


def test_batch_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (report,) = bench(tmp_path, "batch", "--scale", "0.02")["reports"]
    inline, handle = report["data"]["inline"], report["data"]["by_handle"]
    assert report["data"]["shape"]["samples"] == 1
    # One 32k-token sample of 48 x 8 uint8 routing: at least 12 MiB inline, a few by handle.
    assert inline["resident_bytes"] > 32_768 * 384
    assert 0 < handle["resident_bytes"] < inline["resident_bytes"] / 10
    assert inline["peak_bytes"] >= inline["resident_bytes"]
    # 30 turns x (routing + mask), and 7 dummies for the other DP ranks keep the routing.
    assert handle["segments"] == 60 + 7 * 30
    assert 0 < handle["segment_bytes"] < handle["wire_bytes"] < inline["wire_bytes"]
    assert handle["egress_bytes"] == 4 * handle["wire_bytes"]
    assert inline["rank0_decode_s"] > 0
    assert handle["rank0_decode_s"] > 0
    assert (tmp_path / "results" / "bench.png").stat().st_size > 1000
    assert "samples resident" in capsys.readouterr().out


def test_read_smoke_on_a_file_store(tmp_path: Path) -> None:
    (report,) = bench(tmp_path, "read", "--scale", "0.125", "--no-s3")["reports"]
    stores = report["data"]["stores"]
    assert [s["label"] for s in stores] == ["file", "file, window width", "file, verifying"]
    for store in stores[:2]:
        assert store["ratio_to_raw"] > 0
        assert 1 <= store["gets_per_blob"] <= 4
        assert store["bytes_per_window"] > 4000 / 4 * 384  # its share of the routing


def test_read_on_the_embedded_s3_compares_engines() -> None:
    ctx = BenchContext(scale=0.125, repeats=1, quiet=True, rgw_script=None)
    report = run_scenario("read", ctx)
    labels = [s["label"] for s in report.data["stores"]]
    assert labels[3:5] == [
        "embedded S3 (moto server), fsspec",
        "embedded S3 (moto server), boto3",
    ]
    gets = {s["label"]: s["gets_per_window"] for s in report.data["stores"]}
    assert gets["embedded S3 (moto server), fsspec"] == gets["embedded S3 (moto server), boto3"]


def test_latency_smoke(tmp_path: Path) -> None:
    (report,) = bench(tmp_path, "latency", "--scale", "0.125")["reports"]
    data = report["data"]
    # Two dependent passes of 20 ms each at least (offsets, then values and routing).
    assert min(data["window_s"]) >= 0.04
    assert all(r >= 1 for r in data["ratio_to_pass_ideal"])
    loader = data["loader"]
    assert loader["long_step_s"] > loader["short_step_s"] > 0
    assert loader["short_wait_s"] >= 0


def test_response_smoke(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    (report,) = bench(tmp_path, "response", "--scale", "0.125")["reports"]
    by_density = report["data"]["by_density"]
    for density, figures in by_density.items():
        assert figures["handle_bytes"] * 50 < figures["inline_bytes"]
        per_token = figures["mask_bytes"] / figures["completion_tokens"]
        # CSR: 4 B per row + 4 B per id.
        assert per_token == pytest.approx(4 + 4 * figures["mean_ids"], rel=0.02), density
        assert len(figures["write_s"]) == report["data"]["requests"]


def test_gc_smoke(tmp_path: Path) -> None:
    (report,) = bench(tmp_path, "gc", "--scale", "0.01")["reports"]
    assert report["data"]["blobs"] == 150
    assert report["data"]["deleted"] == 150
    assert report["data"]["delete_requests"] == 1  # one DeleteObjects for up to 1,000 keys
    assert report["data"]["caller_blocked_s"] <= report["data"]["background_s"]


def test_load_smoke(tmp_path: Path) -> None:
    (report,) = bench(tmp_path, "load", "--scale", "0.005")["reports"]
    data = report["data"]
    assert data["written"] > 0
    assert data["read"] == data["written"]
    assert data["lost"] == data["corrupt"] == 0
    assert data["fds_leaked"] == []
    assert data["seconds"] < 30


def test_plan_smoke_and_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (report,) = bench(tmp_path, "plan")["reports"]
    assert report["data"]["puts"] == 64 * 30
    capsys.readouterr()
    assert main(["plan", "--samples", "128", "--dp", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["puts"] == 128 * 30
    assert data["micro_batches"] == 128
    assert main(["plan", "--cp", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err


def test_unknown_scenario_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nope"]) == 2
    assert "unknown scenario nope" in capsys.readouterr().err


@pytest.mark.parametrize("mask_width", ["micro_batch", "window"])
@pytest.mark.parametrize("kind", ["file", "memory"])
def test_plan_agrees_with_what_the_reader_does(tmp_path: Path, kind: str, mask_width: str) -> None:
    shape = READ_SHAPE.scaled(0.25)
    root = (tmp_path / "s").as_uri() if kind == "file" else f"memory://plan-{uuid.uuid4().hex}"
    with Store(StoreConfig(root=root), record_requests=True) as store:
        measured = measure_read(
            store,
            shape,
            repeats=1,
            label=kind,
            ctx=QUIET,
            mask_width="window" if mask_width == "window" else "micro_batch",
        )
        gap = store.coalesce_policy.max_gap
    model = plan(
        PlanInputs(
            shape=shape,
            coalesce_gap=gap,
            mask_width="window" if mask_width == "window" else "micro_batch",
        )
    )
    # The model runs the reader's planner and merging: the same GETs, and the same bytes
    # up to the random mask lengths of the measured batch.
    assert model.gets_per_window == measured.gets / measured.windows
    assert model.bytes_per_window == pytest.approx(measured.bytes / measured.windows, rel=0.03)


def test_plan_counts_the_batch_shape() -> None:
    result = plan(PlanInputs(shape=BATCH_SHAPE))
    assert result.puts == 64 * 30
    assert result.micro_batches == 64
    assert result.dummies == 0
    # Every byte of routing is read exactly once across the CP ranks of a micro batch.
    routing = 64 * (32_768 - 30) * 384
    assert result.bytes_read > routing
    assert result.gets == 64 * sum(result.per_window.gets)
    assert not result.needs_hash_prefix
    assert result.cost_per_day > 0


def test_delayed_engine_serves_the_bytes_after_the_delay(tmp_path: Path) -> None:
    root = tmp_path / "s"
    engine = DelayedEngine(LocalEngine(str(root)), 0.01, 4)
    with Store(StoreConfig(root=root.as_uri()), engine=engine) as store:
        shape = READ_SHAPE.scaled(0.125)
        ((micro_batch,),) = by_handle_micro_batches(store, shape)
        reader = PayloadReader(store)
        segment = micro_batch.segments[0]
        engine.take_passes()
        got = reader.read_field([segment], segment.field, segment.pos, segment.end)
        assert got is not None
        assert got.shape[0] == segment.rows
        assert engine.take_passes() == [1]


def test_report_table_and_results(tmp_path: Path) -> None:
    report = Report("demo", "a title", [Figure("speed", "2 x", ">= 1", True)], data={"x": 1.5})
    table = format_report(report)
    assert "== demo: a title" in table
    assert "goal >= 1: met" in table
    paths = write_results([report], tmp_path)
    assert [p.name for p in paths] == ["demo.json", "results.json"]  # no pairs: no plot
    assert json.loads(paths[0].read_text())["data"] == {"x": 1.5}
