"""``bench response``: what the vLLM endpoint plugin sends back, inline and by handle.

16 requests of 500-8000 prompt tokens and 256 new tokens, routing 48 x 8 (uint8 over every
forwarded token), sampling masks at ~1.7 and at ~3.7 ids per completion token (1 + a
Poisson draw: a mask always keeps the sampled token), go through the plugin's
``POST /inference/v1/generate`` (real vLLM classes served by uvicorn on 127.0.0.1, a
stand-in engine that yields the arrays; no engine runs without an accelerator), once
inline and once with a destination. Reported: response bytes both ways, the CSR mask's
bytes per completion token (from the blobs' trailers), the writer's latency per request
(encode + durable write, timed around `PayloadWriter.write` of the same arrays) and the
plugin's end-to-end latency both ways.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from objstore_payload.bench.context import BenchContext
from objstore_payload.bench.report import Pair, Report
from objstore_payload.cli.demo import EXPERTS, LAYERS, TOP_K, VOCAB, SyntheticRequest
from objstore_payload.store.config import StoreConfig
from objstore_payload.store.store import Store
from objstore_payload.verify import read_blob_info
from objstore_payload.writer import PayloadWriter

__all__ = ["make_requests", "run"]

REQUESTS, NEW_TOKENS = 16, 256
DENSITIES = (1.7, 3.7)
"""Mean mask ids per completion token (seed 000 measured ~11 B and 18.8 B per token)."""


def make_requests(
    count: int, mean_ids: float, seed: int, new_tokens: int = NEW_TOKENS
) -> list[SyntheticRequest]:
    """``count`` requests with masks of ``mean_ids`` ids per completion token on average."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        prompt_len = int(rng.integers(500, 8001))
        rows = prompt_len + new_tokens - 1
        counts = (1 + rng.poisson(mean_ids - 1, new_tokens)).astype(np.int32)
        ids = rng.integers(0, VOCAB, int(counts.sum()), dtype=np.int32)
        out.append(
            SyntheticRequest(
                prompt_len=prompt_len,
                completion_len=new_tokens,
                tokens=rng.integers(0, VOCAB, prompt_len + new_tokens, dtype=np.int32),
                routing=rng.integers(0, EXPERTS, (rows, LAYERS, TOP_K), dtype=np.uint8),
                mask_counts=counts,
                mask_ids=ids,
                mask_logprobs=np.zeros(ids.size, np.float32),
            )
        )
    return out


def _through_plugin(store: Store, requests: list[SyntheticRequest]) -> dict[str, Any]:
    from objstore_payload.adapters.client import decode_generate_response
    from objstore_payload.cli.demo_plugin import exchange, stand_in_server

    figures: dict[str, Any] = {
        "inline_bytes": 0,
        "handle_bytes": 0,
        "inline_latency_s": [],
        "handle_latency_s": [],
        "mask_bytes": 0,
        "completion_tokens": 0,
    }
    with stand_in_server(store, requests) as server:
        for request in requests:
            answers = exchange(server, store, request)
            figures["inline_latency_s"].append(answers.inline_s)
            figures["handle_latency_s"].append(answers.handle_s)
            figures["inline_bytes"] += len(answers.inline.content)
            figures["handle_bytes"] += len(answers.handle.content)
            (turn,) = decode_generate_response(
                answers.handle.content,
                request.tokens[: request.prompt_len],
                allowed_roots=[store.root.url],
            )
            uri = next(s.uri for s in turn.segments if s.field == "sampling_mask")
            regions = read_blob_info(store, uri).trailer.regions
            figures["mask_bytes"] += sum(r.nbytes for r in regions if r.field == "sampling_mask")
            figures["completion_tokens"] += request.completion_len
    return figures


def _write_latency(store: Store, requests: list[SyntheticRequest]) -> list[float]:
    writer = PayloadWriter(store)
    out = []
    for request in requests:
        arrays = request.arrays()
        started = time.perf_counter()
        writer.write(store.version_prefix(2), arrays)
        out.append(time.perf_counter() - started)
    return out


def run(ctx: BenchContext) -> Report:
    """The response scenario (a temporary file store unless ``ctx.store`` is given)."""
    count = max(2, round(REQUESTS * ctx.scale))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="objstore-payload-bench-") as scratch:
        root = ctx.store or Path(scratch, "store").as_uri()
        config = StoreConfig.from_env(root=root, engine=ctx.engine, s3=ctx.s3)
        with Store(config) as store:
            for density in DENSITIES:
                requests = make_requests(count, density, seed=int(density * 10))
                with ctx.progress(f"response: {density} ids per token", 1):
                    figures = _through_plugin(store, requests)
                figures["write_s"] = _write_latency(store, requests)
                figures["mean_ids"] = float(np.mean([r.mask_counts.mean() for r in requests]))
                results[str(density)] = figures
            if ctx.store:
                for version in (1, 2):
                    leftovers = store.list(store.version_prefix(version))
                    if leftovers:
                        store.delete(leftovers)
    return _report(count, results, root if ctx.store else "file (temporary)")


def _report(count: int, results: dict[str, Any], where: str) -> Report:
    report = Report(
        "response",
        f"{count} requests of 500-8000 prompt + {NEW_TOKENS} new tokens through the vLLM "
        f"plugin ({where})",
        data={"requests": count, "new_tokens": NEW_TOKENS, "by_density": results},
    )
    first = results[str(DENSITIES[0])]
    ratio = first["inline_bytes"] / max(first["handle_bytes"], 1)
    report.add(
        "response bytes, inline -> by handle",
        f"{first['inline_bytes']:,} -> {first['handle_bytes']:,} ({ratio:,.0f}x)",
        ">= 500x smaller",
        ratio >= 500,
    )
    for density in DENSITIES:
        figures = results[str(density)]
        per_token = figures["mask_bytes"] / max(figures["completion_tokens"], 1)
        report.add(
            f"CSR mask at {figures['mean_ids']:.2f} ids per token",
            f"{per_token:.1f} B per completion token",
        )
    writes = [s for figures in results.values() for s in figures["write_s"]]
    report.add(
        "write per request (encode + durable write)",
        f"{statistics.median(writes) * 1e3:.1f} ms median, {max(writes) * 1e3:.1f} ms max",
    )
    report.add(
        "plugin round trip, inline -> by handle",
        f"{statistics.median(first['inline_latency_s']) * 1e3:.0f} ms -> "
        f"{statistics.median(first['handle_latency_s']) * 1e3:.0f} ms (median)",
    )
    report.pairs = [
        Pair("response bytes", "MB", first["inline_bytes"] / 1e6, first["handle_bytes"] / 1e6),
        Pair(
            "plugin round trip",
            "ms",
            statistics.median(first["inline_latency_s"]) * 1e3,
            statistics.median(first["handle_latency_s"]) * 1e3,
        ),
    ]
    return report
