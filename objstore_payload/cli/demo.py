"""``objstore-payload demo``: write synthetic requests, read them back by CP windows,
check bitwise parity with the inline codec, print what it cost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from objstore_payload import codec
from objstore_payload.reader import FieldWindow, PayloadReader
from objstore_payload.segment import Segment, segments_to_builtins
from objstore_payload.store.config import S3Options, StoreConfig
from objstore_payload.store.store import Store
from objstore_payload.writer import PayloadWriter, RequestArrays, WrittenBlob

__all__ = ["DemoResult", "SyntheticRequest", "make_requests", "run_demo"]

LAYERS, TOP_K, EXPERTS, VOCAB = 48, 8, 128, 151_936
"""Qwen3-30B-A3B-like routing: 48 MoE layers, top-8 of 128 experts."""


@dataclass(frozen=True)
class SyntheticRequest:
    """One request's arrays as a vLLM server would hand them over."""

    prompt_len: int
    completion_len: int
    tokens: np.ndarray
    routing: np.ndarray
    mask_counts: np.ndarray
    mask_ids: np.ndarray
    mask_logprobs: np.ndarray

    def token_ids(self) -> np.ndarray:
        """Prompt and completion token ids."""
        return self.tokens

    def arrays(self) -> RequestArrays:
        """The writer's view of this request."""
        return RequestArrays(
            prompt_len=self.prompt_len,
            completion_len=self.completion_len,
            routed_experts=self.routing,
            sampling_mask=(self.mask_counts, self.mask_ids),
            sampling_mask_logprobs=self.mask_logprobs,
            num_experts=EXPERTS,
        )


def make_requests(count: int, seed: int, completion_len: int = 256) -> list[SyntheticRequest]:
    """``count`` requests of 500-8000 prompt tokens, 48 x 8 uint8 routing over every
    forwarded token, and masks of 1-64 ids per completion token."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        prompt_len = int(rng.integers(500, 8001))
        rows = prompt_len + completion_len - 1
        counts = rng.integers(1, 65, size=completion_len, dtype=np.int32)
        ids = rng.integers(0, VOCAB, size=int(counts.sum()), dtype=np.int32)
        out.append(
            SyntheticRequest(
                prompt_len=prompt_len,
                completion_len=completion_len,
                tokens=rng.integers(0, VOCAB, prompt_len + completion_len, dtype=np.int32),
                routing=rng.integers(0, EXPERTS, size=(rows, LAYERS, TOP_K), dtype=np.uint8),
                mask_counts=counts,
                mask_ids=ids,
                mask_logprobs=-rng.exponential(2.0, size=ids.size).astype(np.float32),
            )
        )
    return out


@dataclass
class DemoResult:
    """What the demo measured."""

    requests: int = 0
    tokens: int = 0
    completion_tokens: int = 0
    bytes_by_field: dict[str, int] = field(default_factory=dict)
    blob_bytes: int = 0
    inline_bytes: int = 0
    segment_bytes: int = 0
    windows: int = 0
    windows_equal: int = 0
    get_requests: int = 0
    write_seconds: float = 0.0
    read_seconds: float = 0.0
    synthetic: list[SyntheticRequest] = field(default_factory=list)
    segments: list[list[Segment]] = field(default_factory=list)

    @property
    def parity_ok(self) -> bool:
        """True when every window read equals the inline reference bit for bit."""
        return self.windows > 0 and self.windows == self.windows_equal


def _inline_response(request: SyntheticRequest) -> bytes:
    """The inline packed JSON a server would send for this request."""
    body = {
        "routed_experts": codec.to_builtins(codec.encode_routing(request.routing, start=0)),
        "sampling_mask": codec.to_builtins(
            codec.encode_mask(request.mask_counts, request.mask_ids)
        ),
        "sampling_mask_logprobs": codec.to_builtins(codec.encode_array(request.mask_logprobs)),
    }
    return msgspec.json.encode(body)


def _expected_windows(
    inline_json: bytes, prompt_len: int, length: int, cp: int
) -> list[list[np.ndarray]]:
    """The reference: decode the inline response, lay it on positions, cut CP windows."""
    body = msgspec.json.decode(inline_json)
    routing, start = codec.decode_routing(body["routed_experts"])
    counts, ids = codec.decode_mask(body["sampling_mask"])
    logprobs = codec.decode_array(body["sampling_mask_logprobs"], dtypes={"float32"}, ndim=1)
    width = max(int(counts.max(initial=0)), 1)
    full_routing = np.zeros((length + 1, *routing.shape[1:]), dtype=routing.dtype)
    full_routing[start : start + routing.shape[0]] = routing
    full_mask = np.full((length + 1, width), -1, dtype=np.int32)
    full_logprobs = np.full((length + 1, width), -np.inf, dtype=np.float32)
    row_of = np.repeat(np.arange(counts.size) + prompt_len, counts)
    col_of = np.arange(ids.size) - np.repeat(np.cumsum(counts) - counts, counts)
    full_mask[row_of, col_of] = ids
    full_logprobs[row_of, col_of] = logprobs
    chunk = length // cp
    return [
        [
            full_routing[r * chunk : (r + 1) * chunk],
            full_mask[r * chunk + 1 : (r + 1) * chunk + 1],
            full_logprobs[:length],
        ]
        for r in range(cp)
    ]


def run_demo(
    store: Store, *, requests: int = 16, seed: int = 0, cp: int = 4, destination_version: int = 0
) -> DemoResult:
    """Write ``requests`` synthetic requests to ``store``, read every CP window back and
    compare it with the inline codec's arrays."""
    result = DemoResult(requests=requests)
    synthetic = make_requests(requests, seed)
    writer = PayloadWriter(store)
    destination = store.version_prefix(destination_version)

    async def write_all() -> list[WrittenBlob | None]:
        return await asyncio.gather(
            *(writer.awrite_blob(destination, r.arrays()) for r in synthetic)
        )

    started = time.perf_counter()
    written = asyncio.run(write_all())
    result.write_seconds = time.perf_counter() - started
    result.blob_bytes = store.stats.bytes_written

    reader = PayloadReader(store)
    store.stats.reset()
    started = time.perf_counter()
    for request, blob in zip(synthetic, written, strict=True):
        assert blob is not None
        segments = blob.segments
        result.synthetic.append(request)
        result.segments.append(segments)
        length = request.prompt_len + request.completion_len
        padded = -(-length // cp) * cp
        result.tokens += length
        result.completion_tokens += request.completion_len
        for name, nbytes in blob.region_bytes().items():
            result.bytes_by_field[name] = result.bytes_by_field.get(name, 0) + nbytes
        inline = _inline_response(request)
        result.inline_bytes += len(inline)
        result.segment_bytes += len(msgspec.json.encode(segments_to_builtins(segments)))
        expected = _expected_windows(inline, request.prompt_len, padded, cp)
        chunk = padded // cp
        for rank in range(cp):
            lo, hi = rank * chunk, (rank + 1) * chunk
            got = reader.read_window(
                segments,
                [
                    FieldWindow("routed_experts", lo, hi),
                    FieldWindow("sampling_mask", lo + 1, hi + 1),
                    FieldWindow("sampling_mask_logprobs", 0, padded),
                ],
            )
            result.windows += 1
            if all(
                g is not None
                and g.dtype == e.dtype
                and g.shape == e.shape
                and g.tobytes() == e.tobytes()
                for g, e in zip(got, expected[rank], strict=True)
            ):
                result.windows_equal += 1
    result.read_seconds = time.perf_counter() - started
    result.get_requests = store.stats.get_requests
    return result


def format_table(result: DemoResult, store_label: str) -> str:
    """The demo's summary as a plain-text table."""
    lines = [
        f"objstore-payload demo: {result.requests} requests, {result.tokens:,} tokens "
        f"({result.completion_tokens:,} completion) -> {store_label}",
        "",
        f"{'field':<26}{'bytes written':>15}{'bytes/token':>13}  per",
    ]
    per = {
        "routed_experts": ("token", result.tokens),
        "routed_expert_weights": ("token", result.tokens),
        "sampling_mask": ("completion token", result.completion_tokens),
        "sampling_mask_logprobs": ("completion token", result.completion_tokens),
    }
    for name, nbytes in result.bytes_by_field.items():
        unit, count = per.get(name, ("token", result.tokens))
        lines.append(f"{name:<26}{nbytes:>15,}{nbytes / max(count, 1):>13.1f}  {unit}")
    fields_total = sum(result.bytes_by_field.values())
    lines.append(f"{'trailers':<26}{result.blob_bytes - fields_total:>15,}")
    lines.append(f"{'total (blobs)':<26}{result.blob_bytes:>15,}")
    lines += [
        "",
        f"response bytes: inline {result.inline_bytes:,}  by segment {result.segment_bytes:,}  "
        f"({result.inline_bytes / max(result.segment_bytes, 1):,.0f}x smaller)",
        f"reads: {result.windows} CP windows, {result.get_requests} GETs "
        f"({result.get_requests / max(result.windows, 1):.1f} per window; "
        f"{result.get_requests / max(result.requests, 1):.1f} per blob)",
        f"time: write {result.write_seconds:.2f} s, read {result.read_seconds:.2f} s",
        f"parity with inline codec: {'OK' if result.parity_ok else 'MISMATCH'} "
        f"({result.windows_equal}/{result.windows} windows bitwise equal)",
    ]
    return "\n".join(lines)


def _have_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def main(
    store_url: str | None,
    *,
    requests: int,
    seed: int,
    cp: int,
    s3: S3Options | None,
    engine: str,
    through_plugin: bool = False,
    echo: Callable[[str], None] = print,
) -> int:
    """Run the demo against ``store_url`` (or an embedded S3 server); 0 on parity."""
    embedded = None
    if store_url is None:
        from objstore_payload.testing.embedded_s3 import EmbeddedS3

        embedded = EmbeddedS3(bucket="payloads").start()
        store_url = "s3://payloads/demo"
        s3 = embedded.s3_options()
    try:
        overrides: dict[str, Any] = {"root": store_url, "engine": engine}
        if s3 is not None:
            overrides["s3"] = s3
        config = StoreConfig.from_env({}, **overrides)
        label = store_url + (f" (embedded S3 at {embedded.endpoint_url})" if embedded else "")
        with Store(config) as store:
            result = run_demo(store, requests=requests, seed=seed, cp=cp)
            echo(format_table(result, label))
            ok = result.parity_ok
            if _have_torch():
                from objstore_payload.cli.demo_trainer import format_trainer, run_trainer_path

                trainer = run_trainer_path(store, result.synthetic, result.segments, cp_size=cp)
                echo("")
                echo(format_trainer(trainer))
                ok = ok and trainer.parity_ok
            else:
                echo("\ntrainer path: skipped (install the torch extra to run it)")
            if through_plugin:
                from objstore_payload.cli.demo_plugin import format_plugin, run_through_plugin

                plugin = run_through_plugin(store, result.synthetic)
                echo("")
                echo(format_plugin(plugin))
                ok = ok and plugin.parity_ok
        return 0 if ok else 1
    finally:
        if embedded is not None:
            embedded.stop()
