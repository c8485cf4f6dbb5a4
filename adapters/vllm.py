"""Server side for vLLM (>= 0.27): an endpoint plugin for ``POST /inference/v1/generate``,
and the same write for offline ``LLM.generate`` outputs.

A request whose ``sampling_params.extra_args`` names a destination (``payload_dir`` or
``payload_destination``: a URI prefix under the configured root, e.g.
``s3://bucket/run/payloads/v7``) gets each choice's routing, sampling mask and mask
logprobs written as one blob, off the event loop and durable before the response; the
choice then carries ``segments`` and no inline arrays. Any other request gets the inline
packed form. Either way ``completion_logprobs`` is one packed float32 array, and no
per-token Python object is built for the response (flat logprobs, no detokenization where
the request allows it).

Enable with ``VLLM_PLUGINS=objstore_payload``; configure with ``OBJSTORE_PAYLOAD_*``
variables or ``OBJSTORE_PAYLOAD_CONFIG=<file.toml>`` (see `ServerSettings`).
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import tomllib
import uuid
from argparse import Namespace
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import numpy as np
from fastapi import Request  # resolved at runtime by FastAPI for the route signature

from objstore_payload import codec
from objstore_payload.errors import PayloadError, StoreConfigError, UriNotAllowedError
from objstore_payload.segment import Segment, segments_to_builtins
from objstore_payload.store.config import ENV_PREFIX, StoreConfig
from objstore_payload.store.root import StoreRoot
from objstore_payload.store.store import Store
from objstore_payload.writer import PayloadWriter, RequestArrays, routing_start

__all__ = [
    "PayloadEndpointPlugin",
    "ServerSettings",
    "UnsupportedVllmError",
    "choice_arrays",
    "plugin",
    "write_request_outputs",
]

log = logging.getLogger(__name__)

DESTINATION_KEYS: Final = ("payload_destination", "payload_dir")
"""``extra_args`` keys that name a destination (``payload_dir`` is the seed's name)."""
LOGPROB_FLOOR: Final = -9999.0
"""Sampled logprobs are clamped here, as vLLM clamps them for JSON."""
GC_THRESHOLD: Final = (50_000, 20, 100)


class UnsupportedVllmError(PayloadError, TypeError):
    """A vLLM output whose arrays come in a form this adapter does not know."""


# -- reading vLLM outputs, whatever the version ------------------------------------------
def _routing(value: object) -> np.ndarray | None:
    if value is None:
        return None
    if not isinstance(value, np.ndarray):
        raise UnsupportedVllmError(
            f"routed_experts is a {type(value).__name__}; expected a numpy array "
            "(vLLM 0.14-0.20 and >= 0.22); vLLM 0.21's split prompt/completion routing is "
            "not supported"
        )
    if value.dtype.name not in ("int32", "int16", "uint8", "uint16", "int64"):
        raise UnsupportedVllmError(f"routed_experts has dtype {value.dtype}")
    return value


def _mask(value: object) -> tuple[np.ndarray, np.ndarray] | None:
    """A sampling mask as CSR ``(counts, ids)``: vLLM's ``SamplingMask(token_ids=[[...]])``,
    a packed ``(ids, counts)`` object, or a plain list of lists."""
    if value is None:
        return None
    ids = getattr(value, "ids", None)
    counts = getattr(value, "counts", None)
    if ids is not None and counts is not None:
        return np.asarray(counts, np.int32), np.asarray(ids, np.int32)
    rows = getattr(value, "token_ids", value)
    if not isinstance(rows, list):
        raise UnsupportedVllmError(f"sampling_mask of type {type(value).__name__} is not supported")
    counts_array = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))
    ids_array = np.fromiter(
        itertools.chain.from_iterable(rows), dtype=np.int32, count=int(counts_array.sum())
    )
    return counts_array, ids_array


def _sampled_logprobs(value: object, count: int) -> np.ndarray | None:
    """The sampled token's logprob per position (vLLM lists it first), clamped."""
    if value is None:
        return None
    starts = getattr(value, "start_indices", None)
    if starts is not None:  # FlatLogprobs: a few flat lists per request
        flat = np.asarray(value.logprobs, np.float64)  # type: ignore[attr-defined]
        begin = np.asarray(starts, np.int64)
        end = np.asarray(value.end_indices, np.int64)  # type: ignore[attr-defined]
        out = np.full(begin.size, LOGPROB_FLOOR)
        present = end > begin
        out[present] = flat[begin[present]]
    elif isinstance(value, list):  # list[dict[token_id, Logprob]]
        out = np.array(
            [next(iter(d.values())).logprob if d else LOGPROB_FLOOR for d in value], np.float64
        )
    else:
        raise UnsupportedVllmError(f"logprobs of type {type(value).__name__} are not supported")
    if out.size != count:
        raise UnsupportedVllmError(f"{out.size} logprobs for {count} completion tokens")
    clamped: np.ndarray = np.maximum(np.nan_to_num(out, nan=LOGPROB_FLOOR), LOGPROB_FLOOR)
    return clamped.astype(np.float32)


def choice_arrays(
    completion: Any, prompt_len: int, *, num_experts: int | None = None
) -> tuple[RequestArrays, np.ndarray | None]:
    """The writer's arrays of one ``CompletionOutput``, and its sampled logprobs."""
    token_ids = completion.token_ids
    completion_len = len(token_ids)
    mask = _mask(getattr(completion, "sampling_mask", None))
    # Score centering stacks add the sampler's logprob of every kept id, parallel to
    # the mask's ids; stock vLLM has no such attribute.
    mask_logprobs = getattr(completion, "sampling_mask_logprobs", None)
    if mask_logprobs is not None:
        mask_logprobs = np.asarray(
            getattr(mask_logprobs, "values", mask_logprobs), dtype=np.float32
        ).reshape(-1)
    arrays = RequestArrays(
        prompt_len=prompt_len,
        completion_len=completion_len,
        routed_experts=_routing(getattr(completion, "routed_experts", None)),
        sampling_mask=mask,
        sampling_mask_logprobs=mask_logprobs,
        num_experts=num_experts,
    )
    return arrays, _sampled_logprobs(getattr(completion, "logprobs", None), completion_len)


def _inline_fields(arrays: RequestArrays) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if arrays.routed_experts is not None:
        from objstore_payload.writer import compact_routing

        rows = compact_routing(arrays.routed_experts, arrays.num_experts)
        start = routing_start(arrays.prompt_len, arrays.completion_len, rows.shape[0])
        out["routed_experts"] = codec.to_builtins(codec.encode_routing(rows, start))
    if arrays.sampling_mask is not None:
        out["sampling_mask"] = codec.to_builtins(codec.encode_mask(*arrays.sampling_mask))
    if arrays.sampling_mask_logprobs is not None:
        out["sampling_mask_logprobs"] = codec.to_builtins(
            codec.encode_array(arrays.sampling_mask_logprobs)
        )
    return out


# -- settings -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSettings:
    """Server-side options.

    - ``store``: the storage root and options (``OBJSTORE_PAYLOAD_ROOT`` and the other
      ``OBJSTORE_PAYLOAD_*`` store variables); without it, every request stays inline and
      a request naming a destination is refused.
    - ``allowed_prefixes``: destinations must also lie under one of these URIs
      (``OBJSTORE_PAYLOAD_SERVER_ALLOWED_PREFIXES``, comma-separated); empty: the whole root.
    - ``gc_tuning``: after start-up, ``gc.collect(); gc.freeze()`` and thresholds
      ``(50000, 20, 100)`` (``OBJSTORE_PAYLOAD_SERVER_GC_TUNING=1``). Off by default: it
      trades memory for shorter and rarer gen-2 pauses, which only pays off under heavy RL
      load with many requests in flight.
    - ``num_experts``: fixes the routing dtype (``OBJSTORE_PAYLOAD_SERVER_NUM_EXPERTS``).

    ``OBJSTORE_PAYLOAD_CONFIG`` names a TOML file with a ``[store]`` table (a `StoreConfig`)
    and a ``[server]`` table with the keys above; variables override the file.
    """

    store: StoreConfig | None = None
    allowed_prefixes: tuple[str, ...] = ()
    gc_tuning: bool = False
    num_experts: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSettings:
        """Settings from ``OBJSTORE_PAYLOAD_CONFIG`` and ``OBJSTORE_PAYLOAD_*`` variables."""
        env = os.environ if environ is None else environ
        store_data: dict[str, Any] = {}
        server: dict[str, Any] = {}
        path = env.get(ENV_PREFIX + "CONFIG")
        if path:
            try:
                with open(path, "rb") as file:
                    data = tomllib.load(file)
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise StoreConfigError(f"cannot read server config {path}: {exc}") from exc
            store_data = dict(data.get("store", {}))
            server = dict(data.get("server", {}))
        store = None
        if store_data or env.get(ENV_PREFIX + "ROOT"):
            store = StoreConfig.from_env(env, base=store_data)
        for key in ("allowed_prefixes", "gc_tuning", "num_experts"):
            value = env.get(f"{ENV_PREFIX}SERVER_{key.upper()}")
            if value is not None:
                server[key] = value
        prefixes = server.get("allowed_prefixes", ())
        if isinstance(prefixes, str):
            prefixes = tuple(p.strip() for p in prefixes.split(",") if p.strip())
        gc_tuning = server.get("gc_tuning", False)
        if isinstance(gc_tuning, str):
            gc_tuning = gc_tuning.strip().lower() in ("1", "true", "yes", "on")
        num_experts = server.get("num_experts")
        return cls(
            store=store,
            allowed_prefixes=tuple(prefixes),
            gc_tuning=bool(gc_tuning),
            num_experts=int(num_experts) if num_experts is not None else None,
        )


# -- the plugin ---------------------------------------------------------------------------
class _ServerState:
    def __init__(self, settings: ServerSettings, engine_client: Any) -> None:
        self.settings = settings
        self.engine_client = engine_client
        self.store = Store(settings.store) if settings.store is not None else None
        self.writer = PayloadWriter(self.store) if self.store is not None else None
        self.prefixes = [StoreRoot.parse(p) for p in settings.allowed_prefixes]
        if self.store is not None:
            for prefix in self.prefixes:
                self.store.root.relative_prefix(prefix.url)  # must lie under the root

    def check_destination(self, destination: object) -> str:
        """The destination if it may be written to; `UriNotAllowedError` says why not."""
        if self.store is None:
            raise UriNotAllowedError("this server has no storage root configured")
        if not isinstance(destination, str):
            raise UriNotAllowedError("the destination must be a URI string")
        self.store.root.relative_prefix(destination)
        if self.prefixes and not any(
            destination.rstrip("/") == p.url or destination.startswith(p.url + "/")
            for p in self.prefixes
        ):
            raise UriNotAllowedError(
                f"{destination!r} is not under an allowed prefix "
                f"({', '.join(p.url for p in self.prefixes)})"
            )
        return destination


def _error(status: int, message: str, kind: str) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "code": status}}
    )


async def _generate(raw_request: Any) -> Any:
    from fastapi.responses import Response
    from pydantic import ValidationError

    state: _ServerState | None = getattr(raw_request.app.state, "objstore_payload", None)
    if state is None or state.engine_client is None:
        return _error(503, "the payload plugin has no engine", "unavailable")
    try:
        body = await raw_request.json()
    except ValueError:
        return _error(400, "the request body is not JSON", "invalid_request")
    try:
        request = _generate_request_type().model_validate(body)
    except ValidationError as exc:
        return _error(400, f"invalid generate request: {exc}", "invalid_request")
    if request.stream:
        return _error(400, "streaming is not supported on this route", "invalid_request")
    params = request.sampling_params
    extra = params.extra_args or {}
    destination = next((extra[k] for k in DESTINATION_KEYS if extra.get(k) is not None), None)
    if destination is not None:
        try:
            destination = state.check_destination(destination)
        except UriNotAllowedError as exc:
            return _error(400, f"payload destination refused: {exc}", "invalid_request")
    # No per-token Python objects: flat logprobs unless prompt logprobs are asked for,
    # and no detokenization unless stop strings need it.
    if params.prompt_logprobs is None:
        params.flat_logprobs = True
    if not params.stop:
        params.detokenize = False

    request_id = request.request_id or uuid.uuid4().hex
    final = None
    async for output in state.engine_client.generate(
        {"prompt_token_ids": request.token_ids}, params, request_id
    ):
        final = output
    if final is None:
        return _error(500, "the engine returned no output", "internal_error")

    prompt_len = len(request.token_ids)
    # Every choice's arrays are read and checked before any blob is written, so a bad
    # choice cannot leave the blobs of the good ones behind.
    extracted = []
    for completion in final.outputs:
        try:
            arrays, logprobs = choice_arrays(
                completion, prompt_len, num_experts=state.settings.num_experts
            )
            arrays.regions()
        except (PayloadError, ValueError) as exc:
            return _error(500, f"cannot read the engine's arrays: {exc}", "internal_error")
        extracted.append((completion, arrays, logprobs))
    choices = []
    written: list[str] = []
    for completion, arrays, logprobs in extracted:
        choice: dict[str, Any] = {
            "index": completion.index,
            "token_ids": list(completion.token_ids),
            "finish_reason": completion.finish_reason,
            "stop_reason": completion.stop_reason,
        }
        if logprobs is not None:
            choice["completion_logprobs"] = codec.to_builtins(codec.encode_logprobs(logprobs))
        if destination is not None and state.writer is not None:
            try:
                blob = await state.writer.awrite_blob(destination, arrays)
            except PayloadError as exc:
                log.error("payload write to %s failed: %s", destination, exc)
                await _forget(state, written)
                return _error(500, f"payload write failed: {exc}", "payload_write_failed")
            if blob is not None:
                written.append(blob.uri)
            choice["segments"] = segments_to_builtins(blob.segments if blob is not None else [])
        else:
            try:
                choice.update(_inline_fields(arrays))
            except PayloadError as exc:
                return _error(500, f"cannot pack the engine's arrays: {exc}", "internal_error")
        choices.append(choice)
    response = {
        "request_id": request_id,
        "model": request.model,
        "output_mode": "tokens",
        "prompt_token_ids": None,
        "choices": choices,
    }
    return Response(content=msgspec.json.encode(response), media_type="application/json")


async def _forget(state: _ServerState, uris: list[str]) -> None:
    """Best-effort removal of blobs a failed response will never point at."""
    if uris and state.store is not None:
        import asyncio

        try:
            await asyncio.to_thread(state.store.delete, uris)
        except PayloadError as exc:  # the backstop collects them later
            log.warning("could not remove %d orphaned payload blobs: %s", len(uris), exc)


def _generate_request_type() -> Any:
    try:
        from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest
    except ImportError as exc:
        raise UnsupportedVllmError(
            "this vLLM has no token-in/token-out GenerateRequest (needs vLLM >= 0.25)"
        ) from exc
    return GenerateRequest


class PayloadEndpointPlugin:
    """The ``vllm.endpoint_plugins`` entry: replaces ``POST /inference/v1/generate``."""

    name = "objstore_payload"
    required_tasks: tuple[str, ...] | None = ("generate",)

    def __init__(self, settings: ServerSettings | None = None) -> None:
        self._settings = settings

    def attach_router(self, app: Any) -> None:
        """Register the route (it replaces vLLM's own)."""
        from fastapi import APIRouter

        router = APIRouter()

        @router.post("/inference/v1/generate")
        async def generate(raw_request: Request) -> Any:
            return await _generate(raw_request)

        app.include_router(router)

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        """Open the store and, when configured, tune the API server's GC."""
        settings = self._settings if self._settings is not None else ServerSettings.from_env()
        state.objstore_payload = _ServerState(settings, engine_client)
        if settings.gc_tuning:
            # Start-up objects leave the collector's generations, and gen-2 passes
            # become rare: under RL load they walked tens of millions of objects.
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLD)


def plugin() -> PayloadEndpointPlugin:
    """Entry point factory (group ``vllm.endpoint_plugins``)."""
    return PayloadEndpointPlugin()


# -- offline ------------------------------------------------------------------------------
def write_request_outputs(
    outputs: Sequence[Any],
    writer: PayloadWriter,
    destination: str,
    *,
    num_experts: int | None = None,
) -> list[list[list[Segment]]]:
    """For ``LLM.generate`` results: one blob per choice; segments per request and choice."""
    result = []
    for output in outputs:
        prompt_len = len(output.prompt_token_ids or ())
        per_choice = []
        for completion in output.outputs:
            arrays, _ = choice_arrays(completion, prompt_len, num_experts=num_experts)
            per_choice.append(writer.write(destination, arrays))
        result.append(per_choice)
    return result
