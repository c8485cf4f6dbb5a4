"""Client side of ``/inference/v1/generate``: a response choice becomes a trace `Turn`.

A choice carries its per-token payload one of three ways, and all are accepted:

- **segments** (``choice["segments"]``, this project's server with a destination): passed
  through after every URI is checked against the caller's allowed roots (no I/O);
- **inline packed** (this project's server without a destination): ``routed_experts`` as
  ``{data, shape, dtype, start}``, ``sampling_mask`` as ``{ids, counts}``,
  ``completion_logprobs`` as ``{data, shape, dtype}``; decoded and validated;
- **vLLM's native forms** (a stock server): ``routed_experts`` as the base64 of an ``.npy``
  file, ``sampling_mask`` as one list of ids per completion token, ``logprobs.content``.

Every malformed field raises the package's typed error naming the field.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from objstore_payload.adapters.traces import Turn
from objstore_payload.codec import (
    ROUTING_DTYPES,
    decode_array,
    decode_logprobs,
    decode_mask,
    decode_routing,
)
from objstore_payload.errors import InlineDecodeError, UriNotAllowedError
from objstore_payload.segment import Segment, segments_from_builtins
from objstore_payload.store.root import StoreRoot

__all__ = ["decode_choice", "decode_generate_response", "decode_npy_routing"]

_RESPONSE_DECODER = msgspec.json.Decoder()


def decode_npy_routing(text: str, *, name: str = "routed_experts") -> np.ndarray:
    """vLLM's native routing: base64 of ``np.save`` output, ``[rows, layers, top_k]``."""
    try:
        raw = base64.b64decode(text, validate=True)
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except (binascii.Error, ValueError, OSError, EOFError) as exc:
        raise InlineDecodeError(f"{name}: not a base64 .npy array: {exc}") from exc
    if not isinstance(array, np.ndarray) or array.ndim != 3:
        raise InlineDecodeError(
            f"{name}: expected [rows, layers, top_k], got {getattr(array, 'shape', None)}"
        )
    if array.dtype.newbyteorder("=").name not in ROUTING_DTYPES:
        raise InlineDecodeError(f"{name}: dtype {array.dtype} is not a routing dtype")
    if array.size and int(array.min()) < 0:
        raise InlineDecodeError(f"{name}: expert ids must be non-negative")
    return array


def _integers(values: object, name: str) -> np.ndarray:
    """A 1-D array of non-negative int32 from JSON numbers; anything else is an error
    (no silent truncation of floats, no booleans, no strings)."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InlineDecodeError(f"{name}: ids must be integers") from exc
    if array.size == 0:
        return np.zeros(0, np.int32)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise InlineDecodeError(f"{name}: ids must be a flat list of integers")
    if int(array.min()) < 0 or int(array.max()) > np.iinfo(np.int32).max:
        raise InlineDecodeError(f"{name}: ids must fit int32 and be non-negative")
    return array.astype(np.int32)


def _token_ids(values: object) -> np.ndarray:
    if not isinstance(values, list):
        raise InlineDecodeError("choice.token_ids: expected a list of token ids")
    return _integers(values, "choice.token_ids")


def _list_mask(rows: object, name: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise InlineDecodeError(f"{name}: expected one list of ids per completion token")
    counts = np.fromiter((len(r) for r in rows), dtype=np.int32, count=len(rows))
    ids = _integers([i for r in rows for i in r], name)
    return counts, ids


def _native_logprobs(logprobs: object, name: str) -> np.ndarray:
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(content, list):
        raise InlineDecodeError(f"{name}: expected logprobs.content, a list of entries")
    try:
        return np.array([float(entry["logprob"]) for entry in content], dtype=np.float32)
    except (TypeError, KeyError, ValueError) as exc:
        raise InlineDecodeError(f"{name}: every entry needs a numeric logprob") from exc


def _check_segments(segments: Sequence[Segment], roots: Sequence[StoreRoot]) -> None:
    for seg in segments:
        for root in roots:
            try:
                root.relative_key(seg.uri)
                break
            except UriNotAllowedError:
                continue
        else:
            raise UriNotAllowedError(
                f"segment URI {seg.uri!r} is not under any allowed root "
                f"({', '.join(r.url for r in roots) or 'none configured'})"
            )


def decode_choice(
    choice: Mapping[str, Any],
    prompt_ids: np.ndarray,
    *,
    allowed_roots: Sequence[str | StoreRoot] = (),
) -> Turn:
    """One ``/inference/v1/generate`` choice as a `Turn` (see module doc)."""
    roots = [r if isinstance(r, StoreRoot) else StoreRoot.parse(r) for r in allowed_roots]
    prompt = np.asarray(prompt_ids, dtype=np.int32)
    completion = _token_ids(choice.get("token_ids"))

    segments: tuple[Segment, ...] = ()
    if choice.get("segments") is not None:
        segments = tuple(segments_from_builtins(choice["segments"]))
        _check_segments(segments, roots)
        n = prompt.size + completion.size
        for seg in segments:
            if seg.end > n:
                raise InlineDecodeError(
                    f"{seg.field} segment covers [{seg.pos}, {seg.end}) past the {n} tokens"
                )

    routing = choice.get("routed_experts")
    rows: np.ndarray | None = None
    if isinstance(routing, str):
        rows = decode_npy_routing(routing)
    elif routing is not None:
        rows, start = decode_routing(routing)
        expected = prompt.size + completion.size - 1 - rows.shape[0]
        if start != expected:
            # Rows are end-anchored; a start that disagrees means the rows are not the
            # ones this response's tokens forwarded.
            raise InlineDecodeError(
                f"routed_experts: start {start} does not match {rows.shape[0]} end-anchored "
                f"rows of a {prompt.size + completion.size}-token sequence (expected {expected})"
            )
    total = prompt.size + completion.size
    if rows is not None and rows.shape[0] > total - 1:
        raise InlineDecodeError(f"routed_experts: {rows.shape[0]} rows do not fit {total} tokens")

    mask = choice.get("sampling_mask")
    counts_ids: tuple[np.ndarray, np.ndarray] | None = None
    if isinstance(mask, list):
        counts_ids = _list_mask(mask, "sampling_mask")
    elif mask is not None:
        counts_ids = decode_mask(mask)
    if counts_ids is not None and counts_ids[0].size != completion.size:
        raise InlineDecodeError(
            f"sampling_mask: {counts_ids[0].size} rows for {completion.size} completion tokens"
        )

    mask_logprobs = None
    if choice.get("sampling_mask_logprobs") is not None:
        if counts_ids is None:
            raise InlineDecodeError("sampling_mask_logprobs needs the sampling_mask")
        mask_logprobs = decode_array(
            choice["sampling_mask_logprobs"],
            name="sampling_mask_logprobs",
            dtypes={"float32"},
            ndim=1,
        )
        if mask_logprobs.size != counts_ids[1].size:
            raise InlineDecodeError("sampling_mask_logprobs: not parallel to the mask's ids")

    return Turn(
        prompt,
        completion,
        routed_experts=rows,
        sampling_mask=counts_ids,
        sampling_mask_logprobs=mask_logprobs,
        segments=segments,
        completion_logprobs=_completion_logprobs(choice, completion.size),
    )


def _completion_logprobs(choice: Mapping[str, Any], size: int) -> np.ndarray | None:
    if choice.get("completion_logprobs") is not None:
        values = decode_logprobs(choice["completion_logprobs"])
    elif choice.get("logprobs") is not None:
        values = _native_logprobs(choice["logprobs"], "logprobs")
    else:
        return None
    if values.size != size:
        raise InlineDecodeError(f"completion logprobs: {values.size} values for {size} tokens")
    return values


def decode_generate_response(
    body: bytes | str | Mapping[str, Any],
    prompt_ids: np.ndarray,
    *,
    allowed_roots: Sequence[str | StoreRoot] = (),
) -> list[Turn]:
    """Every choice of a ``/inference/v1/generate`` response body, as `Turn` objects."""
    if isinstance(body, (bytes, str)):
        try:
            body = _RESPONSE_DECODER.decode(body)
        except msgspec.DecodeError as exc:
            raise InlineDecodeError(f"response is not JSON: {exc}") from exc
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not isinstance(choices, list) or not all(isinstance(c, Mapping) for c in choices):
        raise InlineDecodeError("response has no list of choices")
    return [decode_choice(c, prompt_ids, allowed_roots=allowed_roots) for c in choices]
