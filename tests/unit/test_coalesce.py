"""Range merging."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from objstore_payload.store.coalesce import Block, CoalescePolicy, Piece, coalesce


def test_merges_within_gap_and_keeps_input_order() -> None:
    blocks, pieces = coalesce(
        [("b", 0, 10), ("a", 100, 110), ("a", 0, 10), ("a", 15, 20)], CoalescePolicy(5, 1 << 20)
    )
    assert blocks == [Block("a", 0, 20), Block("a", 100, 110), Block("b", 0, 10)]
    assert pieces == [Piece(2, 0, 10), Piece(1, 0, 10), Piece(0, 0, 10), Piece(0, 15, 5)]


def test_max_block_splits_long_runs() -> None:
    blocks, _ = coalesce([("a", i * 10, i * 10 + 10) for i in range(10)], CoalescePolicy(0, 30))
    assert blocks == [
        Block("a", 0, 30),
        Block("a", 30, 60),
        Block("a", 60, 90),
        Block("a", 90, 100),
    ]


def test_empty_ranges_need_no_block() -> None:
    blocks, pieces = coalesce([("a", 5, 5)], CoalescePolicy(0, 10))
    assert blocks == []
    assert pieces == [Piece(0, 0, 0)]


ranges = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 500), st.integers(0, 60)).map(
        lambda t: (t[0], t[1], t[1] + t[2])
    ),
    max_size=30,
)


@given(ranges, st.integers(0, 100), st.integers(1, 200))
def test_every_piece_maps_to_its_bytes(
    items: list[tuple[str, int, int]], gap: int, max_block: int
) -> None:
    data = {p: bytes((i * 7 + ord(p)) % 256 for i in range(600)) for p in "abc"}
    blocks, pieces = coalesce(items, CoalescePolicy(gap, max_block))
    fetched = [data[b.path][b.start : b.end] for b in blocks]
    for (path, start, end), piece in zip(items, pieces, strict=True):
        assert piece.size == end - start
        if piece.size:
            assert blocks[piece.block].path == path
            assert (
                fetched[piece.block][piece.offset : piece.offset + piece.size]
                == data[path][start:end]
            )
    longest = max((e - s for _, s, e in items), default=0)
    for block in blocks:
        assert block.size <= max(max_block, longest)
    # Merging never fetches a gap wider than max_gap: each block's bytes are covered by
    # its ranges except for gaps of at most max_gap.
    for index, block in enumerate(blocks):
        spans = sorted(
            (s, e)
            for (p, s, e), pc in zip(items, pieces, strict=True)
            if pc.size and pc.block == index
        )
        covered_to = block.start
        for s, e in spans:
            assert s - covered_to <= gap
            covered_to = max(covered_to, e)
        assert covered_to == block.end
