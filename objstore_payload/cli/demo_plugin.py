"""``objstore-payload demo --through-plugin``: the writer behind vLLM's HTTP route.

The demo's requests go to ``POST /inference/v1/generate`` of the endpoint plugin (real vLLM
classes, served by uvicorn on 127.0.0.1; a stand-in engine yields the requests' arrays,
since no engine runs without an accelerator), once inline and once with a destination.
The responses are decoded with the client adapter, the blobs read back, and both compared
with the arrays the engine produced.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from objstore_payload.adapters.client import decode_generate_response
from objstore_payload.adapters.vllm import ServerSettings
from objstore_payload.cli.demo import EXPERTS, SyntheticRequest
from objstore_payload.reader import FieldWindow, PayloadReader
from objstore_payload.store.store import Store
from objstore_payload.testing.vllm_server import PluginServer, StandInEngine

__all__ = [
    "Exchange",
    "PluginResult",
    "exchange",
    "format_plugin",
    "run_through_plugin",
    "stand_in_server",
]


@dataclass
class PluginResult:
    """What the plugin half measured."""

    requests: int = 0
    inline_bytes: int = 0
    handle_bytes: int = 0
    equal: int = 0

    @property
    def parity_ok(self) -> bool:
        """Every request's blob and inline arrays equal what the engine produced."""
        return self.requests > 0 and self.equal == self.requests


def _completion_output(request: SyntheticRequest) -> Any:
    from vllm.logprobs import FlatLogprobs, Logprob
    from vllm.outputs import CompletionOutput, SamplingMask

    completion = request.tokens[request.prompt_len :].tolist()
    logprobs = FlatLogprobs()
    for token in completion:
        logprobs.append({token: Logprob(logprob=-0.25, rank=1)})
    starts = np.concatenate([[0], np.cumsum(request.mask_counts)])
    rows = [request.mask_ids[a:b].tolist() for a, b in itertools.pairwise(starts)]
    return CompletionOutput(
        index=0,
        text="",
        token_ids=completion,
        cumulative_logprob=None,
        logprobs=logprobs,
        routed_experts=request.routing,
        sampling_mask=SamplingMask(token_ids=rows),  # one list per token, as vLLM gives
        finish_reason="length",
    )


def _matches(request: SyntheticRequest, turn: Any, reader: PayloadReader) -> bool:
    n = request.prompt_len + request.completion_len
    if turn.segments:
        routing, mask = reader.read_window(
            turn.segments,
            [
                FieldWindow("routed_experts", 0, n - 1),
                FieldWindow("sampling_mask", request.prompt_len, n),
            ],
        )
        if routing is None or mask is None or not np.array_equal(routing, request.routing):
            return False
        counts = (mask >= 0).sum(axis=1)
        return bool(
            np.array_equal(counts, request.mask_counts)
            and np.array_equal(mask[mask >= 0], request.mask_ids)
        )
    return (
        turn.routed_experts is not None
        and np.array_equal(turn.routed_experts, request.routing)
        and turn.sampling_mask is not None
        and np.array_equal(turn.sampling_mask[0], request.mask_counts)
        and np.array_equal(turn.sampling_mask[1], request.mask_ids)
    )


def stand_in_server(store: Store, requests: Sequence[SyntheticRequest]) -> PluginServer:
    """The plugin served on 127.0.0.1, writing to ``store``, with a stand-in engine that
    answers each request's prompt with its arrays."""
    by_prompt = {tuple(r.tokens[: r.prompt_len].tolist()): r for r in requests}
    engine = StandInEngine(lambda prompt, _params: _completion_output(by_prompt[tuple(prompt)]))
    return PluginServer(engine, ServerSettings(store=store.config, num_experts=EXPERTS))


@dataclass
class Exchange:
    """One request sent inline and with a destination: both answers and their times."""

    inline: Any
    handle: Any
    inline_s: float
    handle_s: float


def exchange(server: PluginServer, store: Store, request: SyntheticRequest) -> Exchange:
    """Send ``request`` inline, then with ``<root>/v1`` as its destination."""
    body: dict[str, Any] = {
        "token_ids": request.tokens[: request.prompt_len].tolist(),
        "sampling_params": {"max_tokens": request.completion_len, "logprobs": 1},
    }
    started = time.perf_counter()
    inline = server.generate(body)
    inline_s = time.perf_counter() - started
    body["sampling_params"]["extra_args"] = {"payload_dir": store.version_prefix(1)}
    started = time.perf_counter()
    handle = server.generate(body)
    handle_s = time.perf_counter() - started
    if inline.status_code != 200 or handle.status_code != 200:
        raise RuntimeError(f"plugin answered {inline.status_code}/{handle.status_code}")
    return Exchange(inline, handle, inline_s, handle_s)


def run_through_plugin(store: Store, requests: Sequence[SyntheticRequest]) -> PluginResult:
    """Send every request inline and by handle through the plugin; compare."""
    result = PluginResult()
    reader = PayloadReader(store)
    with stand_in_server(store, requests) as server:
        for request in requests:
            answers = exchange(server, store, request)
            prompt = request.tokens[: request.prompt_len]
            result.requests += 1
            result.inline_bytes += len(answers.inline.content)
            result.handle_bytes += len(answers.handle.content)
            (inline_turn,) = decode_generate_response(answers.inline.content, prompt)
            (handle_turn,) = decode_generate_response(
                answers.handle.content, prompt, allowed_roots=[store.root.url]
            )
            if _matches(request, inline_turn, reader) and _matches(request, handle_turn, reader):
                result.equal += 1
    return result


def format_plugin(result: PluginResult) -> str:
    """The plugin half's summary lines."""
    ratio = result.inline_bytes / max(result.handle_bytes, 1)
    return "\n".join(
        [
            f"through the vLLM plugin ({result.requests} requests, real vLLM classes, "
            "stand-in engine):",
            f"  response bytes: inline {result.inline_bytes:,}  by handle "
            f"{result.handle_bytes:,}  ({ratio:,.0f}x smaller)",
            f"  decoded responses and blobs equal the engine's arrays: "
            f"{'OK' if result.parity_ok else 'MISMATCH'} ({result.equal}/{result.requests})",
        ]
    )
