"""Which token windows a context-parallel rank reads: pure arithmetic, no torch, no I/O.

For a micro batch of n tokens (padded to a multiple of the CP degree c), rank r's share
is ``[r*n/c, (r+1)*n/c)``. Fields on the ``input`` window (routing) read that share; the
sampling mask (``labels`` window) reads ``[lo + 1, hi + 1)``, already on label positions;
``sequence`` fields (mask logprobs) and multimodal micro batches read the whole sequence.
Shared by the trainer adapter and the capacity model, so both plan the same reads.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final, Literal

from objstore_payload.fields import FIELDS, get_field
from objstore_payload.reader import FieldWindow

__all__ = ["MaskWidth", "cp_bounds", "rank_windows"]

MaskWidth = Literal["micro_batch", "window"]
"""How wide a by-segment ragged tensor (sampling mask, its logprobs) is: ``micro_batch``
(the default, as the design has it), the widest row of the whole micro batch: every CP
rank gets the same width, bit for bit what the inline path gives, and every rank reads the
offset words (4 B per row) of every mask segment of the micro batch; ``window``, the
widest row inside the rank's window: each rank reads only its window's offsets (a 32k-token
micro batch of 32 blobs at CP 4: 16 GETs per window instead of 40), and ranks may differ
in width (the cut columns are all fill)."""


def cp_bounds(num_tokens: int, cp_rank: int, cp_size: int) -> tuple[int, int]:
    """``[lo, hi)`` of rank ``cp_rank``'s contiguous share of ``num_tokens`` positions."""
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank {cp_rank} is not in [0, {cp_size})")
    if num_tokens % cp_size:
        raise ValueError(f"{num_tokens} tokens do not split over CP degree {cp_size}; pad first")
    chunk = num_tokens // cp_size
    return cp_rank * chunk, (cp_rank + 1) * chunk


def rank_windows(
    num_tokens: int,
    present: Collection[str],
    cp_rank: int,
    cp_size: int,
    *,
    whole: bool = False,
    mask_width: MaskWidth = "micro_batch",
) -> list[FieldWindow]:
    """The field windows rank ``cp_rank`` reads of the ``present`` fields of a micro batch
    of ``num_tokens`` tokens (``whole``: multimodal, read the whole sequence)."""
    if mask_width not in ("window", "micro_batch"):
        raise ValueError(f"mask_width must be 'window' or 'micro_batch', got {mask_width!r}")
    width_of: Final = "window" if mask_width == "window" else "segments"
    lo, hi = (0, num_tokens) if whole else cp_bounds(num_tokens, cp_rank, cp_size)
    windows = []
    for name in FIELDS:
        if name not in present:
            continue
        window = get_field(name).window
        if whole or window == "sequence":
            start, end = 0, num_tokens
        elif window == "labels":
            start, end = lo + 1, hi + 1
        else:
            start, end = lo, hi
        windows.append(FieldWindow(name, start, end, width_of=width_of))
    return windows
