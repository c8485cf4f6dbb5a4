"""The inline packed codec: arrays inside a JSON response, without a Python object per token.

Requests without a payload destination carry their arrays inline, and the inline form is
the reference that by-segment reads must equal bit for bit. Every array is
``{"data": base64(raw little-endian C-contiguous bytes), "shape": [...], "dtype": "..."}``;
routing adds ``start`` (the token position of its first row); a CSR mask is
``{"ids": <packed int32>, "counts": <packed int32>}``; completion logprobs are one
packed float32 array.

Decoding checks that shape, dtype and byte length agree and names what disagrees; it
never returns an array that silently reinterprets bytes.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, Final, TypeVar

import msgspec
import numpy as np

from objstore_payload.dtypes import DTYPE_NAMES, dtype_from_name, name_of_dtype
from objstore_payload.errors import InlineDecodeError, InvalidPayloadError
from objstore_payload.segment import MAX_POSITION

__all__ = [
    "PackedArray",
    "PackedMask",
    "PackedRouting",
    "decode_array",
    "decode_logprobs",
    "decode_mask",
    "decode_routing",
    "encode_array",
    "encode_logprobs",
    "encode_mask",
    "encode_routing",
    "to_builtins",
]

ROUTING_DTYPES: Final = frozenset({"uint8", "uint16", "int16", "int32"})
"""Routing dtypes accepted on decode (vLLM versions differ; writers send uint8/uint16)."""
MAX_NDIM: Final = 8
MAX_DIM: Final = 1 << 40
"""No real array dimension comes near this; a larger one is a hostile shape."""

_T = TypeVar("_T")


class PackedArray(msgspec.Struct, frozen=True):
    """One array: raw bytes (base64 in JSON), its shape and its dtype name."""

    data: bytes
    shape: tuple[int, ...]
    dtype: str


class PackedRouting(msgspec.Struct, frozen=True):
    """Routing rows ``[rows, layers, top_k]`` whose first row is token position ``start``."""

    data: bytes
    shape: tuple[int, ...]
    dtype: str
    start: int


class PackedMask(msgspec.Struct, frozen=True):
    """A CSR ragged field: row i holds ``counts[i]`` entries of ``ids``."""

    ids: PackedArray
    counts: PackedArray


def encode_array(array: np.ndarray) -> PackedArray:
    """Pack ``array`` (any allow-listed dtype, any byte order) as little-endian bytes."""
    name = name_of_dtype(array.dtype, error=InvalidPayloadError)
    data = np.ascontiguousarray(array, dtype=dtype_from_name(name))
    return PackedArray(data=data.tobytes(), shape=tuple(int(d) for d in array.shape), dtype=name)


def encode_routing(rows: np.ndarray, start: int) -> PackedRouting:
    """Pack routing rows whose first row belongs to token position ``start``."""
    packed = encode_array(rows)
    return PackedRouting(data=packed.data, shape=packed.shape, dtype=packed.dtype, start=start)


def _as_int32(values: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise InvalidPayloadError(f"{name} must be integers, got {array.dtype}")
    cast = array.astype(np.int32, copy=False)
    if cast.dtype != array.dtype and not np.array_equal(cast, array):
        raise InvalidPayloadError(f"{name} values do not fit int32")
    return cast


def encode_mask(counts: np.ndarray, ids: np.ndarray) -> PackedMask:
    """Pack a CSR mask as int32 ``counts`` and ``ids`` (values that do not fit refused)."""
    return PackedMask(
        ids=encode_array(_as_int32(ids, "sampling_mask ids")),
        counts=encode_array(_as_int32(counts, "sampling_mask counts")),
    )


def encode_logprobs(logprobs: np.ndarray) -> PackedArray:
    """Pack one float32 logprob per completion token."""
    return encode_array(np.asarray(logprobs, dtype=np.float32))


def to_builtins(packed: PackedArray | PackedRouting | PackedMask) -> dict[str, Any]:
    """The JSON-ready dict form (base64 strings) of a packed value."""
    result: dict[str, Any] = msgspec.to_builtins(packed)
    return result


def _convert(obj: object, kind: type[_T], name: str) -> _T:
    if isinstance(obj, kind):
        return obj
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise InlineDecodeError(f"{name}: not a packed array: {exc}") from exc


def _check_array(
    data: bytes,
    shape: tuple[int, ...],
    dtype: str,
    *,
    name: str,
    dtypes: Collection[str] | None,
    ndim: int | None,
) -> np.ndarray:
    if dtype not in DTYPE_NAMES or (dtypes is not None and dtype not in dtypes):
        allowed = sorted(dtypes if dtypes is not None else DTYPE_NAMES)
        raise InlineDecodeError(
            f"{name}: dtype {dtype!r} is not allowed; expected one of {allowed}"
        )
    if len(shape) > MAX_NDIM or any(not 0 <= d <= MAX_DIM for d in shape):
        raise InlineDecodeError(f"{name}: shape {list(shape)} is not a valid array shape")
    if ndim is not None and len(shape) != ndim:
        raise InlineDecodeError(
            f"{name}: expected {ndim} dimensions, shape {list(shape)} has {len(shape)}"
        )
    np_dtype = dtype_from_name(dtype)
    expected = math.prod(shape) * np_dtype.itemsize
    if expected != len(data):
        raise InlineDecodeError(
            f"{name}: shape {list(shape)} of {dtype} needs {expected} bytes, data has {len(data)}"
        )
    return np.frombuffer(data, dtype=np_dtype).reshape(shape)


def decode_array(
    obj: object,
    *,
    name: str = "array",
    dtypes: Collection[str] | None = None,
    ndim: int | None = None,
) -> np.ndarray:
    """A read-only array from a `PackedArray` or its dict form.

    ``dtypes`` and ``ndim`` narrow what is accepted; ``name`` is used in error messages.
    """
    packed = _convert(obj, PackedArray, name)
    return _check_array(
        packed.data, packed.shape, packed.dtype, name=name, dtypes=dtypes, ndim=ndim
    )


def decode_routing(obj: object, *, name: str = "routed_experts") -> tuple[np.ndarray, int]:
    """``(rows [n, layers, top_k], start)`` from a `PackedRouting` or its dict form."""
    packed = _convert(obj, PackedRouting, name)
    rows = _check_array(
        packed.data, packed.shape, packed.dtype, name=name, dtypes=ROUTING_DTYPES, ndim=3
    )
    if not 0 <= packed.start <= MAX_POSITION:
        raise InlineDecodeError(
            f"{name}: start must lie in [0, {MAX_POSITION}], got {packed.start}"
        )
    if rows.dtype.kind == "i" and rows.size and int(rows.min()) < 0:
        raise InlineDecodeError(f"{name}: expert ids must be non-negative")
    return rows, packed.start


def decode_mask(obj: object, *, name: str = "sampling_mask") -> tuple[np.ndarray, np.ndarray]:
    """``(counts, ids)`` as int32 from a `PackedMask` or its dict form; checks that the
    counts are non-negative and add up to the number of ids."""
    packed = _convert(obj, PackedMask, name)
    counts = decode_array(packed.counts, name=f"{name}.counts", dtypes={"int32"}, ndim=1)
    ids = decode_array(packed.ids, name=f"{name}.ids", dtypes={"int32"}, ndim=1)
    if counts.size and int(counts.min()) < 0:
        raise InlineDecodeError(f"{name}.counts: counts must be non-negative")
    total = int(counts.sum(dtype=np.int64))
    if total != ids.size:
        raise InlineDecodeError(f"{name}: counts add up to {total} but there are {ids.size} ids")
    return counts, ids


def decode_logprobs(obj: object, *, name: str = "completion_logprobs") -> np.ndarray:
    """One float32 per completion token from a `PackedArray` or its dict form."""
    return decode_array(obj, name=name, dtypes={"float32"}, ndim=1)
