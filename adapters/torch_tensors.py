"""Trainer tensors for one context-parallel rank of a micro batch (needs torch).

A by-segment text micro batch is read for the rank's own window only, in one read pass:
routing (and router weights) over the rank's input positions ``[lo, hi)``, the sampling
mask over ``[lo + 1, hi + 1)`` (already on label positions: the logit at t predicts token
t + 1; the last rank's final position reads -1), mask logprobs over the whole sequence.
Those tensors come back with ``cp_windowed=True``. An inline micro batch, and a multimodal
one (the model may defer context parallelism), gives whole, unshifted tensors with
``cp_windowed=False``; `window_for_rank` then applies the usual shift-left and contiguous
CP split, and the two paths agree bit for bit. With ``mask_width="window"`` a rank's mask
is only as wide as the widest row in its window, the inline tensor's extra columns being
all fill (see `MaskWidth`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import torch

from objstore_payload.adapters.rollout import FIXED_FIELDS, RAGGED_FIELDS, MicroBatch, PackedCsr
from objstore_payload.codec import decode_array
from objstore_payload.fields import FIELDS, get_field
from objstore_payload.reader import FieldWindow, PayloadReader
from objstore_payload.windows import MaskWidth, cp_bounds, rank_windows

__all__ = [
    "MaskWidth",
    "PayloadTensors",
    "amicro_batch_tensors",
    "cp_bounds",
    "micro_batch_tensors",
    "plan_window",
    "shard_for_cp",
    "shift_left",
    "window_for_rank",
]

ROUTING_DTYPE: Final = torch.int32
"""Expert ids as the router replay consumes them."""


@dataclass(frozen=True)
class PayloadTensors:
    """The payload tensors of one micro batch for one CP rank (None: field absent)."""

    routed_experts: torch.Tensor | None
    routed_expert_weights: torch.Tensor | None
    sampling_mask: torch.Tensor | None
    sampling_mask_logprobs: torch.Tensor | None
    cp_windowed: bool
    """True: routing and weights are the rank's input window and the mask its label
    window, ready to use. False: whole, unshifted tensors; apply `window_for_rank`."""

    def as_dict(self) -> dict[str, torch.Tensor | None]:
        """The tensors by field name."""
        return {name: getattr(self, name) for name in FIELDS}


def shard_for_cp(tensor: torch.Tensor, cp_rank: int, cp_size: int) -> torch.Tensor:
    """The rank's contiguous chunk of the sequence dimension (like ``torch.chunk``)."""
    lo, hi = cp_bounds(tensor.shape[0], cp_rank, cp_size)
    return tensor[lo:hi]


def shift_left(tensor: torch.Tensor, fill: float) -> torch.Tensor:
    """Row t becomes row t + 1; the last row is ``fill`` (inputs -> label positions)."""
    out = torch.empty_like(tensor)
    out[:-1] = tensor[1:]
    out[-1:] = fill
    return out


def window_for_rank(tensors: PayloadTensors, cp_rank: int, cp_size: int) -> PayloadTensors:
    """Whole tensors -> the rank's window: routing and weights sharded, the mask shifted
    left then sharded, whole-sequence fields unchanged. Windowed tensors pass through."""
    if tensors.cp_windowed:
        return tensors
    out: dict[str, torch.Tensor | None] = {}
    for name, tensor in tensors.as_dict().items():
        spec = get_field(name)
        if tensor is None or spec.window == "sequence":
            out[name] = tensor
        elif spec.window == "labels":
            out[name] = shard_for_cp(shift_left(tensor, spec.fill), cp_rank, cp_size)
        else:
            out[name] = shard_for_cp(tensor, cp_rank, cp_size)
    return replace(tensors, cp_windowed=True, **out)


def _to_tensor(array: np.ndarray | None, name: str) -> torch.Tensor | None:
    if array is None:
        return None
    if name == "routed_experts":
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int32))
    # Arrays from numpy's frombuffer are read-only; torch wants writable memory.
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def _dense(csr: PackedCsr, name: str) -> np.ndarray:
    spec = get_field(name)
    counts = decode_array(csr.counts, name=f"{name}.counts")
    values = decode_array(csr.values, name=f"{name}.values")
    width = max(int(counts.max(initial=0)), 1)
    out = np.full((counts.size, width), spec.fill, dtype=np.dtype(spec.value_dtype))
    out[np.arange(width) < counts[:, None]] = values
    return out


def _inline_tensors(micro_batch: MicroBatch) -> PayloadTensors:
    if micro_batch.transport == "none":  # nothing to window
        return PayloadTensors(None, None, None, None, cp_windowed=True)
    arrays: dict[str, np.ndarray | None] = {}
    for name in FIXED_FIELDS:
        packed = getattr(micro_batch, name)
        arrays[name] = None if packed is None else decode_array(packed, name=name)
    for name in RAGGED_FIELDS:
        csr = getattr(micro_batch, name)
        arrays[name] = None if csr is None else _dense(csr, name)
    return PayloadTensors(
        **{name: _to_tensor(arrays[name], name) for name in FIELDS}, cp_windowed=False
    )


def plan_window(
    micro_batch: MicroBatch, cp_rank: int, cp_size: int, mask_width: MaskWidth = "micro_batch"
) -> list[FieldWindow]:
    """The field windows a rank reads from a by-segment micro batch."""
    return rank_windows(
        micro_batch.num_tokens,
        {s.field for s in micro_batch.segments},
        cp_rank,
        cp_size,
        whole=micro_batch.multimodal,
        mask_width=mask_width,
    )


def micro_batch_tensors(
    micro_batch: MicroBatch,
    *,
    cp_rank: int = 0,
    cp_size: int = 1,
    reader: PayloadReader | None = None,
    mask_width: MaskWidth = "micro_batch",
) -> PayloadTensors:
    """The payload tensors of ``micro_batch`` for CP rank ``cp_rank`` of ``cp_size``.

    By-segment micro batches need ``reader`` and cost one read pass (two round trips when
    a ragged field is present: its offsets first); see the module doc for windows and
    `MaskWidth` for the width of ragged tensors.
    """
    if not micro_batch.segments:
        return _inline_tensors(micro_batch)
    if reader is None:
        raise ValueError("a by-segment micro batch needs a PayloadReader")
    windows = plan_window(micro_batch, cp_rank, cp_size, mask_width)
    arrays = dict(
        zip(
            (w.field for w in windows),
            reader.read_window(micro_batch.segments, windows),
            strict=True,
        )
    )
    return _from_read(arrays, windowed=not micro_batch.multimodal)


async def amicro_batch_tensors(
    micro_batch: MicroBatch,
    *,
    cp_rank: int = 0,
    cp_size: int = 1,
    reader: PayloadReader | None = None,
    mask_width: MaskWidth = "micro_batch",
) -> PayloadTensors:
    """Async `micro_batch_tensors`."""
    if not micro_batch.segments:
        return _inline_tensors(micro_batch)
    if reader is None:
        raise ValueError("a by-segment micro batch needs a PayloadReader")
    windows = plan_window(micro_batch, cp_rank, cp_size, mask_width)
    read = await reader.aread_window(micro_batch.segments, windows)
    arrays = dict(zip((w.field for w in windows), read, strict=True))
    return _from_read(arrays, windowed=not micro_batch.multimodal)


def _from_read(arrays: Mapping[str, np.ndarray | None], *, windowed: bool) -> PayloadTensors:
    return PayloadTensors(
        **{name: _to_tensor(arrays.get(name), name) for name in FIELDS}, cp_windowed=windowed
    )
