"""Merge nearby byte ranges of one object into fewer requests.

fsspec's ``cat_ranges`` does not merge (its ``max_gap`` raises), and on an object store
a GET costs far more than the bytes of a small gap: merging ranges of one object within
256 KiB halved the GETs of a window read and made every engine 1.6-2x faster against a
local Ceph RGW. The gap bound caps the bytes fetched and thrown away; ``max_block``
caps one request's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Block", "CoalescePolicy", "Piece", "coalesce"]


@dataclass(frozen=True, slots=True)
class CoalescePolicy:
    """Merge two ranges of one object when the gap between them is at most ``max_gap``
    bytes and the merged request stays within ``max_block`` bytes."""

    max_gap: int
    max_block: int


@dataclass(frozen=True, slots=True)
class Block:
    """One request to storage: bytes ``[start, end)`` of ``path``."""

    path: str
    start: int
    end: int

    @property
    def size(self) -> int:
        """Bytes requested."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Piece:
    """Where one asked-for range lies: bytes ``[offset, offset + size)`` of block ``block``."""

    block: int
    offset: int
    size: int


def coalesce(
    ranges: Sequence[tuple[str, int, int]], policy: CoalescePolicy
) -> tuple[list[Block], list[Piece]]:
    """Merge ``(path, start, end)`` ranges into blocks; one `Piece` per input range, in
    input order. Overlapping and duplicate ranges share bytes. Empty ranges get an empty
    piece of block 0's bytes (or of no block when every range is empty)."""
    order = sorted(
        (i for i, r in enumerate(ranges) if r[2] > r[1]), key=lambda i: (ranges[i][0], ranges[i][1])
    )
    blocks: list[Block] = []
    pieces: list[Piece | None] = [None] * len(ranges)
    current_path: str | None = None
    block_start = block_end = 0
    members: list[int] = []

    def close() -> None:
        index = len(blocks)
        assert current_path is not None
        blocks.append(Block(current_path, block_start, block_end))
        for i in members:
            _, start, end = ranges[i]
            pieces[i] = Piece(index, start - block_start, end - start)

    for i in order:
        path, start, end = ranges[i]
        if (
            members
            and path == current_path
            and start - block_end <= policy.max_gap
            and max(end, block_end) - block_start <= policy.max_block
        ):
            block_end = max(block_end, end)
            members.append(i)
            continue
        if members:
            close()
        current_path, block_start, block_end, members = path, start, end, [i]
    if members:
        close()
    return blocks, [p if p is not None else Piece(0, 0, 0) for p in pieces]
